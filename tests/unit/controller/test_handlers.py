"""The event handlers: which events take a pass (the store judges news), and that every
kind goes past kopf's own handling."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest import mock

import kopf

from agentworkers.api.names import WORKER_LABEL
from agentworkers.controller.infra.sharding import Everything
from agentworkers.controller.kopf import handlers, kopf_fixes, startup
from agentworkers.kube.store import Store


class Queue:
    """What a Requeue is asked for."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, str]] = []

    def attempt(self, namespace: str, name: str) -> None:
        self.attempts.append((namespace, name))

    def drop(self, key: tuple[str, str]) -> None:
        pass


def _memo() -> kopf.Memo:
    memo = kopf.Memo()
    memo.store = Store(judged=frozenset({"workers", "pods", "agentconfigs"}))
    memo.workers = Queue()
    memo.configs = Queue()
    memo.shards = Everything()
    return memo


def _worker(version: str, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": version},
        "spec": {"agent": "planner"},
        "status": {"phase": phase},
    }


def _event(memo: kopf.Memo, type_: str | None, body: dict[str, Any]) -> list[tuple[str, str]]:
    """One watch event as kopf delivers it: the store's index function, then the handler."""
    memo.workers.attempts.clear()
    plural = "pods" if body["kind"] == "Pod" else "workers"
    memo.store.observed(plural, body)
    handler = handlers.pod_event if plural == "pods" else handlers.worker_event
    asyncio.run(handler(type=type_, body=kopf.Body(body), memo=memo))
    return list(memo.workers.attempts)


def test_a_pass_s_own_write_takes_no_pass_unless_it_ended_the_run() -> None:
    memo = _memo()
    assert _event(memo, "ADDED", _worker("1", "Pending")) == [("ns", "w")]
    memo.store.wrote("workers", _worker("2", "Running"))  # a pass's own write
    assert _event(memo, "MODIFIED", _worker("2", "Running")) == []
    assert _event(memo, "MODIFIED", _worker("3", "Idle")) == [("ns", "w")]  # the runtime's
    # A pass that ended the run (a kill, a failure): the next starts its clocks.
    memo.store.wrote("workers", _worker("4", "Killed"))
    assert _event(memo, "MODIFIED", _worker("4", "Killed")) == [("ns", "w")]


def test_a_listing_always_takes_a_pass() -> None:
    memo = _memo()
    _event(memo, "ADDED", _worker("1", "Pending"))
    assert _event(memo, None, _worker("1", "Pending")) == [("ns", "w")]


def test_a_pod_event_takes_a_pass_for_its_worker_when_it_is_news() -> None:
    memo = _memo()

    def pod(version: str, **status: Any) -> dict[str, Any]:
        meta = {"name": "w", "namespace": "ns", "resourceVersion": version}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, "labels": {WORKER_LABEL: "w"}},
            "spec": {"nodeName": status.pop("node", None)},
            "status": status,
        }

    memo.store.wrote("pods", pod("1", phase="Pending"))  # the pass's own create
    assert _event(memo, "ADDED", pod("1", phase="Pending")) == []
    assert _event(memo, "MODIFIED", pod("2", phase="Pending", node="kwok-0")) == []  # scheduled
    assert _event(memo, "MODIFIED", pod("3", phase="Running")) == [("ns", "w")]
    assert _event(memo, "DELETED", pod("4", phase="Running")) == [("ns", "w")]
    assert memo.store.get("pods", "ns", "w") is None


