"""MCP servers an agent's runs connect to, and the Secret keys their headers come from."""

from __future__ import annotations

from pydantic import Field, StrictInt, StrictStr

from agentworkers.api.common import KubeModel, SubdomainName
from agentworkers.api.names import MAX_MCP_SERVER_NAME, MCP_SERVER_NAME_PATTERN

Name = StrictStr


class SecretKeyRef(KubeModel):
    """One key of a Secret in the agent's namespace."""

    name: SubdomainName = Field(
        description="The Secret; it must be one of the AgentConfig's spec.allowedSecrets."
    )
    key: StrictStr = Field(
        description="The key within the Secret.",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
    )


class McpHeader(KubeModel):
    """An HTTP header sent with every request to an MCP server, its value from a Secret."""

    name: StrictStr = Field(
        description="Header name, e.g. Authorization.",
        min_length=1,
        max_length=128,
        pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
    )
    secret_key_ref: SecretKeyRef = Field(
        description="Where the value is: mounted read-only into the worker pods that keep "
        "this server, never written into a spec, an effective config or an event."
    )
    prefix: StrictStr = Field(
        default="",
        description='Put before the Secret\'s value, e.g. "Bearer ".',
        max_length=64,
    )


DEFAULT_MCP_TIMEOUT_SECONDS = 30
MAX_MCP_TIMEOUT_SECONDS = 600


class McpServer(KubeModel):
    """An MCP server whose tools the agent's runs are offered as `<name>__<tool>`."""

    # Each run connects when it starts (streamable HTTP), lists the server's tools (again
    # when the server says they changed), unless a Worker's mcps, a profile's pausedServers
    # or disabledTools hide them: docs/agents.md.

    name: StrictStr = Field(
        description="Names the server in Worker mcps, a profile's pausedServers and its tools' "
        "names (`<name>__<tool>`): letters, digits, `-`, single `_` (never `__`), at most "
        f"{MAX_MCP_SERVER_NAME} characters.",
        min_length=1,
        max_length=MAX_MCP_SERVER_NAME,
        pattern=MCP_SERVER_NAME_PATTERN,
    )
    url: StrictStr = Field(
        description="The server's streamable HTTP endpoint, e.g. "
        "http://search-mcp.tools.svc:8080/mcp.",
        min_length=1,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
    )
    tools: tuple[Name, ...] = Field(
        default=(),
        description="Allow-list: only these of the server's tools are offered (as the server "
        "names them, without the prefix); empty offers every tool it lists.",
    )
    headers_from: tuple[McpHeader, ...] = Field(
        default=(),
        description="Headers sent with every request (e.g. Authorization), each from a key of "
        "a Secret that spec.allowedSecrets lists.",
    )
    required: bool = Field(
        default=False,
        description="A run cannot go without this server: when it cannot be reached at run "
        "start the run fails (McpServerUnavailable). Otherwise the run goes on without its "
        "tools, and a Warning Event names the server.",
    )
    timeout_seconds: StrictInt = Field(
        default=DEFAULT_MCP_TIMEOUT_SECONDS,
        description="Longest a connection, a tool listing or one tool call may take; a call "
        "that takes longer comes back to the model as an error.",
        ge=1,
        le=MAX_MCP_TIMEOUT_SECONDS,
    )

    def secrets(self) -> set[str]:
        """The Secrets its headers come from."""
        return {header.secret_key_ref.name for header in self.headers_from}
