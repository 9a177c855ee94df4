"""`AsyncClient`: the client's methods as coroutines, for asyncio code."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar

from agentworkers.client.sync import Client

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _in_thread(
    method: Callable[Concatenate[Client, P], R],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """`method` of the sync client as a coroutine that runs it in a thread."""

    async def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


def _stream_in_thread(
    method: Callable[Concatenate[Client, P], Generator[T, None, None]],
) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    """`method` of the sync client, a generator, as an async iterator (`_iterate`)."""

    def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return _iterate(method(self.sync, *args, **kwargs))

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class AsyncClient:
    """The same client for asyncio code: each call runs in a thread (`asyncio.to_thread`).

    A long wait (collect, spawn with `wait`, a followed event stream) holds one thread of
    the loop's default executor while it lasts. Progress callbacks run in that thread.
    """

    def __init__(self, client: Client) -> None:
        self.sync = client

    @classmethod
    async def from_kubeconfig(
        cls, namespace: str | None = None, kubeconfig: str | None = None
    ) -> AsyncClient:
        return cls(await asyncio.to_thread(Client.from_kubeconfig, namespace, kubeconfig))

    @property
    def namespace(self) -> str:
        return self.sync.namespace

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    close = _in_thread(Client.close)
    spawn = _in_thread(Client.spawn)
    get = _in_thread(Client.get)
    list = _in_thread(Client.list)
    query = _in_thread(Client.query)
    inspect = _in_thread(Client.inspect)
    kill = _in_thread(Client.kill)
    wait = _in_thread(Client.wait)
    collect = _in_thread(Client.collect)
    explain = _in_thread(Client.explain)
    tree = _in_thread(Client.tree)
    agents = _in_thread(Client.agents)
    revisions = _in_thread(Client.revisions)
    revision = _in_thread(Client.revision)
    profiles = _in_thread(Client.profiles)
    profile = _in_thread(Client.profile)
    diff_revisions = _in_thread(Client.diff_revisions)

    kill_selected = _in_thread(Client.kill_selected)
    forest = _in_thread(Client.forest)
    profile_sets = _in_thread(Client.profile_sets)
    quotas = _in_thread(Client.quotas)

    # The streams: each next item is awaited in a thread.
    events = _stream_in_thread(Client.events)
    watch = _stream_in_thread(Client.watch)
    collect_selected = _stream_in_thread(Client.collect_selected)


async def _iterate(stream: Generator[T, None, None]) -> AsyncIterator[T]:
    """A generator of the sync client as an async iterator: each next item is awaited in a
    thread."""
    done = object()
    try:
        while (item := await asyncio.to_thread(next, stream, done)) is not done:
            yield item  # type: ignore[misc]
    finally:
        # Closes the watch now. A cancelled wait may still be running in its thread
        # (closing then refuses); the watch ends at its next heartbeat all the same.
        with contextlib.suppress(ValueError):
            stream.close()
