"""The config plane's decisions: effective maps, digests, revision plans, pruning."""

from __future__ import annotations

import pytest

from agentworkers.api import AgentConfigSpec, VirtualAgentProfileSpec
from agentworkers.core.revisions import (
    ExistingRevision,
    Standalone,
    applied_by,
    digest,
    effective_map,
    kube_path,
    pinned_by,
    plan_revision,
    prunable,
)
from agentworkers.virtualagent import InvalidMapError, InvalidProfileError

BASE = {"model": {"model": "m"}}


def config(*profiles: dict, max_profiles: int = 0, **extra: object) -> AgentConfigSpec:
    spec = {**BASE, **extra}
    if profiles or max_profiles:
        spec["virtualAgents"] = {"maxProfiles": max_profiles, "profiles": list(profiles)}
    return AgentConfigSpec.model_validate(spec)


def standalone(name: str, key: str, created: str = "", **spec: object) -> Standalone:
    return Standalone(
        name, VirtualAgentProfileSpec.model_validate({"agent": "a", "key": key, **spec}), created
    )


def test_kube_path_uses_the_names_the_user_wrote() -> None:
    assert kube_path("overlay.max_tokens", "spec") == "spec.overlay.maxTokens"
    assert kube_path("profiles[2].overlay.disabled_tools[0]", "spec.virtualAgents") == (
        "spec.virtualAgents.profiles[2].overlay.disabledTools[0]"
    )
    assert kube_path("", "spec") == "spec"


def test_the_section_wins_over_a_standalone_profile_of_the_same_key() -> None:
    spec = config({"key": "r", "label": "from the section"})
    effective = effective_map(
        "a", spec, [standalone("a-r", "r", label="standalone"), standalone("a-t", "t")]
    )
    assert [p.key for p in effective.profile_map.profiles] == ["r", "t"]
    assert effective.profile_map.by_key()["r"].label == "from the section"
    assert effective.sources == {"r": "AgentConfig", "t": "VirtualAgentProfile/a-t"}
    assert effective.overridden == ("a-r",)


def test_both_doors_hash_the_same() -> None:
    fields = {"key": "r", "label": "L", "overlay": {"skills": ["b", "a", "a"], "maxSteps": 3}}
    via_section = effective_map("a", config(fields), [])
    via_standalone = effective_map("a", config(), [standalone("a-r", **fields)])
    assert via_section.frozen().profiles[0].hash == via_standalone.frozen().profiles[0].hash


def test_duplicate_keys_in_the_section_are_refused_with_the_path() -> None:
    with pytest.raises(
        InvalidMapError, match=r"spec\.virtualAgents\.profiles\[1\]\.key: duplicate key 'r'"
    ):
        effective_map("a", config({"key": "r"}, {"key": "r"}), [])


def test_of_two_standalone_profiles_with_one_key_the_older_wins() -> None:
    newer = standalone("a", "r", "2026-01-02T00:00:00Z", label="newer")
    older = standalone("b", "r", "2026-01-01T00:00:00Z", label="older")
    effective = effective_map("a", config(), [newer, older])
    assert effective.profile_map.by_key()["r"].label == "older"
    refusal = effective.excluded["a"]
    assert refusal.reason == "DuplicateKey"
    assert str(refusal).startswith("VirtualAgentProfile/a: spec.key: key 'r' is already")
    # Created in the same second: the name decides, the same way every time.
    tied = [standalone(n, "r", "2026-01-01T00:00:00Z") for n in ("y", "x")]
    assert set(effective_map("a", config(), tied).excluded) == {"y"}


