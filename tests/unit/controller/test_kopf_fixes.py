"""kopf's fixes: the namespace observer serves a namespace seen only in the watch-stream's
own listing (an event of type None) like one seen being added; webhooks match only the
served namespaces; an event's body and patch are no reference cycles; a watcher stopped
before it listed its kind holds no handler back; a kopf that moved a point they patch
stops the operator at its start."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import sys
import threading
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any
from unittest import mock

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching
from kopf._cogs.configs import configuration
from kopf._cogs.structs import bodies, ephemera, patches, references
from kopf._core.actions import lifecycles
from kopf._core.engines import admission, indexing
from kopf._core.intents import registries
from kopf._core.reactor import inventory, observation, orchestration, processing, queueing

from agentworkers.cli import main as cli
from agentworkers.controller.kopf import kopf_fixes

PATTERNS = ["team-*"]


def _observe(*events: dict[str, Any]) -> set[str | None]:
    insights = references.Insights()

    async def run() -> None:
        for event in events:
            await kopf_fixes.process_discovered_namespace_event(
                raw_event=event, namespaces=PATTERNS, insights=insights
            )

    asyncio.run(run())
    return set(insights.namespaces)


def _namespace(name: str, type_: str | None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"type": type_, "object": {"metadata": meta, "spec": {}, "status": {}}}


def test_a_listed_namespace_that_matches_is_served() -> None:
    assert _observe(_namespace("team-a", None)) == {"team-a"}


def test_a_listed_namespace_that_does_not_match_is_not() -> None:
    assert _observe(_namespace("other", None)) == set()


def test_added_and_deleted_namespaces_behave_as_before() -> None:
    assert _observe(_namespace("team-a", "ADDED"), _namespace("team-b", None)) == {
        "team-a",
        "team-b",
    }
    assert _observe(_namespace("team-a", None), _namespace("team-a", "DELETED", True)) == set()


def test_apply_installs_it_where_kopf_looks_it_up() -> None:
    original = observation.process_discovered_namespace_event
    try:
        kopf_fixes.apply()
        kopf_fixes.apply()
        assert (
            observation.process_discovered_namespace_event
            is kopf_fixes.process_discovered_namespace_event
        )
    finally:
        observation.process_discovered_namespace_event = original


def _served(patterns: list[str], namespace: str) -> bool:
    """What the API server's CEL does with the matchCondition, with Python's re (RE2's
    subset here: anchors, groups, alternation, `.`, `*` and classes)."""
    import re  # noqa: PLC0415

    condition = kopf_fixes.served_condition(patterns)
    if condition is None:
        return True
    found = re.findall(r"(!?)request\.namespace\.matches\('([^']*)'\)", condition["expression"])
    return all(bool(re.match(rx, namespace)) != bool(neg) for neg, rx in found)


def test_webhooks_are_called_only_for_the_namespaces_the_operator_serves() -> None:
    """Two releases serving their own namespaces must not review (and refuse) each other's
    writes: each webhook matches only its operator's --namespace globs."""
    assert kopf_fixes.served_condition([]) is None  # cluster-wide: every namespace
    patterns = ["team-*", "ops", "!team-secret"]
    assert _served(patterns, "team-a") and _served(patterns, "ops")
    assert not _served(patterns, "team-secret")
    assert not _served(patterns, "other") and not _served(patterns, "opsx")
    assert not _served(["a.b"], "axb")  # a literal dot is a dot
    expression = kopf_fixes.served_condition(["a.b"])["expression"]  # type: ignore[index]
    assert "\\" not in expression  # nothing a CEL string would read as an escape


def test_the_condition_goes_on_every_webhook_kopf_builds() -> None:
    built = kopf_fixes._served_only(["team-*"])
    original = kopf_fixes._build_webhooks
    try:
        kopf_fixes._build_webhooks = lambda *a, **k: [{"name": "a"}, {"name": "b"}]  # type: ignore[assignment]
        hooks = built()
    finally:
        kopf_fixes._build_webhooks = original
    assert [h["matchConditions"][0]["name"] for h in hooks] == ["served-namespaces"] * 2


