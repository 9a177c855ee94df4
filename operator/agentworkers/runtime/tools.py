"""The tools a run may call, and the toolbox that decides which ones it is offered.

A tool the effective configuration does not allow is hidden: it is never offered to
the model, and a call to it anyway comes back as an error result without running. MCP
servers' tools (``runtime.mcp``) are offered under the same rules, named
``<server>__<tool>``.
Failures are results too (``{"error": ...}``): the model sees them and carries on.

Sandbox tools (``list_files``, ``read_file``, ``write_file``, ``run_command``) act in
the run's sandbox directory (``runtime.sandbox``). Planner tools (``spawn_worker``,
``inspect_worker``, ``collect_worker``, ``kill_worker``) drive child workers through a
``WorkerOps``.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema  # type: ignore[import-untyped, unused-ignore]

from agentworkers.api.mcp import McpServer
from agentworkers.api.names import TOOL_NAME_PATTERN, mcp_tool_of
from agentworkers.api.worker import MAX_INPUTS
from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime import sandbox
from agentworkers.runtime.models import ToolSpec

MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 1000
MAX_COLLECT_SECONDS = 600
MAX_OUTPUT_BYTES = 64 * 1024  # of a command's stdout, and of its stderr
DEFAULT_COMMAND_SECONDS = 60
MAX_COMMAND_SECONDS = 600

Handler = Callable[[dict[str, Any]], dict[str, Any]]
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)


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
    """The tools on offer. A built-in tool: registered, listed in ``allowed``, not
    ``disabled``. An MCP tool (``<server>__<tool>``, as ``mcp`` lists them now): of a kept
    server (``servers``), not a ``paused`` one, in the server's ``tools`` allow-list (empty:
    all), its name not ``disabled``, and a name the model APIs take."""

    def __init__(
        self,
        tools: Iterable[Tool],
        allowed: Iterable[str],
        disabled: Iterable[str] = (),
        paused_servers: Iterable[str] = (),
        servers: Iterable[McpServer] = (),
        mcp: Callable[[], Iterable[Tool]] | None = None,
    ) -> None:
        allowed_set, self._disabled = set(allowed), set(disabled)
        self._builtin = {
            t.name: t for t in tools if t.name in allowed_set and t.name not in self._disabled
        }
        paused = set(paused_servers)
        self._servers = {s.name: s for s in servers if s.name not in paused}
        self._mcp = mcp

    @classmethod
    def for_config(
        cls,
        config: EffectiveConfig,
        tools: Iterable[Tool],
        mcp: Callable[[], Iterable[Tool]] | None = None,
    ) -> Toolbox:
        return cls(
            tools,
            config.tools,
            config.disabled_tools,
            config.paused_servers,
            config.mcp_servers,
            mcp,
        )

    def offers_mcp(self, name: str) -> bool:
        """Whether an MCP tool of this name is on offer (when its server lists it)."""
        found = mcp_tool_of(name)
        if found is None or name in self._disabled or not _TOOL_NAME.match(name):
            return False
        server = self._servers.get(found[0])
        return server is not None and (not server.tools or found[1] in server.tools)

    @property
    def _offered(self) -> dict[str, Tool]:
        offered = dict(self._builtin)
        for tool in self._mcp() if self._mcp is not None else ():
            if self.offers_mcp(tool.name):
                offered.setdefault(tool.name, tool)
        return offered

    def names(self) -> list[str]:
        return sorted(self._offered)

    def specs(self) -> list[ToolSpec]:
        offered = self._offered
        return [offered[name].spec() for name in sorted(offered)]

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
    """The tools that act in the run's sandbox directory: its files, opened beneath it
    without ever leaving it (``runtime.sandbox.open_beneath``: links that stay inside are
    followed, any other refused, race-free), and commands run in it. Not the security
    boundary: the pod is."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    def list_files(self, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path", ".")
        flags = os.O_RDONLY | os.O_DIRECTORY
        with _tool_errors(path), _opened(self.root, path, flags) as fd, os.scandir(fd) as it:
            found = [_entry(e) for e in it]
        entries = sorted(found, key=lambda e: str(e["name"]))
        return {
            "path": path,
            "entries": entries[:MAX_LIST_ENTRIES],
            "truncated": len(entries) > MAX_LIST_ENTRIES,
        }

    def read_bytes(self, path: str, size: int) -> bytes:
        """At most `size` bytes of a regular file of the sandbox, opened beneath it."""
        # O_NONBLOCK: a FIFO put in the sandbox opens at once (and is refused) instead of
        # hanging the run; a regular file ignores it.
        with _tool_errors(path), _opened(self.root, path, os.O_RDONLY | os.O_NONBLOCK) as fd:
            _regular(fd, path)
            return sandbox.read_at_most(fd, size)

    def read_file(self, args: dict[str, Any]) -> dict[str, Any]:
        path = args["path"]
        data = self.read_bytes(path, MAX_READ_BYTES + 1)
        return {
            "path": path,
            "content": data[:MAX_READ_BYTES].decode("utf-8", "replace"),
            "truncated": len(data) > MAX_READ_BYTES,
        }

    def write_file(self, args: dict[str, Any]) -> dict[str, Any]:
        path, content = args["path"], args["content"]
        data = content.encode()
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        with _tool_errors(path), _opened(self.root, path, flags, make_parents=True) as fd:
            _regular(fd, path)
            os.ftruncate(fd, 0)  # only now: a refused target is left as it was
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        return {"path": path, "bytes": len(data)}

    def run_command(self, args: dict[str, Any]) -> dict[str, Any]:
        command = args["command"]
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        cwd = args.get("cwd", ".")
        with _tool_errors(cwd):
            where = sandbox.open_beneath(self.root, cwd, os.O_RDONLY | os.O_DIRECTORY)
        os.close(where.fd)  # checked; the command is not confined by it (the pod confines)
        timeout = float(args.get("timeout", DEFAULT_COMMAND_SECONDS))
        try:
            done = sandbox.run(
                argv,
                os.path.join(self.root, where.path),
                sandbox.command_env(self.root),
                timeout,
                MAX_OUTPUT_BYTES,
            )
        except OSError as e:
            raise ToolError(f"cannot run {argv[0]!r}: {e.strerror or e}") from e
        return {
            "exit_code": done.exit_code,
            "signal": done.signal,
            "timed_out": done.timed_out,
            "stdout": done.stdout.text,
            "stderr": done.stderr.text,
            "stdout_truncated": done.stdout.cut,
            "stderr_truncated": done.stderr.cut,
        }

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
            Tool(
                "run_command",
                "Run a command in the sandbox and return its exit code, stdout and stderr "
                f"(each cut after {MAX_OUTPUT_BYTES} bytes, and marked). `command`: a list "
                "of arguments (run as they are, no shell) or a string (run by /bin/sh -c). "
                "`cwd`: a directory of the sandbox (default its top). `timeout`: seconds, "
                f"default {DEFAULT_COMMAND_SECONDS}, at most {MAX_COMMAND_SECONDS}; then "
                "the command and everything it started are killed. No stdin; the "
                "environment holds PATH, HOME (the sandbox), LANG and TMPDIR only.",
                _schema(
                    {
                        "command": {
                            "anyOf": [
                                {"type": "array", "items": _STRING, "minItems": 1},
                                {"type": "string", "minLength": 1},
                            ]
                        },
                        "cwd": _STRING,
                        "timeout": {
                            "type": "number",
                            "exclusiveMinimum": 0,
                            "maximum": MAX_COMMAND_SECONDS,
                        },
                    },
                    ["command"],
                ),
                self.run_command,
            ),
        ]


