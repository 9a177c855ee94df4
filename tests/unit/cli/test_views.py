"""What each verb prints for people, from the client's results (no cluster needed)."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from agentworkers.api import WorkerSpec, WorkerStatus
from agentworkers.api.worker import WorkerEvent
from agentworkers.cli.output import Output, Waiting
from agentworkers.cli.render import (
    collect_text,
    diff_text,
    event_row,
    explanation_text,
    inspection_text,
    revisions_text,
    tree_text,
    when,
    worker_rows,
)
from agentworkers.client import (
    CollectResult,
    EventRecord,
    ExplainedField,
    Explanation,
    FieldChange,
    ProfileChange,
    ProfileDiff,
    RevisionInfo,
    WorkerInfo,
    inspection,
    spawn_tree,
)


def worker(phase: str | None = "Running", **status: object) -> WorkerInfo:
    return WorkerInfo(
        name="w1",
        spec=WorkerSpec(agent="planner", queries=("more",)),
        status=WorkerStatus.model_validate({"phase": phase, **status}),
        created="2030-01-01T00:00:00Z",
    )


def revision(n: int, active: bool) -> RevisionInfo:
    return RevisionInfo(f"planner-r{n}", "planner", n, f"{n}" * 64, "", active, 3)


def test_inspect_describes_the_worker_then_its_events() -> None:
    events = [
        WorkerEvent(index=i, kind="tool_call", time="2030-01-01T00:00:00Z", summary=f"call {i}")
        for i in (4, 5)
    ]
    text = inspection_text(inspection(worker(recentEvents=events, eventIndex=5), since=1), since=1)
    assert "Phase:        Running\n" in text
    assert "Queries:      1 (0 delivered)\n" in text
    assert "Kind:         static\n" in text
    assert "Events (after 1, next --since 5, 2 no longer kept):\n" in text
    assert text.splitlines()[-3].split() == ["INDEX", "KIND", "AGE", "SUMMARY"]
    assert text.splitlines()[-1].split()[:2] == ["5", "tool_call"]
    assert inspection_text(inspection(worker()), 0).endswith("next --since 0):\n  <none>\n")


def test_collect_prints_the_output_below_its_key() -> None:
    text = collect_text(CollectResult("w1", "Done", "first\nsecond", ""))
    assert text == (
        "Name:    w1\nPhase:   Done\nError:   <none>\nOutput:\n  first\n  second\n"
        "worker/w1 collected and deleted, with its pod and children\n"
    )
    kept = collect_text(CollectResult("w1", "Done", "", "", deleted=False))
    assert kept.endswith(
        "worker/w1 collected and kept (delete it when done: kubectl delete worker)\n"
    )


def test_an_event_row_has_fixed_columns() -> None:
    row = event_row(EventRecord("w1", 7, "thought", "2030-01-01T00:00:00Z", "hmm"))
    assert row.index("7") == 25 and row.index("thought") == 32 and row.endswith("hmm\n")


def test_explain_is_a_header_and_a_field_table() -> None:
    found = Explanation(
        "child",
        "planner",
        "reviewer",
        "AgentConfigRevision/planner-r1",
        (ExplainedField("model", "demo-small", "profile"), ExplainedField("skills", [], "agent")),
    )
    head, rows = explanation_text(found).split("\n\n")
    assert head.splitlines()[2] == "Profile:   reviewer"
    assert head.splitlines()[3] == "Inherits:  <none>"
    assert [r.split() for r in rows.splitlines()] == [
        ["FIELD", "VALUE", "LAYER"],
        ["model", "demo-small", "profile"],
        ["skills", "<none>", "agent"],
    ]


def test_a_diff_lists_keys_with_their_changed_fields() -> None:
    change = ProfileChange("a", "changed", "1" * 64, "2" * 64, (FieldChange("x.y", 1, 2),))
    text = diff_text(ProfileDiff("planner", revision(1, False), revision(2, True), (change,)))
    assert text.splitlines()[0] == "planner: revision 1 -> 2"
    assert text.splitlines()[2].split() == ["a", "changed", "1" * 12, "2" * 12, "x.y"]


def test_revisions_mark_the_active_one() -> None:
    rows = revisions_text([revision(1, False), revision(2, True)]).splitlines()
    assert [r.split()[4] for r in rows] == ["ACTIVE", "no", "yes"]


def test_revisions_say_which_engine_applied_each() -> None:
    flux = dataclasses.replace(revision(2, True), applied_by="Flux Kustomization ns/agents")
    rows = revisions_text([revision(1, False), flux]).splitlines()
    assert rows[0].endswith("APPLIED BY")
    assert rows[1].endswith("-") and rows[2].endswith("Flux Kustomization ns/agents")


def test_nothing_to_show_goes_to_stderr_and_json_is_still_printed() -> None:
    out = Output("table", stdout=io.StringIO(), stderr=io.StringIO())
    out.show([], lambda: "never", "No workers found.")
    assert (out.stdout.getvalue(), out.stderr.getvalue()) == ("", "No workers found.\n")  # type: ignore[attr-defined]
    scripted = Output("json", stdout=io.StringIO(), stderr=io.StringIO())
    scripted.show([], lambda: "never", "No workers found.")
    listed = json.loads(scripted.stdout.getvalue())  # type: ignore[attr-defined]
    assert listed == {"apiVersion": "v1", "kind": "List", "items": []}


def test_progress_off_a_terminal_is_one_line_per_change() -> None:
    stream = io.StringIO()
    waiting = Waiting("collect", stream)
    for info in (worker(None), worker(None), worker("Running", lastEvent="pod running")):
        waiting(info)
    waiting.done()
    assert [line.rsplit(",", 1)[0] for line in stream.getvalue().splitlines()] == [
        "collect w1: Pending",
        "collect w1: Running (pod running)",
    ]


def test_list_wide_adds_the_pod_the_revision_and_the_start() -> None:
    running = worker("Running", pod="w1", revision="planner-r1", startedAt="2030-01-01T00:00:00Z")
    narrow, wide = worker_rows([running]), worker_rows([running], wide=True)
    assert narrow.split()[:8] == [
        "NAME", "PHASE", "KIND", "AGENT", "PROFILE", "PARENT", "LAST", "EVENT"
    ]  # fmt: skip
    assert narrow.splitlines()[1].split()[:3] == ["w1", "Running", "static"]
    assert "REVISION" not in narrow
    assert wide.splitlines()[0].split()[-3:] == ["POD", "REVISION", "STARTED"]
    assert wide.splitlines()[1].split()[-3:] == ["w1", "planner-r1", "2030-01-01T00:00:00Z"]


@pytest.mark.parametrize(
    "stamp",
    ["2030-01-01T00:00:00Z", "2030-01-01T00:00:00.123Z", "2030-01-01T00:00:00+00:00",
     "2030-01-01T01:00:00.5+01:00"],
)  # fmt: skip
def test_one_time_format_everywhere(stamp: str) -> None:
    assert when(stamp) == "2030-01-01T00:00:00Z"
    row = event_row(EventRecord("w1", 7, "thought", stamp, "hmm"))
    assert "2030-01-01T00:00:00Z " in row


def _info(
    name: str, parent: str | None = None, phase: str = "Running", **status: object
) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        spec=WorkerSpec(agent="planner", parent=parent),
        status=WorkerStatus.model_validate({"phase": phase, **status}),
        created="2030-01-01T00:00:00Z",
    )


def test_a_spawn_tree_is_drawn_like_kubectl_tree() -> None:
    workers = [
        _info("lead", tokensUsed={"prompt": 1200, "completion": 34}),
        _info("review", "lead", "Killed", error="parent killed: over budget"),
        _info("research", "lead"),
        _info("deep", "research", "Pending"),
        _info("other"),  # another tree: not drawn
    ]
    found = spawn_tree(workers, "lead")
    assert found is not None
    rows = tree_text(found).splitlines()
    names = [r[: r.index(" ", r.rindex("─ ") + 2 if "─ " in r else 0)] for r in rows[1:]]
    assert names == ["lead", "├── research", "│   └── deep", "└── review"]
    assert rows[-1].split()[-4:] == ["parent", "killed:", "over", "budget"]
    assert rows[0].split()[:4] == ["NAME", "PHASE", "PROFILE", "TOKENS"]
    assert "Running   <none>    1234" in rows[1]  # the tokens the run's model calls used
    assert spawn_tree(workers, "nobody") is None


def test_a_tree_names_its_trace() -> None:
    found = spawn_tree([_info("lead"), _info("kid", "lead")], "lead")
    assert found is not None
    traced = dataclasses.replace(found, trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    assert tree_text(traced).endswith("\nTrace ID: 4bf92f3577b34da6a3ce929d0e0e4736\n")
    assert "Trace ID" not in tree_text(found)  # nothing to name (a forest, say)


def test_a_parent_loop_does_not_draw_forever() -> None:
    workers = [_info("a", "b"), _info("b", "a")]
    found = spawn_tree(workers, "a")
    assert found is not None
    assert [c.worker.name for c in found.children] == ["b"]
    assert found.children[0].children == ()
