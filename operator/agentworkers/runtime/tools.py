"""The tools a run may call, and the toolbox that decides which ones it is offered.

A tool the effective configuration does not allow is hidden: it is never offered to
the model, and a call to it anyway comes back as an error result without running.
Failures are results too (``{"error": ...}``): the model sees them and carries on.

Sandbox tools (``list_files``, ``read_file``, ``write_file``) stay inside the run's
sandbox directory. Planner tools (``spawn_worker``, ``inspect_worker``,
``collect_worker``, ``kill_worker``) drive child workers through a ``WorkerOps``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema  # type: ignore[import-untyped, unused-ignore]

from agentworkers.api.worker import MAX_INPUTS
from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.models import ToolSpec

MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 1000
MAX_COLLECT_SECONDS = 600

Handler = Callable[[dict[str, Any]], dict[str, Any]]


class ToolError(Exception):
    """A failure the model should read (a bad path, a missing file)."""


@dataclass(frozen=True)
class Tool:
    """``parameters`` is the JSON Schema of the arguments; ``handler`` gets them
    validated and returns a JSON-able dict."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


@dataclass(frozen=True)
class ToolResult:
    result: dict[str, Any] | None = None
    error: str | None = None

    def payload(self) -> dict[str, Any]:
        """What the model reads, and what the tool_result event carries."""
        return {"error": self.error} if self.error is not None else {"result": self.result}


class Toolbox:
    """The tools on offer: registered, listed in ``allowed``, not ``disabled``, and not
    of a ``paused`` MCP server (tools named ``<server>.<tool>``)."""

    def __init__(
        self,
        tools: Iterable[Tool],
        allowed: Iterable[str],
        disabled: Iterable[str] = (),
        paused_servers: Iterable[str] = (),
    ) -> None:
        allowed_set, disabled_set, paused = set(allowed), set(disabled), set(paused_servers)
        self._offered = {
            t.name: t
            for t in tools
            if t.name in allowed_set
            and t.name not in disabled_set
            and not (("." in t.name) and t.name.partition(".")[0] in paused)
        }

    @classmethod
    def for_config(cls, config: EffectiveConfig, tools: Iterable[Tool]) -> Toolbox:
        return cls(tools, config.tools, config.disabled_tools, config.paused_servers)

    def names(self) -> list[str]:
        return sorted(self._offered)

    def specs(self) -> list[ToolSpec]:
        return [self._offered[name].spec() for name in self.names()]

    def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        tool = self._offered.get(name)
        if tool is None:
            return ToolResult(error=f"tool {name!r} is not available to this run")
        try:
            jsonschema.validate(args, tool.parameters)
        except jsonschema.ValidationError as e:
            return ToolResult(error=f"invalid arguments for {name} at {e.json_path}: {e.message}")
        try:
            return ToolResult(result=tool.handler(args))
        except ToolError as e:
            return ToolResult(error=str(e))
        except Exception as e:  # the run outlives a failing tool; the model reads why
            return ToolResult(error=f"{name} failed: {type(e).__name__}: {e}")