@contextlib.contextmanager
def _opened(root: str, path: str, flags: int, make_parents: bool = False) -> Iterator[int]:
    opened = sandbox.open_beneath(root, path, flags, make_parents=make_parents)
    try:
        yield opened.fd
    finally:
        os.close(opened.fd)


@contextlib.contextmanager
def _tool_errors(path: str) -> Iterator[None]:
    """A refusal or a failed file operation as a message the model reads."""
    try:
        yield
    except sandbox.Refused as e:
        raise ToolError(str(e)) from e
    except FileNotFoundError as e:
        raise ToolError(f"{path!r} does not exist") from e
    except NotADirectoryError as e:
        raise ToolError(f"{path!r} is not a directory (or a part of it is not)") from e
    except IsADirectoryError as e:
        raise ToolError(f"{path!r} is a directory") from e
    except OSError as e:
        raise ToolError(f"{path!r}: {e.strerror or e}") from e


def _regular(fd: int, path: str) -> None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        raise ToolError(f"{path!r} is a directory")
    if not stat.S_ISREG(mode):
        raise ToolError(f"{path!r} is not a regular file")


def _entry(entry: os.DirEntry[str]) -> dict[str, Any]:
    """A listed name; a link is shown as one, not followed."""
    link = {"link": True} if entry.is_symlink() else {}
    return {"name": entry.name, "dir": entry.is_dir(follow_symlinks=False), **link}


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
