"""kopf's fixes: the namespace observer serves a namespace seen only in the watch-stream's
own listing (an event of type None) like one seen being added; webhooks match only the
served namespaces; an event's body and patch are no reference cycles."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from kopf._cogs.structs import bodies, patches, references
from kopf._core.reactor import observation

from agentworkers.controller import kopf_fixes

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