def _schema(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_STRING = {"type": "string"}


class Sandbox:
    """Paths relative to one directory, refused when they resolve outside it (``..``,
    absolute paths, symlinks out). Not a security boundary: the pod is."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    def resolve(self, path: str) -> str:
        if os.path.isabs(path):
            raise ToolError(f"path {path!r} is absolute; use a path relative to the sandbox")
        full = os.path.realpath(os.path.join(self.root, path))
        if os.path.commonpath([self.root, full]) != self.root:
            raise ToolError(f"path {path!r} is outside the sandbox")
        return full

    def list_files(self, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path", ".")
        full = self.resolve(path)
        if not os.path.isdir(full):
            raise ToolError(f"{path!r} is not a directory")
        with os.scandir(full) as it:
            entries = sorted(
                ({"name": e.name, "dir": e.is_dir()} for e in it), key=lambda e: str(e["name"])
            )
        return {
            "path": path,
            "entries": entries[:MAX_LIST_ENTRIES],
            "truncated": len(entries) > MAX_LIST_ENTRIES,
        }

    def read_file(self, args: dict[str, Any]) -> dict[str, Any]:
        path = args["path"]
        full = self.resolve(path)
        if not os.path.isfile(full):
            raise ToolError(f"{path!r} is not a file")
        with open(full, "rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
        return {
            "path": path,
            "content": data[:MAX_READ_BYTES].decode("utf-8", "replace"),
            "truncated": len(data) > MAX_READ_BYTES,
        }

    def write_file(self, args: dict[str, Any]) -> dict[str, Any]:
        path, content = args["path"], args["content"]
        full = self.resolve(path)
        if os.path.isdir(full):
            raise ToolError(f"{path!r} is a directory")
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(content)
        return {"path": path, "bytes": len(content.encode())}

    def tools(self) -> list[Tool]:
        return [
            Tool(
                "list_files",
                f"List a directory of the sandbox (at most {MAX_LIST_ENTRIES} entries).",
                _schema({"path": _STRING}),
                self.list_files,
            ),
            Tool(
                "read_file",
                f"Read a text file of the sandbox (the first {MAX_READ_BYTES} bytes).",
                _schema({"path": _STRING}, ["path"]),
                self.read_file,
            ),
            Tool(
                "write_file",
                "Write a text file in the sandbox, replacing it; creates parent directories.",
                _schema({"path": _STRING, "content": _STRING}, ["path", "content"]),
                self.write_file,
            ),
        ]


class WorkerOps(Protocol):
    """Child-worker operations a planner's tools call (Kubernetes-backed in a pod)."""

    def spawn(
        self, name: str, message: str, profile: str | None, inputs: list[str], description: str
    ) -> dict[str, Any]: ...

    def inspect(self, name: str, since: int) -> dict[str, Any]: ...

    def collect(self, name: str, timeout: float) -> dict[str, Any]: ...

    def kill(self, name: str, reason: str) -> dict[str, Any]: ...


def planner_tools(ops: WorkerOps) -> list[Tool]:
    return [
        Tool(
            "spawn_worker",
            "Start a child worker with a first message and a one-line description of what it "
            "is for, optionally under a virtual profile, optionally with files of your sandbox "
            "as its inputs (paths; the child finds them as inputs/<file name>, within what its "
            "profile allows).",
            _schema(
                {
                    "name": _STRING,
                    "message": _STRING,
                    "description": _STRING,
                    "profile": {"type": ["string", "null"]},
                    "inputs": {"type": "array", "items": _STRING, "maxItems": MAX_INPUTS},
                },
                ["name", "message"],
            ),
            lambda a: ops.spawn(
                a["name"],
                a["message"],
                a.get("profile"),
                a.get("inputs", []),
                a.get("description", ""),
            ),
        ),
        Tool(
            "inspect_worker",
            "A child worker's status and its events after index `since`.",
            _schema({"name": _STRING, "since": {"type": "integer", "minimum": 0}}, ["name"]),
            lambda a: ops.inspect(a["name"], a.get("since", 0)),
        ),
        Tool(
            "collect_worker",
            "Wait (up to `timeout` seconds) for a child worker to settle; return its output.",
            _schema(
                {
                    "name": _STRING,
                    "timeout": {"type": "number", "minimum": 1, "maximum": MAX_COLLECT_SECONDS},
                },
                ["name"],
            ),
            lambda a: ops.collect(a["name"], float(a.get("timeout", 60))),
        ),
        Tool(
            "kill_worker",
            "Stop a child worker, saying why.",
            _schema(
                {"name": _STRING, "reason": {"type": "string", "minLength": 1}}, ["name", "reason"]
            ),
            lambda a: ops.kill(a["name"], a["reason"]),
        ),
    ]