def test_the_cap_counts_both_doors_and_the_oldest_profiles_fill_it() -> None:
    spec = config({"key": "one"}, max_profiles=2)
    assert not effective_map("a", spec, [standalone("s2", "two")]).excluded
    burst = [standalone(f"s{i}", f"k{i}", f"2026-01-01T00:00:0{9 - i}Z") for i in range(3)] + [
        standalone("new", "fresh")
    ]  # not created yet: the newest of all
    effective = effective_map("a", spec, burst)
    assert [p.key for p in effective.profile_map.profiles] == ["k2", "one"]
    assert {n: e.reason for n, e in effective.excluded.items()} == {
        "s0": "TooManyProfiles",
        "s1": "TooManyProfiles",
        "new": "TooManyProfiles",
    }
    assert "maximum of 2 profiles" in str(effective.excluded["s0"])
    # The section alone past the cap is one object's fault: refused, not left out.
    with pytest.raises(InvalidMapError, match=r"spec\.virtualAgents"):
        effective_map("a", config({"key": "x"}, {"key": "y"}, max_profiles=1), [])


def test_errors_name_the_field_as_written() -> None:
    with pytest.raises(
        InvalidProfileError, match=r"spec\.virtualAgents\.profiles\[0\]\.overlay\.maxTokens"
    ):
        effective_map("a", config({"key": "r", "overlay": {"maxTokens": 0}}), [])
    with pytest.raises(InvalidProfileError, match=r"VirtualAgentProfile/x: spec\.label"):
        effective_map("a", config(), [standalone("x", "r", label="é" * 101)])


def test_a_blank_list_entry_is_refused_not_dropped() -> None:
    with pytest.raises(InvalidProfileError, match=r"overlay\.skills\[0\]: must not be blank"):
        effective_map("a", config(), [standalone("x", "r", overlay={"skills": [" "]})])


def _plan(spec: AgentConfigSpec, existing: list[ExistingRevision], active: str | None = None):  # type: ignore[no-untyped-def]
    return plan_revision("a", spec, effective_map("a", spec, []), existing, active)


def test_first_revision_then_none_for_the_same_content() -> None:
    spec = config({"key": "r"})
    first = _plan(spec, [])
    assert first.create is not None and first.create.revision == 1
    assert first.active.name == "a-r1"
    assert first.create.digest == digest(spec, effective_map("a", spec, []).frozen())
    made = ExistingRevision("a-r1", 1, first.create.digest, "uid")
    again = _plan(spec, [made], "a-r1")
    assert again.create is None and again.active == made


def test_a_revision_made_before_a_crash_is_adopted() -> None:
    spec = config({"key": "r"})
    made = ExistingRevision("a-r1", 1, _plan(spec, []).active.digest, "uid")
    plan = _plan(spec, [made], active=None)  # status was never written
    assert plan.create is None and plan.active == made


def _made(spec: AgentConfigSpec, number: int) -> ExistingRevision:
    return ExistingRevision(f"a-r{number}", number, _plan(spec, []).active.digest, "u")


def test_a_revert_re_activates_the_revision_that_holds_its_content() -> None:
    one, two, three = config({"key": "r"}), config({"key": "s"}), config({"key": "t"})
    r1, r2 = _made(one, 1), _made(two, 2)
    back = _plan(one, [r1, r2], "a-r2")
    assert back.create is None and back.active == r1  # same id, same digest
    # New content after the revert still gets an id past every id ever cut.
    onward = _plan(three, [r1, r2], "a-r1")
    assert onward.create is not None and onward.create.revision == 3
    # Forward again to content r2 holds: r2, not a fourth.
    assert _plan(two, [r1, r2, _made(three, 3)], "a-r3").active == r2


def test_content_held_twice_re_activates_the_newer_revision() -> None:
    """Histories cut before revisions were re-activated may hold one content twice."""
    one, two = config({"key": "r"}), config({"key": "s"})
    r1, r2 = _made(one, 1), _made(two, 2)
    r3 = ExistingRevision("a-r3", 3, r1.digest, "u")
    assert _plan(one, [r1, r2, r3], "a-r2").active == r3


