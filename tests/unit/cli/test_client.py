"""The client's pure parts: the event cursor, inspect's window, explain's layers, profile diffs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.api import AgentConfigSpec, FrozenProfile, FrozenProfileMap, WorkerSpec
from agentworkers.api.profile import VirtualAgentProfileSpec
from agentworkers.client import (
    ApiError,
    EventCursor,
    UnknownWorkerError,
    WorkerFinishedError,
    WorkerInfo,
    diff_profiles,
    explain_fields,
    inspection,
    revision_ref,
)
from agentworkers.client.errors import translate
from agentworkers.core.effective import resolve
from agentworkers.kube.api import refusal
from agentworkers.virtualagent import profile_hash

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CONFIG = AgentConfigSpec.model_validate(
    yaml.safe_load((EXAMPLES / "agentconfig.yaml").read_text())["spec"]
)


def body(name: str, *indices: int, uid: str = "", event_index: int | None = None) -> dict[str, Any]:
    events = [{"index": i, "kind": "thought", "time": "2030-01-01T00:00:00Z"} for i in indices]
    status: dict[str, Any] = {"recentEvents": events}
    if event_index is not None:
        status["eventIndex"] = event_index
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}"},
        "spec": {"agent": "planner"},
        "status": status,
    }


def test_each_worker_event_comes_once_in_index_order() -> None:
    cursor = EventCursor()
    assert [e.index for e in cursor.advance(body("a", 2, 1))] == [1, 2]
    assert [e.index for e in cursor.advance(body("a", 1, 2, 3))] == [3]  # the ring again
    assert cursor.advance(body("a", 1, 2, 3)) == []
    assert [(e.worker, e.index) for e in cursor.advance(body("b", 1))] == [("b", 1)]
    # Deleted and created again under its name: a new uid starts afresh.
    cursor.forget(body("a"))
    assert [e.index for e in cursor.advance(body("a", 1, uid="second"))] == [1]


def test_a_cursor_starts_after_since() -> None:
    assert [e.index for e in EventCursor(since=2).advance(body("a", 1, 2, 3, 4))] == [3, 4]


def test_inspect_shows_events_after_the_cursor_and_what_the_ring_lost() -> None:
    info = WorkerInfo.from_body(body("a", 5, 6, 7, event_index=7))
    found = inspection(info, since=1)
    assert [e.index for e in found.events] == [5, 6, 7]
    assert (found.cursor, found.missed) == (7, 3)  # 2, 3 and 4 left the ring
    later = inspection(info, since=7)
    assert (later.events, later.cursor, later.missed) == ((), 7, 0)
    assert inspection(WorkerInfo.from_body(body("a")), since=0).cursor == 0


def fields(worker: WorkerSpec, profile: Any = None) -> dict[str, tuple[Any, str]]:
    found = explain_fields(resolve(CONFIG, worker, profile))
    return {f.field: (f.value, f.layer) for f in found}


def test_explain_names_the_layer_of_every_field() -> None:
    reviewer = CONFIG.virtual_agents.profiles[0].to_profile("planner")  # type: ignore[union-attr]
    child = fields(WorkerSpec(agent="planner", parent="p", profile="reviewer"), reviewer)
    assert child["model"] == ("demo-small", "profile")
    assert child["maxSteps"] == (10, "profile")
    assert child["provider"] == ("scripted", "agent")
    assert child["profile"] == ("reviewer", "profile")
    assert "sources" not in child and "agent" not in child

    greedy = VirtualAgentProfileSpec.model_validate(
        {"agent": "planner", "key": "greedy", "overlay": {"maxSteps": 500}}
    ).profile()
    clamped = fields(WorkerSpec(agent="planner", parent="p", profile="greedy"), greedy)
    assert clamped["maxSteps"] == (50, "clamp")

    top = fields(WorkerSpec(agent="planner", model="other", reasoning="low"))
    assert top["model"] == ("other", "worker")
    assert top["reasoningEffort"] == ("low", "worker")
    assert top["maxSteps"] == (50, "agent")


def frozen(key: str, max_steps: int, source: str = "AgentConfig") -> FrozenProfile:
    profile = VirtualAgentProfileSpec.model_validate(
        {"agent": "planner", "key": key, "overlay": {"maxSteps": max_steps}}
    ).profile()
    return FrozenProfile(profile=profile, hash=profile_hash(profile), source=source)


def test_a_profile_diff_names_keys_and_fields() -> None:
    before = FrozenProfileMap(
        owner="planner", max_profiles=8, profiles=(frozen("a", 10), frozen("b", 10))
    )
    after = FrozenProfileMap(
        owner="planner",
        max_profiles=8,
        profiles=(frozen("b", 12, "VirtualAgentProfile/b"), frozen("c", 10)),
    )
    changes = {c.key: c for c in diff_profiles(before, after)}
    assert [(k, c.change) for k, c in changes.items()] == [
        ("a", "removed"),
        ("b", "changed"),
        ("c", "added"),
    ]
    assert [(f.path, f.before, f.after) for f in changes["b"].fields] == [
        ("profile.overlay.maxSteps", 10, 12),
        ("source", "AgentConfig", "VirtualAgentProfile/b"),
    ]
    assert changes["a"].after_hash is None and changes["c"].before_hash is None
    assert diff_profiles(before, before)[0].change == "unchanged"


@pytest.mark.parametrize(
    ("ref", "name"),
    [(3, "planner-r3"), ("3", "planner-r3"), ("r3", "planner-r3"), ("x-r1", "x-r1")],
)
def test_a_revision_by_id_or_name(ref: str | int, name: str) -> None:
    assert revision_ref("planner", ref) == name


def refused(status: int, text: str, **cause: str) -> ApiError:
    """An error response as the API server sends it (a Status), through the one decoder."""
    details = {"causes": [cause]} if cause else {}
    body = {"kind": "Status", "message": text, "details": details}
    return refusal(status, "Refused", json.dumps(body))


def test_api_refusals_become_the_seeds_errors() -> None:
    missing = UnknownWorkerError("unknown worker 'x'")
    assert translate(refused(404, "not found"), missing) is missing
    # An operator's refusal is told by the reason in the Status's details, not the text.
    finished = translate(
        refused(
            422,
            'admission webhook "worker.agentworkers.io" denied the request: ...',
            reason="WorkerFinished",
            field="spec.queries",
            message="the run is Killed; a finished worker takes no query",
        )
    )
    assert isinstance(finished, WorkerFinishedError)
    assert (finished.field, finished.rule) == (
        "spec.queries",
        "the run is Killed; a finished worker takes no query",
    )
    # The same words without the reason are just an API error.
    text = translate(refused(422, "WorkerFinished: the run is Killed"))
    assert type(text) is ApiError
    other = translate(refused(422, "spec.kill cannot be changed"))
    assert isinstance(other, ApiError) and other.status == 422
    assert str(other) == "422 Refused: spec.kill cannot be changed"
