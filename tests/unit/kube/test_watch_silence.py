"""kube.watch.observe against a local HTTP server whose watch goes silent (a connection
lost without a word): the silence is noticed and the watch resumed from the last version
it saw, without listing again."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import kubernetes
import pytest

from agentworkers.errors import ApiError
from agentworkers.kube import connection, watch
from agentworkers.kube.api import Api, SilentWatch


def _worker(version: str) -> dict[str, Any]:
    return {"metadata": {"name": "w", "uid": "u1", "resourceVersion": version}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, list[str]]] = []
        self.stop = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        self.server.requests.append(query)
        if "watch" not in query:
            body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": [_worker("1")]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        # One event past the version asked for, then nothing at all: no bookmark, no end.
        version = str(int(query["resourceVersion"][0]) + 1)
        line = json.dumps({"type": "MODIFIED", "object": _worker(version)}).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()
        self.server.stop.wait(60)


@pytest.fixture
def api() -> Iterator[tuple[Api, _Server]]:
    server = _Server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    client = kubernetes.client.ApiClient(configuration)
    yield Api(client), server
    server.stop.set()
    server.shutdown()
    server.server_close()
    client.close()  # type: ignore[no-untyped-call]


def test_a_silent_watch_is_an_error_of_its_own(api: tuple[Api, _Server]) -> None:
    client, _ = api
    events = client.watch("workers", "ns", "1", 300, silence=0.5)
    assert next(events)["object"]["metadata"]["resourceVersion"] == "2"
    started = time.monotonic()
    with pytest.raises(SilentWatch):
        next(events)
    assert time.monotonic() - started < 3


def test_observe_resumes_a_silent_watch_from_the_last_version_it_saw(
    api: tuple[Api, _Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, server = api
    monkeypatch.setattr(watch, "SILENCE_SECONDS", 0.5)
    seen: list[tuple[str, str | None]] = []
    changes = watch.observe(client, "workers", "ns", heartbeat=300)

    def consume() -> None:
        for kind, body in changes:
            if kind != "IDLE":  # a quiet spell (the silence) may say so
                seen.append((kind, body["metadata"]["resourceVersion"] if body else None))
            if len(seen) == 4:
                return

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    reader.join(5)  # a watch of 300 s would otherwise be trusted for 330 s
    assert seen == [("ADDED", "1"), ("SYNCED", None), ("MODIFIED", "2"), ("MODIFIED", "3")]
    watches = [q["resourceVersion"][0] for q in server.requests if "watch" in q]
    lists = [q for q in server.requests if "watch" not in q]
    assert watches == ["1", "2"] and len(lists) == 1  # resumed, not listed again


@pytest.fixture
def mute() -> Iterator[int]:
    """A port that accepts connections and never says a word: to a new client, a
    connection a partition took (hack/faultproxy.py's `silent`) looks like this."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_a_watch_opened_on_a_connection_that_never_answers_gives_up_soon(
    mute: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A watch of 300 s once trusted its TLS handshake for 330 s: a runtime that opened its
    # watch into a partition heard nothing of its queries for that long.
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT", 0.5)
    configuration = kubernetes.client.Configuration()
    configuration.host = f"https://127.0.0.1:{mute}"
    configuration.verify_ssl = False
    configuration.retries = 0
    client = Api(connection.ApiClient(configuration))
    for attempt in (
        lambda: next(client.watch("workers", "ns", "1", 300, silence=75)),
        lambda: client.list("workers", "ns"),
    ):
        started = time.monotonic()
        with pytest.raises(ApiError):
            attempt()
        assert time.monotonic() - started < 5


def test_observe_from_an_object_just_read_watches_from_its_version_without_listing(
    api: tuple[Api, _Server],
) -> None:
    """The runtime reads its Worker, then follows it: the object read stands for the
    first listing (one request fewer a run), and nothing after its version is missed."""
    client, server = api
    changes = watch.observe(client, "workers", "ns", name="w", heartbeat=300, since=_worker("5"))
    seen = [next(changes) for _ in range(3)]
    assert [(kind, body and body["metadata"]["resourceVersion"]) for kind, body in seen] == [
        ("ADDED", "5"),
        ("SYNCED", None),
        ("MODIFIED", "6"),
    ]
    assert [q.get("resourceVersion") for q in server.requests] == [["5"]]  # a watch, no list
    changes.close()