def test_an_event_s_body_and_patch_are_freed_without_the_cyclic_collector() -> None:
    """Every view kopf hands a handler is read and written as before, and nothing of the
    event is left for the cyclic collector (its pauses stop every thread)."""
    kopf_fixes.apply()
    gc.collect()
    gc.disable()
    try:
        body = bodies.Body({"metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {"k": 1}})
        patch = patches.Patch(body=body)
        assert body.meta.labels["a"] == "b" and body.metadata.name == "w"
        assert body.spec["k"] == 1 and dict(body.status) == {}
        assert dict(body.meta.annotations) == {}
        patch.meta.labels["x"] = "y"
        patch.metadata.annotations["n"] = "m"
        patch.status["phase"] = "Running"
        patch.spec["s"] = 2
        assert dict(patch) == {
            "metadata": {"labels": {"x": "y"}, "annotations": {"n": "m"}},
            "status": {"phase": "Running"},
            "spec": {"s": 2},
        }
        del body, patch
        assert gc.collect() == 0
    finally:
        gc.enable()


WORKERS = references.Resource(
    "agentworkers.io", "v1alpha1", "workers", namespaced=True, verbs=frozenset({"list", "watch"})
)


def _kopf_processing(
    memories: inventory.ResourceMemories | None = None,
) -> tuple[configuration.OperatorSettings, Any]:
    """kopf's settings and its event processing, as `kopf.run` wires them."""
    settings = configuration.OperatorSettings()
    settings.queueing.exit_timeout = 0.1
    process = functools.partial(
        processing.process_resource_event,
        lifecycle=lifecycles.all_at_once,
        registry=registries.OperatorRegistry(),
        settings=settings,
        indexers=indexing.OperatorIndexers(),
        memories=inventory.ResourceMemories() if memories is None else memories,
        memobase=ephemera.AnyMemo(ephemera.Memo()),
        event_queue=asyncio.Queue(),
    )
    return settings, process


async def _ensemble() -> orchestration.Ensemble:
    paused = aiotoggles.ToggleSet(any)
    return orchestration.Ensemble(
        operator_indexed=aiotoggles.ToggleSet(all),
        operator_paused=paused,
        peering_missing=await paused.make_toggle(),
    )


def _handled_after_a_watcher_stopped_unlisted() -> list[str]:
    """kopf's own orchestration and processing: a watcher whose listing never answers (as
    while the API server answers 429), stopped as its namespace goes; then a watcher of a
    new namespace lists one object. The namespaces whose object kopf got to handle."""
    handled: list[str] = []

    async def stream(*, namespace: str, **_: Any) -> AsyncIterator[Any]:
        if namespace == "going":
            await asyncio.Event().wait()  # its listing never answers
        yield watching.Bookmark.LISTED
        meta = {"uid": f"uid-{namespace}", "name": "w", "namespace": namespace}
        yield {"type": "ADDED", "object": {"kind": "Worker", "metadata": meta}}
        await asyncio.Event().wait()

    async def run() -> None:
        settings, process = _kopf_processing()

        async def processor(*, raw_event: Any, **kwargs: Any) -> None:
            await process(raw_event=raw_event, **kwargs)  # returns once kopf would handle
            handled.append(raw_event["object"]["metadata"]["namespace"])

        ensemble = await _ensemble()
        spawn = functools.partial(
            orchestration.spawn_missing_watchers,
            processor=processor,
            settings=settings,
            indexed_resources={WORKERS},
            watched_resources={WORKERS},
            ensemble=ensemble,
        )
        stop = functools.partial(
            orchestration.terminate_redundancies,
            ensemble=ensemble,
            remaining_resources={WORKERS},
        )
        await spawn(watched_namespaces={"going"})
        await asyncio.sleep(0.05)
        await stop(remaining_namespaces={None})  # "going" is gone, its listing not done
        await spawn(watched_namespaces={"new"})
        for _ in range(100):
            if handled:
                break
            await asyncio.sleep(0.01)
        await stop(remaining_namespaces=set())

    with mock.patch.object(watching, "infinite_watch", stream):
        asyncio.run(run())
    return handled


def test_a_watcher_stopped_before_it_listed_holds_no_handler_back() -> None:
    """kopf held every handler back until each watcher had listed its kind, and only a
    listing let go: a watcher stopped before (its namespace deleted while its listing was
    answered 429) held back every watcher started after it, and nothing in a namespace
    created later was handled until a restart (seen in CI)."""
    original = queueing.watcher
    try:
        queueing.watcher = kopf_fixes._watcher  # type: ignore[assignment]
        assert _handled_after_a_watcher_stopped_unlisted() == []  # kopf's own: stuck
        kopf_fixes.apply()
        kopf_fixes.apply()
        assert queueing.watcher is kopf_fixes.watcher
        assert _handled_after_a_watcher_stopped_unlisted() == ["new"]
    finally:
        queueing.watcher = original


def test_a_lean_kind_s_events_go_to_its_two_handlers_in_kopf_s_order() -> None:
    """kopf's own orchestration, with a lean kind: each listed object indexed before any
    handler runs (kopf's readiness), a deletion given to the event handler alone, a
    handler's error logged without ending the stream, and none of kopf's per-object
    memory made."""
    calls: list[tuple[str, ...]] = []

    async def index(*, body: dict[str, Any], **_: Any) -> None:
        calls.append(("index", body["metadata"]["name"]))

    async def event(*, type: str | None, body: dict[str, Any], **_: Any) -> None:
        calls.append(("event", str(type), body["metadata"]["name"]))
        if body["metadata"]["name"] == "bad":
            raise RuntimeError("a handler's bug")

    def worker(name: str, type_: str | None) -> dict[str, Any]:
        meta = {"uid": f"uid-{name}", "name": name, "namespace": "ns"}
        return {"type": type_, "object": {"kind": "Worker", "metadata": meta}}

    async def stream(**_: Any) -> AsyncIterator[Any]:
        yield worker("a", None)
        yield worker("b", None)
        yield watching.Bookmark.LISTED
        yield worker("bad", "ADDED")
        yield worker("a", "DELETED")
        yield worker("c", "ADDED")
        await asyncio.Event().wait()

    memories = inventory.ResourceMemories()

    async def run() -> None:
        settings, processor = _kopf_processing(memories)
        ensemble = await _ensemble()
        await orchestration.spawn_missing_watchers(
            processor=processor,
            settings=settings,
            indexed_resources={WORKERS},
            watched_resources={WORKERS},
            watched_namespaces={"ns"},
            ensemble=ensemble,
        )
        for _ in range(100):
            if ("event", "ADDED", "c") in calls:
                break
            await asyncio.sleep(0.01)
        await orchestration.terminate_redundancies(
            ensemble=ensemble, remaining_resources=set(), remaining_namespaces=set()
        )

    with (
        mock.patch.dict(kopf_fixes._LEAN, clear=True),
        mock.patch.object(watching, "infinite_watch", stream),
    ):
        kopf_fixes.apply()
        kopf_fixes.lean(("agentworkers.io", "v1alpha1", "workers"), index=index, event=event)
        asyncio.run(run())
    first_handled = next(i for i, call in enumerate(calls) if call[0] == "event")
    assert {("index", "a"), ("index", "b")} <= set(calls[:first_handled])  # kopf's readiness
    assert {("event", "None", "a"), ("event", "None", "b")} <= set(calls)
    assert ("index", "bad") in calls and ("event", "ADDED", "bad") in calls
    assert ("event", "DELETED", "a") in calls
    assert calls.count(("index", "a")) == 1  # not for its deletion
    assert calls.index(("index", "c")) < calls.index(("event", "ADDED", "c"))  # past the error
    assert not memories._items  # kopf's per-object memory, never made


def test_a_handler_held_back_by_kopf_s_index_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every handler waits on one barrier: a watcher that cannot list would stall them all
    without a word; the wait is logged with the watchers still off, and ends with them."""
    monkeypatch.setattr(kopf_fixes, "INDEX_STALL_SECONDS", 0.05)
    body = {"metadata": {"name": "planner", "namespace": "ns"}}

    async def run() -> None:
        toggles = aiotoggles.ToggleSet(all)
        stuck = await toggles.make_toggle(name="workloads@ns")
        waiting = asyncio.create_task(kopf_fixes._wait_indexed(toggles, WORKERS, body))
        await asyncio.sleep(0.12)
        assert not waiting.done()
        await toggles.drop_toggle(stuck)
        await asyncio.wait_for(waiting, 1)

    with caplog.at_level("WARNING", logger=kopf_fixes.__name__):
        asyncio.run(run())
    assert len(caplog.messages) >= 2  # once each time the wait lasts INDEX_STALL_SECONDS
    assert all(
        m.startswith("workers ns/planner: waited") and m.endswith("still off: workloads@ns")
        for m in caplog.messages
    )


def test_the_installed_kopf_has_every_point_the_fixes_patch() -> None:
    assert kopf_fixes.missing() == []


def _kopf_without_memobase(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kopf whose event processing no longer takes what the lean path hands it."""

    async def moved(*, resource: Any, raw_event: Any, **_: Any) -> None: ...

    monkeypatch.setattr(kopf_fixes, "_process_resource_event", moved)


def test_a_kopf_that_moved_a_patch_point_stops_apply_before_it_patches_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _kopf_without_memobase(monkeypatch)
    before = (processing.process_resource_event, queueing.watcher, admission.build_response)
    with pytest.raises(kopf_fixes.KopfChanged) as raised:
        kopf_fixes.apply()
    message = str(raised.value)
    assert f"kopf {version('kopf')} " in message
    assert "kopf._core.reactor.processing.process_resource_event(resource, raw_event, memobase" in (
        message
    )
    assert "tested on kopf 1.45.2" in message
    assert (processing.process_resource_event, queueing.watcher, admission.build_response) == (
        before
    )


def test_the_operator_does_not_start_on_such_a_kopf(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It says why on one line and exits 1, never a warning and a run without the fix."""
    _kopf_without_memobase(monkeypatch)
    ran: list[Any] = []
    monkeypatch.setattr(kopf, "configure", lambda **_: None)  # the test's own logging stays
    monkeypatch.setattr(kopf, "run", lambda **kwargs: ran.append(kwargs))
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    assert cli.main(["operator", "--no-webhook"]) == cli.EXIT_ERROR
    assert not ran
    err = capsys.readouterr().err
    assert err.startswith(f"error: kopf {version('kopf')} is not a kopf")
    assert "process_resource_event" in err and "Traceback" not in err


def _managed(registry: registries.OperatorRegistry, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What kopf's mutating configuration manager is asked to do within 0.2 s of start."""
    managed: list[Any] = []

    async def kopf_s(*, registry: Any, **_: Any) -> None:
        managed.append(registry)

    monkeypatch.setattr(kopf_fixes, "_mutating_configuration_manager", kopf_s)
    kopf_fixes.apply()
    assert admission.mutating_configuration_manager is kopf_fixes.mutating_configuration_manager

    async def run() -> None:
        manager = admission.mutating_configuration_manager(registry=registry, settings=None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(manager, 0.2)

    asyncio.run(run())
    return managed


def test_no_mutating_webhook_configuration_without_a_mutating_webhook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf made an empty MutatingWebhookConfiguration beside the validating one, which
    each chart uninstall left behind: with validating webhooks only, none is made."""
    registry = registries.OperatorRegistry()
    kopf.on.validate("agentworkers.io", "v1alpha1", "workers", id="w", registry=registry)(
        lambda **_: None
    )
    assert _managed(registry, monkeypatch) == []
    kopf.on.mutate("agentworkers.io", "v1alpha1", "workers", id="m", registry=registry)(
        lambda **_: None
    )
    assert _managed(registry, monkeypatch) == [registry]


def test_a_relisting_gives_what_it_no_longer_lists_as_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's own watch lists a kind again after a "410 Gone", and an object deleted in
    the gap got no DELETED event: the store kept it for good. The objects the store holds
    that the listing did not list, no newer than it, now come as DELETED after it."""
    from agentworkers.kube.store import Store  # noqa: PLC0415

    def pod(name: str, rv: str, namespace: str = "ns") -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": name}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": {}}

    store = Store()
    for body in (pod("kept", "50"), pod("gone", "60"), pod("made-since", "150")):
        store.wrote("pods", body)
    store.wrote("pods", pod("elsewhere", "10", "other"))

    async def listing(**_: Any) -> AsyncIterator[tuple[list[Any], str]]:
        yield [pod("kept", "50")], "100"

    async def watch(**_: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "MODIFIED", "object": pod("kept", "120")}

    monkeypatch.setattr(kopf_fixes, "_fetch_objs", listing)
    monkeypatch.setattr(watching, "watch_objs", watch)
    resource = references.Resource("", "v1", "pods", namespaced=True)

    async def run() -> list[tuple[str | None, str]]:
        seen: list[tuple[str | None, str]] = []
        with mock.patch.object(kopf_fixes.fetching, "fetch_objs", kopf_fixes.fetch_objs):
            async for event in kopf_fixes.continuous_watch(
                settings=configuration.OperatorSettings(),
                resource=resource,
                namespace="ns",
                operator_pause_waiter=asyncio.get_running_loop().create_future(),
            ):
                if event is watching.Bookmark.LISTED:
                    seen.append(("LISTED", ""))
                    continue
                seen.append((event["type"], event["object"]["metadata"]["name"]))
                if event["type"] == "MODIFIED":
                    break
        return seen

    kopf_fixes.forget_unlisted(store.unlisted)
    try:
        assert asyncio.run(run()) == [
            (None, "kept"),
            ("DELETED", "gone"),  # not listed, and older than the listing
            ("LISTED", ""),
            ("MODIFIED", "kept"),
        ]  # "made-since" is newer than the listing; "elsewhere" is another watch's
        kopf_fixes.forget_unlisted(None)
        assert ("DELETED", "gone") not in asyncio.run(run())
    finally:
        kopf_fixes.forget_unlisted(None)
