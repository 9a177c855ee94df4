"""`AsyncClient`: the client's methods as coroutines, for asyncio code."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar

from agentworkers.client.results import CollectResult, EventRecord, WorkerFilter, WorkerInfo
from agentworkers.client.sync import DEFAULT_COLLECT_TIMEOUT, Client, Progress
from agentworkers.kube.watch import Change

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

    def events(
        self,
        name: str | None = None,
        *,
        follow: bool = True,
        since: int = 0,
        timeout: float | None = None,
        where: WorkerFilter | None = None,
        all_namespaces: bool = False,
    ) -> AsyncIterator[EventRecord]:
        """`Client.events` as an async iterator."""
        return _iterate(
            self.sync.events(
                name,
                follow=follow,
                since=since,
                timeout=timeout,
                where=where,
                all_namespaces=all_namespaces,
            )
        )

    def watch(
        self,
        where: WorkerFilter | None = None,
        *,
        all_namespaces: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[tuple[Change, WorkerInfo]]:
        """`Client.watch` as an async iterator."""
        return _iterate(self.sync.watch(where, all_namespaces=all_namespaces, timeout=timeout))

    def collect_selected(
        self,
        where: WorkerFilter,
        timeout: float = DEFAULT_COLLECT_TIMEOUT,
        progress: Progress | None = None,
        *,
        keep: bool = False,
        all_namespaces: bool = False,
        dry_run: bool = False,
    ) -> AsyncIterator[CollectResult]:
        """`Client.collect_selected` as an async iterator: each result as its worker is
        collected."""
        return _iterate(
            self.sync.collect_selected(
                where,
                timeout,
                progress,
                keep=keep,
                all_namespaces=all_namespaces,
                dry_run=dry_run,
            )
        )


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