def test_content_of_a_pruned_revision_is_cut_anew() -> None:
    one, two = config({"key": "r"}), config({"key": "s"})
    back = _plan(one, [_made(two, 2)], "a-r2")  # r1 was pruned
    assert back.create is not None and back.create.revision == 3


def test_pruning_keeps_the_limit_the_active_and_the_pinned() -> None:
    existing = [ExistingRevision(f"a-r{i}", i, "d", "u") for i in range(1, 8)]
    assert prunable(existing, keep=3, active="a-r7", pinned=()) == ("a-r4", "a-r3", "a-r2", "a-r1")
    assert prunable(existing, keep=3, active="a-r7", pinned=["a-r2"]) == ("a-r4", "a-r3", "a-r1")
    assert prunable(existing, keep=10, active="a-r7", pinned=()) == ()


def test_pruning_after_a_revert_keeps_the_newest_so_ids_never_repeat() -> None:
    existing = [ExistingRevision(f"a-r{i}", i, "d", "u") for i in range(1, 5)]
    assert prunable(existing, keep=1, active="a-r2", pinned=()) == ("a-r3", "a-r1")
    assert prunable(existing, keep=2, active="a-r2", pinned=["a-r1"]) == ("a-r3",)


def test_a_plan_never_prunes_what_a_live_worker_is_bound_to() -> None:
    one, two = config({"key": "r"}), config({"key": "s"})
    limited = AgentConfigSpec.model_validate(
        {**two.model_dump(by_alias=True, exclude_none=True), "revisionHistoryLimit": 1}
    )
    history = [_made(one, 1), _made(two, 2), _made(one, 3)]
    workers = [
        {"spec": {"agent": "a"}, "status": {"phase": "Pending", "binding": {"revision": "1"}}}
    ]
    plan = plan_revision(
        "a", limited, effective_map("a", limited, []), history, "a-r3", pinned_by("a", workers)
    )
    assert plan.create is not None and plan.active.name == "a-r4"
    assert plan.prune == ("a-r2",)  # r1 is bound, r3 the newest kept; r4 is being made


def test_the_digest_moves_with_config_and_profiles() -> None:
    base = config({"key": "r"})
    d = digest(base, effective_map("a", base, []).frozen())
    other_config = config({"key": "r"}, instructions="be brief")
    assert digest(other_config, effective_map("a", other_config, []).frozen()) != d
    other_profile = config({"key": "r", "label": "x"})
    assert digest(other_profile, effective_map("a", other_profile, []).frozen()) != d


def test_live_workers_pin_the_revision_they_froze_and_the_one_they_are_bound_to() -> None:
    workers = [
        {
            "spec": {"agent": "a"},
            "status": {"phase": "Running", "frozenRevision": {"name": "a-r1"}},
        },
        {"spec": {"agent": "a"}, "status": {"phase": "Pending", "binding": {"revision": "2"}}},
        {"spec": {"agent": "a"}, "status": {"phase": "Done", "frozenRevision": {"name": "a-r3"}}},
        {
            "spec": {"agent": "b"},
            "status": {"phase": "Running", "frozenRevision": {"name": "b-r4"}},
        },
        {"spec": {"agent": "a"}},  # not started: pins nothing yet
    ]
    assert pinned_by("a", workers) == {"a-r1", "a-r2"}


def test_applied_by_names_the_engine_as_it_marks_its_objects() -> None:
    flux = {
        "metadata": {
            "labels": {
                "kustomize.toolkit.fluxcd.io/name": "agents-staging",
                "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
            }
        }
    }
    argo = {
        "metadata": {
            "annotations": {
                "argocd.argoproj.io/tracking-id": (
                    "agents-staging:agentworkers.io/AgentConfig:agents-staging/planner"
                )
            }
        }
    }
    assert applied_by([flux, flux]) == "Flux Kustomization flux-system/agents-staging"
    assert applied_by([argo]) == "Argo CD Application agents-staging"
    assert applied_by([{"metadata": {"labels": {"team": "search"}}}, {"metadata": {}}]) == ""
