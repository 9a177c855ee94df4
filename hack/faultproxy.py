#!/usr/bin/env python3
"""A TCP proxy that injects network faults: the fault suite's network between a client (the
operator, a worker's runtime) and the API server.

    proxy = FaultProxy(("127.0.0.1", 6443)).start()   # listens on 127.0.0.1:<free port>
    proxy.drop()               # every open connection closed now (a reset)
    proxy.blackhole(5)         # 5 s of nothing forwarded, either way; then it flows again
    proxy.blackhole(5, forget=True)  # ... and the connections it held never forward again
    proxy.latency(200)         # each chunk delayed 200 ms, both ways (0: none)
    proxy.stop()

It forwards bytes and knows nothing of what they mean: TLS passes through untouched (no
termination), so a client verifies the server's own certificate; point it at the proxy's
address by an IP that certificate names (127.0.0.1 for the local control plane's).

It runs on an event loop of its own in a background thread, so the synchronous code of a
benchmark or a test drives it with plain calls.

What each fault stands for:

* `drop()`: the connections break at once (a reset, a load balancer or an API server gone):
  each side reads an end or an error straight away. New connections are accepted as usual.
* `blackhole(s)`: a partition that heals before TCP gives up. For `s` seconds nothing is
  read or written on any connection (the kernel's buffers fill, then the senders wait, as
  when packets are lost and retransmitted), and new connections are accepted but not
  connected upstream. Then everything held flows on, late but complete and in order.
* `blackhole(s, forget=True)`: a partition after which the connections are dead without
  anyone saying so (a peer or a middlebox lost them with no reset: a NAT or conntrack
  entry gone, a host that vanished). The connections open during those `s` seconds, and
  those accepted meanwhile, never forward a byte again; what their clients send is read
  and thrown away, and they stay open until their clients close them. Only a client's own
  timeout notices: a silent watch is the case to detect. Connections made after it work.
* `latency(ms)`: every chunk is held `ms` milliseconds before it is passed on, in both
  directions; chunks stay in order and are pipelined (the delay does not add up).

Loopback only by intent: it is a test tool.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")

CHUNK = 64 * 1024
# Chunks held (for latency) per direction before the reader waits: backpressure.
QUEUE = 64


@dataclass
class Counts:
    """What the proxy has seen so far."""

    accepted: int = 0
    dropped: int = 0
    forgotten: int = 0
    blackholes: int = 0
    # Bytes passed on, each way.
    upstream_bytes: int = 0
    downstream_bytes: int = 0


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream connection (once made)."""

    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    upstream_writer: asyncio.StreamWriter | None = None
    forgotten: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client_writer, self.upstream_writer):
            if writer is not None:
                writer.transport.abort()


