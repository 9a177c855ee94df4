"""The MCP servers of one run, through the official `mcp` SDK over streamable HTTP.

At run start the runtime connects to each server its effective config keeps, sending the
headers its Secrets give, and lists the server's tools (again whenever the server says
`notifications/tools/list_changed`). Each tool becomes a `Tool` named `<server>__<tool>`
(`agentworkers.api.names`); the Toolbox decides which of them the model is offered.

The agent loop runs on threads; the SDK is asyncio. One event loop on a background
thread holds every session; a tool call from the loop's thread is handed to it
(`run_coroutine_threadsafe`) and waited for, with the server's `timeoutSeconds`. `close`
ends every session on that loop (each leaves its context as it entered it) and stops it.

The sessions speak the initialize handshake (protocol 2025-11-25), which every server
takes, and in which a server announces a changed tool list on its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentworkers import __version__
from agentworkers.api.mcp import McpServer
from agentworkers.api.names import mcp_tool_name
from agentworkers.api.worker import MAX_MCP_STATUS_TOOLS, MAX_REASON_BYTES, McpServerStatus
from agentworkers.core.pods import SECRETS_DIR
from agentworkers.runtime.tools import Tool, ToolError

if TYPE_CHECKING:  # the SDK is imported by the runs that connect (60 MB, half a second)
    from mcp import Client, types

log = logging.getLogger(__name__)

CONNECTED, UNAVAILABLE = "Connected", "Unavailable"
MAX_PAGES = 20  # a tools/list that pages on and on is cut here
MAX_INLINE = 512  # characters of one binary field (base64) the model is given; longer: a note
CLOSE_SECONDS = 10.0


@dataclass
class Connection:
    """One server: its session once connected, the tools it lists, or why it is not."""

    server: McpServer
    state: str = UNAVAILABLE
    error: str = ""
    tools: dict[str, types.Tool] = field(default_factory=dict)
    client: Client | None = None

    def status(self, offered: Callable[[str], bool] = lambda _: True) -> McpServerStatus:
        """What the Worker status says of it; `offered`: whether a tool name is on offer."""
        names = [n for n in (mcp_tool_name(self.server.name, t) for t in self.tools) if offered(n)]
        return McpServerStatus(
            name=self.server.name,
            url=self.server.url,
            required=self.server.required,
            state=self.state,
            tools=tuple(sorted(names)[:MAX_MCP_STATUS_TOOLS]),  # the status's bound
            message=self.error[:MAX_REASON_BYTES],
        )


def secret_headers(server: McpServer, mounts: Path | None = None) -> dict[str, str]:
    """The server's headers from the Secret keys mounted into the pod (under
    AGENTWORKERS_SECRETS_DIR where the local pod runner puts them). A missing key raises
    ToolError naming the Secret and key, never a value."""
    root = mounts or Path(os.environ.get("AGENTWORKERS_SECRETS_DIR", SECRETS_DIR))
    headers = {}
    for header in server.headers_from:
        ref = header.secret_key_ref
        path = root / ref.name / ref.key
        if not path.is_file():
            raise ToolError(f"header {header.name}: Secret {ref.name} has no key {ref.key} mounted")
        headers[header.name] = header.prefix + path.read_text().strip()
    return headers


def _why(error: BaseException) -> str:
    """The first real failure inside the task groups an SDK error comes wrapped in."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if text != type(error).__name__ else text


