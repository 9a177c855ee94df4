"""hack/faultproxy.py against a local echo server: bytes pass both ways, and each fault
does what it says (and no more)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from faultproxy import FaultProxy

REPO = Path(__file__).resolve().parents[3]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    yield str(host), int(port)
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[FaultProxy]:
    with FaultProxy(echo) as running:
        yield running


def _connect(proxy: FaultProxy, timeout: float = 5) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=timeout)


def _roundtrip(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _settled(read: Callable[[], int], expected: int, seconds: float = 5) -> int:
    """`read()` once it gives `expected`, or its last value after `seconds`."""
    deadline = time.monotonic() + seconds
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def _silent(conn: socket.socket, seconds: float) -> bool:
    """Nothing arrives (and no end) for `seconds`."""
    conn.settimeout(seconds)
    try:
        conn.recv(1)
    except TimeoutError:
        return True
    return False


def test_bytes_pass_both_ways_unchanged(proxy: FaultProxy) -> None:
    payload = bytes(range(256)) * 2000  # 512 KB: several chunks each way
    with _connect(proxy) as conn:
        assert _roundtrip(conn, payload) == payload
    assert proxy.address[0] == "127.0.0.1" and proxy.url.startswith("https://127.0.0.1:")
    assert proxy.counts.accepted == 1
    # A chunk is counted once written on: the client may read it a moment before.
    assert _settled(lambda: proxy.counts.downstream_bytes, len(payload)) == len(payload)
    assert proxy.counts.upstream_bytes == len(payload)


def test_drop_closes_every_open_connection_and_new_ones_work(proxy: FaultProxy) -> None:
    first, second = _connect(proxy), _connect(proxy)
    assert _roundtrip(first, b"a") == b"a" and _roundtrip(second, b"b") == b"b"
    assert proxy.drop() == 2
    for conn in (first, second):
        conn.settimeout(5)
        with pytest.raises(OSError):  # reset, or read as an end
            if conn.recv(1) == b"":
                raise ConnectionResetError
        conn.close()
    with _connect(proxy) as conn:
        assert _roundtrip(conn, b"again") == b"again"
        # The dropped links leave the proxy's books a moment after their clients see the
        # reset; the new one stays while its client holds it open.
        assert _settled(lambda: proxy.open_connections, 1) == 1
    assert _settled(lambda: proxy.open_connections, 0) == 0


def test_a_blackhole_holds_everything_then_delivers_it_in_order(proxy: FaultProxy) -> None:
    with _connect(proxy) as held:
        assert _roundtrip(held, b"before") == b"before"
        proxy.blackhole(1.5)
        started = time.monotonic()
        held.sendall(b"during")
        assert _silent(held, 0.8)
        late = _connect(proxy)  # accepted, not connected upstream until it ends
        late.sendall(b"late")
        held.settimeout(5)
        assert held.recv(100) == b"during"
        assert time.monotonic() - started >= 1.4
        late.settimeout(5)
        assert late.recv(100) == b"late"
        late.close()
        assert _roundtrip(held, b"after") == b"after"


def test_a_forgetting_blackhole_leaves_its_connections_silent_for_good(
    proxy: FaultProxy,
) -> None:
    with _connect(proxy) as dead:
        assert _roundtrip(dead, b"before") == b"before"
        proxy.blackhole(0.5, forget=True)
        during = _connect(proxy)
        time.sleep(0.7)
        dead.sendall(b"lost")
        during.sendall(b"lost too")
        assert _silent(dead, 1) and _silent(during, 0.2)  # no answer, and no end either
        with _connect(proxy) as fresh:  # made after it: works
            assert _roundtrip(fresh, b"fresh") == b"fresh"
        during.close()
    assert proxy.counts.forgotten == 2
    assert _settled(lambda: proxy.open_connections, 0) == 0  # the clients' ends closed them


def test_latency_delays_each_chunk_both_ways_without_adding_up(proxy: FaultProxy) -> None:
    with _connect(proxy) as conn:
        assert _roundtrip(conn, b"warm") == b"warm"
        proxy.latency(300)
        started = time.monotonic()
        assert _roundtrip(conn, b"x") == b"x"
        one = time.monotonic() - started
        assert 0.55 <= one < 1.5  # 300 ms each way
        started = time.monotonic()
        for i in range(5):  # pipelined: five chunks in flight take about one trip
            conn.sendall(b"%d" % i)
            time.sleep(0.02)
        got = b""
        conn.settimeout(5)
        while len(got) < 5:
            got += conn.recv(100)
        assert got == b"01234"
        assert time.monotonic() - started < 1.2
        proxy.latency(0)
        started = time.monotonic()
        assert _roundtrip(conn, b"y") == b"y"
        assert time.monotonic() - started < 0.2


def test_heal_ends_a_blackhole_early(proxy: FaultProxy) -> None:
    with _connect(proxy) as conn:
        proxy.blackhole(30)
        conn.sendall(b"held")
        assert _silent(conn, 0.3)
        proxy.heal()
        conn.settimeout(5)
        assert conn.recv(100) == b"held"


def test_an_upstream_that_is_down_closes_the_client() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with FaultProxy(("127.0.0.1", port)) as proxy, _connect(proxy) as conn:
        assert conn.recv(1) == b""