class FaultProxy:
    """A proxy from `listen` to `upstream`, with faults on demand (see the module's docstring).

    `start()` returns once it listens; `address` then gives where. Every control method may
    be called from any thread but the proxy's own.
    """

    def __init__(
        self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self.upstream = upstream
        self._listen = listen
        self.counts = Counts()
        self._links: set[_Link] = set()
        self._delay = 0.0
        self._forgetting = False
        self._until = 0.0  # monotonic time the current blackhole ends
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._open: asyncio.Event | None = None
        self._reopen: asyncio.TimerHandle | None = None
        self.address: tuple[str, int] = listen

    # --- life cycle ------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen (in a thread of its own); returns once connections are accepted."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as e:  # reported to start()'s caller
                failed.append(e)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close())
                loop.close()

        self._thread = threading.Thread(target=run, name="faultproxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        """Close every connection and stop listening."""
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start() if self._loop is None else self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The proxy's address as an https URL (what a kubeconfig's `server` takes)."""
        return f"https://{self.address[0]}:{self.address[1]}"

    # --- faults ----------------------------------------------------------------------

    def drop(self) -> int:
        """Close every open connection now; how many there were."""
        return self._call(self._drop)

    def blackhole(self, seconds: float, *, forget: bool = False) -> None:
        """Forward nothing, either way, for `seconds` (see the module's docstring); with
        `forget`, the connections it held stay silent for good. Returns at once; a second
        blackhole while one lasts extends it."""
        self._call(lambda: self._blackhole(seconds, forget))

    def latency(self, ms: float) -> None:
        """Hold every chunk `ms` milliseconds, both ways, from now on (0: none)."""

        def set_delay() -> None:
            self._delay = max(0.0, ms) / 1000

        self._call(set_delay)

    def heal(self) -> None:
        """End any blackhole and latency now (forgotten connections stay dead)."""

        def heal() -> None:
            self._delay = 0.0
            self._until = 0.0
            self._reopened()

        self._call(heal)

    @property
    def open_connections(self) -> int:
        return self._call(lambda: len(self._links))

    # --- inside the loop -------------------------------------------------------------

    def _call(self, function: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the proxy is not running: start() it first")

        async def call() -> T:
            return function()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(10)

    async def _serve(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, *self._listen)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = (str(host), int(port))

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
            for task in link.tasks:
                task.cancel()
        tasks = [t for link in self._links for t in link.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        self._links.clear()

    def _drop(self) -> int:
        links = list(self._links)
        for link in links:
            link.abort()
        self.counts.dropped += len(links)
        return len(links)

    def _blackhole(self, seconds: float, forget: bool) -> None:
        assert self._open is not None and self._loop is not None
        self.counts.blackholes += 1
        self._open.clear()
        if forget:
            self._forgetting = True
            for link in self._links:
                self._forget(link)
        self._until = max(self._until, time.monotonic() + seconds)
        if self._reopen is not None:
            self._reopen.cancel()
        self._reopen = self._loop.call_later(
            max(0.0, self._until - time.monotonic()), self._reopened
        )

    def _reopened(self) -> None:
        assert self._open is not None
        if time.monotonic() < self._until:
            return
        if self._reopen is not None:
            self._reopen.cancel()
            self._reopen = None
        self._forgetting = False
        self._open.set()

    def _forget(self, link: _Link) -> None:
        if not link.forgotten:
            link.forgotten = True
            self.counts.forgotten += 1

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self.counts.accepted += 1
        link = _Link(reader, writer)
        self._links.add(link)
        try:
            if self._forgetting:
                self._forget(link)
            await self._open.wait()
            if link.forgotten:
                # Dead from the start: the client's bytes go nowhere until it gives up.
                await self._swallow(reader)
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                return  # the upstream is down: the client sees its connection closed
            link.upstream_writer = upstream_writer
            link.tasks = [
                asyncio.create_task(self._pump(link, reader, upstream_writer, upstream=True)),
                asyncio.create_task(self._pump(link, upstream_reader, writer, upstream=False)),
            ]
            # The first direction to end ends the connection (HTTP does not half-close); a
            # forgotten link's server side never ends: only its client (a timeout) ends it.
            _, pending = await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._links.discard(link)
            link.abort()

    @staticmethod
    async def _swallow(reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(CHUNK):
                pass

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        """Read one direction, pass each chunk on at its due time (its latency), waiting
        through blackholes; a forgotten link's client side is read and thrown away."""
        assert self._open is not None
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUE)
        sender = asyncio.create_task(self._send(link, queue, writer, upstream=upstream))
        try:
            while not sender.done():
                if link.forgotten:
                    await self._swallow(reader)  # its bytes go nowhere
                    if not upstream:  # nor the server's end: the client's own ends it
                        await asyncio.Event().wait()
                    return
                await self._open.wait()
                if link.forgotten:
                    continue
                data = await reader.read(CHUNK)
                if not data:
                    break
                await queue.put((time.monotonic() + self._delay, data))
            await queue.put(None)
            await sender
        except OSError:
            pass
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)

    async def _send(
        self,
        link: _Link,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        assert self._open is not None
        while (item := await queue.get()) is not None:
            due, data = item
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            await self._open.wait()
            if link.forgotten:
                continue
            writer.write(data)
            await writer.drain()
            if upstream:
                self.counts.upstream_bytes += len(data)
            else:
                self.counts.downstream_bytes += len(data)


@contextlib.contextmanager
def running(upstream: tuple[str, int], port: int = 0) -> Iterator[FaultProxy]:
    """A started proxy to `upstream` on 127.0.0.1:`port` (0: a free one), stopped after."""
    proxy = FaultProxy(upstream, ("127.0.0.1", port)).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("upstream", help="host:port to forward to")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    with running((host, int(port)), args.port) as proxy:
        print(f"forwarding {proxy.url} -> {args.upstream}; Ctrl-C stops", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