def _short(value: Any) -> Any:
    """A content block for the model: base64 data and blobs replaced by their size."""
    if isinstance(value, dict):
        return {
            k: f"<{len(v)} characters of base64 omitted>"
            if k in {"data", "blob"} and isinstance(v, str) and len(v) > MAX_INLINE
            else _short(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def result_payload(result: types.CallToolResult) -> dict[str, Any]:
    """What the model reads of a call's result; an `isError` result raises ToolError with
    the server's text, which the model reads as the error."""
    blocks = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content]
    if result.is_error:
        text = "\n".join(b["text"] for b in blocks if b.get("type") == "text")
        raise ToolError(text or "the tool reported an error (isError) without a message")
    payload: dict[str, Any] = {"content": _short(blocks)}
    if result.structured_content is not None:
        payload["structuredContent"] = result.structured_content
    return payload


class McpServers:
    """The sessions of one run's MCP servers, on their own event loop thread."""

    def __init__(
        self,
        servers: Sequence[McpServer],
        headers: Callable[[McpServer], dict[str, str]] = secret_headers,
    ) -> None:
        self.connections = [Connection(server) for server in servers]
        self._headers = headers
        # Called (on the MCP thread) after a server's tool list changed.
        self.on_change: Callable[[Connection], None] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp", daemon=True)
        self._stop: asyncio.Event | None = None
        self._sessions: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()  # tool list refreshes under way

    # --- the run's side (any thread) -------------------------------------------------------

    def start(self) -> list[Connection]:
        """Connect to every server at once, each within its timeout; returns them all,
        connected or not (`state`, `error`)."""
        if self.connections:
            self._thread.start()
            self._run(self._open_all(), None)
        return self.connections

    def required_down(self) -> list[Connection]:
        return [c for c in self.connections if c.server.required and c.state != CONNECTED]

    def tools(self) -> list[Tool]:
        """Every tool of every connected server as listed now, named `<server>__<tool>`."""
        return [
            Tool(
                mcp_tool_name(c.server.name, tool.name),
                tool.description or tool.title or f"{tool.name} of MCP server {c.server.name}",
                tool.input_schema,
                self._handler(c, tool.name),
            )
            for c in list(self.connections)
            if c.state == CONNECTED
            for tool in list(c.tools.values())
        ]

    def close(self) -> None:
        """End every session (each on the task that opened it) and stop the loop."""
        if not self._thread.is_alive():
            self._loop.close()
            return
        with contextlib.suppress(Exception):
            self._run(self._close_all(), CLOSE_SECONDS)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_SECONDS)
        if not self._thread.is_alive():
            self._loop.close()

    def _run(self, coroutine: Any, timeout: float | None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def _handler(self, connection: Connection, tool: str) -> Callable[[dict[str, Any]], Any]:
        def call(args: dict[str, Any]) -> dict[str, Any]:
            timeout = connection.server.timeout_seconds
            future = asyncio.run_coroutine_threadsafe(
                self._call(connection, tool, args), self._loop
            )
            try:
                # The coroutine keeps its own time; this wait only guards against a stuck loop.
                return future.result(timeout + CLOSE_SECONDS)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise ToolError(_timed_out(connection, tool)) from None

        return call

    # --- on the MCP loop -------------------------------------------------------------------

    async def _open_all(self) -> None:
        self._stop = asyncio.Event()
        opened = []
        for connection in self.connections:
            ready: asyncio.Future[None] = self._loop.create_future()
            self._sessions.append(asyncio.create_task(self._session(connection, ready)))
            opened.append(self._await_ready(connection, ready, self._sessions[-1]))
        await asyncio.gather(*opened)

    async def _await_ready(
        self, connection: Connection, ready: asyncio.Future[None], session: asyncio.Task[None]
    ) -> None:
        timeout = connection.server.timeout_seconds
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            connection.error = f"no answer within {timeout} s (timeoutSeconds)"
            session.cancel()
        except Exception as e:
            connection.error = _why(e)
        else:
            connection.state = CONNECTED
            return
        connection.state = UNAVAILABLE
        log.warning(
            "MCP server %s (%s): %s",
            connection.server.name,
            connection.server.url,
            connection.error,
        )

    async def _session(self, connection: Connection, ready: asyncio.Future[None]) -> None:
        """Hold one server's session open until the run ends (or it breaks)."""
        from mcp import Client, types  # noqa: PLC0415 (see the imports)
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415
        from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: PLC0415

        server = connection.server
        try:
            headers = self._headers(server)
            async with (
                create_mcp_http_client(headers=headers) as http,
                Client(
                    streamable_http_client(server.url, http_client=http),
                    mode="legacy",
                    cache=None,
                    message_handler=lambda message: self._on_message(connection, message),
                    client_info=types.Implementation(name="agentworkers", version=__version__),
                ) as client,
            ):
                connection.client = client
                await self._list_tools(connection)
                ready.set_result(None)
                assert self._stop is not None
                await self._stop.wait()
        except (Exception, BaseExceptionGroup) as e:
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(_why(e)))
            else:  # it broke during the run: its tools go, their calls would only fail
                connection.state, connection.error = UNAVAILABLE, _why(e)
                log.warning("MCP server %s: session ended: %s", server.name, connection.error)
        finally:
            connection.client = None

    async def _list_tools(self, connection: Connection) -> None:
        assert connection.client is not None
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await connection.client.list_tools(cursor=cursor)
            tools.update((tool.name, tool) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        connection.tools = tools

    async def _on_message(self, connection: Connection, message: Any) -> None:
        from mcp import types  # noqa: PLC0415 (see the imports)

        if isinstance(message, types.ToolListChangedNotification):
            # Listed on a task of its own: the session's reader is not kept waiting.
            task = asyncio.create_task(self._relist(connection))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _relist(self, connection: Connection) -> None:
        try:
            await asyncio.wait_for(self._list_tools(connection), connection.server.timeout_seconds)
        except Exception as e:
            log.warning(
                "MCP server %s: listing its changed tools failed: %s",
                connection.server.name,
                _why(e),
            )
            return
        if self.on_change is not None:
            self.on_change(connection)

    async def _call(
        self, connection: Connection, tool: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        client = connection.client
        if client is None:
            raise ToolError(
                f"MCP server {connection.server.name} is unavailable: {connection.error}"
            )
        timeout = connection.server.timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                result = await client.call_tool(tool, args, read_timeout_seconds=timeout)
        except TimeoutError:
            raise ToolError(_timed_out(connection, tool)) from None
        except Exception as e:
            raise ToolError(f"MCP server {connection.server.name}: {_why(e)}") from e
        return result_payload(result)

    async def _close_all(self) -> None:
        if self._stop is not None:
            self._stop.set()
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._sessions, *self._pending, return_exceptions=True)


def _timed_out(connection: Connection, tool: str) -> str:
    return (
        f"{mcp_tool_name(connection.server.name, tool)} timed out after "
        f"{connection.server.timeout_seconds} s (timeoutSeconds)"
    )