def test_a_lean_kind_has_no_handler_of_kopf_s_but_its_two() -> None:
    """kopf gives a lean kind's events to its index function and event handler only
    (kopf_fixes 7): another handler registered for it would never run."""
    registry = kopf.get_default_registry()
    registered = [
        (kind, handler)
        for kind, sub in (
            ("index", registry._indexing),
            ("event", registry._watching),
            ("change", registry._changing),
            ("daemon", registry._spawning),
        )
        for handler in sub.get_all_handlers()
    ]
    # Every kind: none goes through kopf's change handling, which writes on the objects.
    assert {plural for _, plural in kopf_fixes._LEAN} == set(startup.TRIM)
    for (group, plural), (index, event) in kopf_fixes._LEAN.items():
        mine = [
            (kind, h)
            for kind, h in registered
            if h.selector is not None
            and h.selector.group == group
            and plural in (h.selector.any_name, h.selector.plural)
        ]
        assert sorted(kind for kind, _ in mine) == ["event", "index"], plural
        by_kind = {kind: h.fn for kind, h in mine}
        assert by_kind["event"] is event
        assert by_kind["index"] is index


def test_an_admission_only_store_is_fed_past_kopf_s_machinery() -> None:
    """`--role=admission` registers only the store's handlers: every kind goes lean, each
    to the index function and forgetter kopf also has."""
    registry = kopf.OperatorRegistry()
    with mock.patch.dict(kopf_fixes._LEAN, clear=True):
        default = kopf.get_default_registry()
        kopf.set_default_registry(registry)
        try:
            startup.register_store()
        finally:
            kopf.set_default_registry(default)
        lean = dict(kopf_fixes._LEAN)
    plurals = {plural for _, plural in lean}
    # Every kind the store keeps, but Kueue's Workloads: only the controller reads them.
    assert plurals == set(startup.TRIM) - {"workloads"}
    events = {h.selector.any_name: h.fn for h in registry._watching.get_all_handlers()}
    indexes = {h.selector.any_name: h.fn for h in registry._indexing.get_all_handlers()}
    for (_, plural), (index, event) in lean.items():
        assert index is indexes[plural] and event is events[plural]


def _config(version: str, **spec: Any) -> dict[str, Any]:
    meta = {"name": "planner", "namespace": "ns", "uid": "u", "resourceVersion": version}
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "AgentConfig",
        "metadata": meta,
        "spec": {"model": {"provider": "scripted"}, **spec},
    }


def _config_event(memo: kopf.Memo, type_: str | None, body: dict[str, Any]) -> list[Any]:
    memo.configs.attempts.clear()
    if type_ != "DELETED":
        memo.store.observed("agentconfigs", body)
    asyncio.run(handlers.agent_config_event(type=type_, body=kopf.Body(body), memo=memo))
    return list(memo.configs.attempts)


def test_an_agent_config_takes_a_pass_when_an_event_is_news() -> None:
    memo = _memo()
    assert _config_event(memo, None, _config("1")) == [("ns", "planner")]  # the start
    assert _config_event(memo, "MODIFIED", _config("2", instructions="x")) == [("ns", "planner")]
    memo.store.wrote("agentconfigs", {**_config("3", instructions="x"), "status": {"a": 1}})
    assert _config_event(memo, "MODIFIED", _config("3", instructions="x")) == []  # its echo
    assert _config_event(memo, "DELETED", _config("3")) == [("ns", "planner")]
    assert memo.store.get("agentconfigs", "ns", "planner") is None


def test_a_profile_event_takes_a_pass_for_its_agent_in_the_listing_too() -> None:
    """A profile listed before its AgentConfig exists says so (a new namespace's listing)."""
    memo = _memo()
    body = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "VirtualAgentProfile",
        "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1"},
        "spec": {"agent": "planner", "key": "k"},
    }
    for type_, attempts in (
        (None, [("ns", "planner")]),
        ("ADDED", [("ns", "planner")]),
        ("DELETED", [("ns", "planner")]),
    ):
        memo.configs.attempts.clear()
        memo.store.observed("virtualagentprofiles", body)
        asyncio.run(handlers.profile_event(type=type_, body=kopf.Body(body), memo=memo))
        assert memo.configs.attempts == attempts, type_
    assert memo.store.get("virtualagentprofiles", "ns", "p") is None
