#!/usr/bin/env python3
"""Serve bare git repositories over HTTP on loopback, through git's own `git http-backend`.

    python hack/githttp.py ROOT [--port N]    # prints the base URL, then serves until killed

Each request runs git-http-backend as a CGI program, as a web server in front of git
would (git's "smart HTTP": clone and fetch; push only where a repository enables
`http.receivepack`). The e2e tests serve the repository Flux's source-controller pulls
from with it. Loopback only; no authentication; a development tool.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socketserver
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def backend() -> str:
    """git-http-backend, from `git --exec-path`."""
    exec_path = subprocess.run(
        ["git", "--exec-path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    program = Path(exec_path) / "git-http-backend"
    if not program.exists():
        raise SystemExit(f"no git-http-backend in {exec_path}")
    return str(program)


def application(root: Path) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    program = backend()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": environ.get("REMOTE_ADDR", "127.0.0.1"),
            "SERVER_PROTOCOL": environ.get("SERVER_PROTOCOL", "HTTP/1.1"),
            # Git-Protocol (v2), Content-Encoding (gzip) and the rest, as CGI passes them.
            **{k: v for k, v in environ.items() if k.startswith("HTTP_")},
        }
        if "HTTP_GIT_PROTOCOL" in environ:
            env["GIT_PROTOCOL"] = environ["HTTP_GIT_PROTOCOL"]
        result = subprocess.run(
            [program], input=body, capture_output=True, env=env, check=False, timeout=120
        )
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = result.stdout.partition(b"\n\n")
        status = "200 OK"
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name.strip(), value.strip()))
        if result.returncode != 0 and not head:
            status = "500 Internal Server Error"
            payload = result.stderr
        start_response(status, headers)
        return [payload]

    return app


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving(root: Path, port: int = 0) -> Iterator[str]:
    """Serve `root` on 127.0.0.1 in a thread; yields the base URL (`http://127.0.0.1:N`)."""
    server = make_server(
        "127.0.0.1", port, application(root), server_class=_Server, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="githttp", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="a directory of bare repositories (x.git)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        print("git is not installed", file=sys.stderr)
        return 1
    with serving(args.root.resolve(), args.port) as url:
        print(url, flush=True)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
