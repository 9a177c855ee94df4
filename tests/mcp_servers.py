"""Real MCP servers for the tests, on loopback.

* `fixture_server()`: a server built on the official SDK (`mcp.server.mcpserver.MCPServer`),
  `serving(...)` it over streamable HTTP with uvicorn on 127.0.0.1. Its tools: `echo`,
  `add`, `fail` (an `isError` result), `slow` (for timeouts), `whoami` (the Authorization
  header it was sent), `grow` (adds a tool and announces `notifications/tools/list_changed`).
* `time_server()`: the published `mcp-server-time` (PyPI, stdio; in the dev extra) behind
  the published `mcp-proxy`, which exposes it over streamable HTTP, the way users put a
  stdio server behind a Service. mcp-proxy pins `mcp<2`, which cannot share our
  environment (we need `mcp>=2.3`), so it is installed into a venv of its own in the user
  cache, once, as `pipx`/`uvx` would.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import threading
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

MCP_PROXY = "mcp-proxy==0.13.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentworkers"
START_SECONDS = 60.0


def fixture_server() -> MCPServer:
    server: MCPServer = MCPServer("fixture")

    @server.tool()
    def echo(text: str) -> str:
        """Say `text` back."""
        return f"fixture says: {text}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """The sum of two integers."""
        return a + b

    @server.tool()
    def fail(why: str) -> str:
        """Fail on purpose, with `why` (an isError result)."""
        raise ToolError(f"failed on purpose: {why}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answer after `seconds`."""
        await anyio.sleep(seconds)
        return "finally"

    @server.tool()
    def whoami(ctx: Context) -> str:
        """The Authorization header this call came with."""
        headers = ctx.headers or {}
        return f"authorization={headers.get('authorization', '<none>')}"

    @server.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Add a tool called `name` and tell the client its tools changed."""

        def grown() -> str:
            return f"{name} is new"

        server.add_tool(grown, name=name, description="A tool grow added.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    return server


@contextlib.contextmanager
def serving(server: MCPServer) -> Iterator[str]:
    """`server` over streamable HTTP on 127.0.0.1 (a free port); yields its URL."""
    config = uvicorn.Config(
        server.streamable_http_app(), host="127.0.0.1", port=0, log_level="warning"
    )
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, name="mcp-fixture", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not web.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fixture MCP server did not start")
        time.sleep(0.05)
    port = web.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        web.should_exit = True
        thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mcp_proxy() -> Path:
    """The `mcp-proxy` command, from its own venv in the user cache (made on first use)."""
    home = CACHE / MCP_PROXY.replace("==", "-")
    command = home / "bin" / "mcp-proxy"
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"{home.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions install it once
        if not command.exists():
            venv.create(home, with_pip=True, clear=True)
            subprocess.run(
                [home / "bin" / "pip", "install", "--quiet", MCP_PROXY],
                check=True,
                timeout=600,
            )
    return command


@contextlib.contextmanager
def time_server() -> Iterator[str]:
    """mcp-server-time (stdio) behind mcp-proxy on 127.0.0.1; yields the streamable HTTP URL."""
    port = free_port()
    server_time = Path(sys.executable).parent / "mcp-server-time"
    process = subprocess.Popen(
        [
            mcp_proxy(),
            "--host=127.0.0.1",
            f"--port={port}",
            "--",
            server_time,
            "--local-timezone=UTC",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mcp-proxy did not listen on {port} (exit {process.poll()})")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
