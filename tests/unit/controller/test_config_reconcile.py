"""An AgentConfig's reconcile against the in-memory repository: the settle window (one
change set, one revision), reverts that bring a revision back, and the kstatus conditions
(Ready, Stalled, Reconciling) GitOps engines read."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.controller.passes import configs
from agentworkers.controller.passes.requeue import Later
from agentworkers.core.revisions import SettleWindow
from tests.unit.controller.memory import Memory

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CONFIG = yaml.safe_load((EXAMPLES / "agentconfig.yaml").read_text())
PROFILES = list(yaml.safe_load_all((EXAMPLES / "virtualagentprofiles.yaml").read_text()))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def put(memory: Memory, plural: str, body: dict[str, Any], generation: int = 1) -> None:
    body = copy.deepcopy(body)
    body["metadata"]["generation"] = generation
    kept = memory.find(plural, body["metadata"]["name"])
    if kept is not None:  # an update keeps the object's identity and its status
        body["metadata"]["uid"] = kept["metadata"]["uid"]
        body["status"] = kept.get("status")
    memory.put(plural, body)


def conditions(memory: Memory, plural: str, name: str) -> dict[str, tuple[str, str, str]]:
    body = memory.find(plural, name) or {}
    return {
        c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
        for c in (body.get("status") or {}).get("conditions", [])
    }


def active(memory: Memory) -> dict[str, Any] | None:
    return ((memory.find("agentconfigs", "planner") or {}).get("status") or {}).get(
        "activeRevision"
    )


def revisions(memory: Memory) -> list[str]:
    return sorted(n for (p, _, n) in memory.objects if p == "agentconfigrevisions")


def test_a_change_set_is_cut_once_its_inputs_keep_still() -> None:
    memory, clock, window = Memory(), Clock(), SettleWindow(2.0)

    def reconcile() -> float | None:
        try:
            configs.reconcile(memory, "ns", "planner", settle=window, clock=clock)
        except Later as later:
            return float(later.delay)
        return None

    # A sync applies the profiles, then the config: nothing is cut while it goes on.
    put(memory, "virtualagentprofiles", PROFILES[0])
    assert reconcile() is None  # no AgentConfig yet: nothing to cut, nothing held
    put(memory, "agentconfigs", CONFIG)
    assert reconcile() == 2.0
    ready = conditions(memory, "agentconfigs", "planner")
    assert ready["Reconciling"][:2] == ("True", "Settling")
    assert ready["Ready"][:2] == ("False", "Settling")
    assert ready["Stalled"][0] == "False"
    clock.now += 0.5
    put(memory, "virtualagentprofiles", PROFILES[1])  # the last object of the commit
    assert reconcile() == 2.0  # the window starts again from the last change
    clock.now += 1.5
    assert reconcile() == pytest.approx(0.5)
    assert revisions(memory) == []
    clock.now += 0.5
    assert reconcile() is None
    assert revisions(memory) == ["planner-r1"]
    first = memory.find("agentconfigrevisions", "planner-r1")
    assert first is not None
    assert {p["profile"]["key"] for p in first["spec"]["profileMap"]["profiles"]} == {
        "researcher",
        "reviewer",
        "translator",
    }
    ready = conditions(memory, "agentconfigs", "planner")
    assert ready["Ready"][:2] == ("True", "RevisionActive")
    assert ready["Reconciling"][0] == ready["Stalled"][0] == "False"

    # A pass with nothing to cut (a status event, an operator restart) never waits.
    assert reconcile() is None

    # The next commit changes the config and a profile: one revision, with both.
    edited = copy.deepcopy(PROFILES[0])
    edited["spec"]["overlay"]["maxSteps"] = 9
    put(memory, "virtualagentprofiles", edited, generation=2)
    assert reconcile() == 2.0
    config = copy.deepcopy(CONFIG)
    config["spec"]["instructions"] = "Plan, then delegate."
    clock.now += 0.01
    put(memory, "agentconfigs", config, generation=2)
    assert reconcile() == 2.0
    clock.now += 2.0
    assert reconcile() is None
    assert revisions(memory) == ["planner-r1", "planner-r2"]
    assert [r for _, _, r, _ in memory.events if r == "RevisionCreated"] == ["RevisionCreated"] * 2


def test_a_revert_re_activates_the_revision_that_holds_the_content() -> None:
    memory = Memory()
    for profile in PROFILES:
        put(memory, "virtualagentprofiles", profile)
    put(memory, "agentconfigs", CONFIG)
    configs.reconcile(memory, "ns", "planner")
    first = active(memory)
    assert first is not None and first["revision"] == 1

    edited = copy.deepcopy(PROFILES[0])
    edited["spec"]["overlay"]["maxSteps"] = 9
    put(memory, "virtualagentprofiles", edited, generation=2)
    configs.reconcile(memory, "ns", "planner")
    assert active(memory)["revision"] == 2  # type: ignore[index]

    put(memory, "virtualagentprofiles", PROFILES[0], generation=3)  # git revert
    configs.reconcile(memory, "ns", "planner")
    assert active(memory) == first  # same id, same digest
    assert revisions(memory) == ["planner-r1", "planner-r2"]
    assert memory.reasons("planner")[-1] == "RevisionReactivated"
    # Applied by hand: no engine to name on the revisions.
    assert not (memory.find("agentconfigrevisions", "planner-r1") or {})["metadata"].get(
        "annotations"
    )
    profile = (memory.find("virtualagentprofiles", "planner-researcher") or {})["status"]
    assert profile["revision"] == "planner-r1"


def test_a_profile_whose_config_does_not_exist_says_so_and_is_not_stalled() -> None:
    memory = Memory()
    put(memory, "virtualagentprofiles", PROFILES[0])
    configs.reconcile(memory, "ns", "planner")
    status = conditions(memory, "virtualagentprofiles", "planner-researcher")
    assert status["Accepted"][:2] == ("False", "AgentConfigMissing")
    assert "AgentConfig 'planner' does not exist" in status["Accepted"][2]
    assert status["Ready"][:2] == ("False", "AgentConfigMissing")
    assert status["Stalled"][0] == status["Reconciling"][0] == "False"
    assert memory.events == []  # nothing is wrong with it: no Warning
    observed = (memory.find("virtualagentprofiles", "planner-researcher") or {})["status"]
    assert observed["observedGeneration"] == 1

    put(memory, "agentconfigs", CONFIG)  # the next wave brings the config
    configs.reconcile(memory, "ns", "planner")
    status = conditions(memory, "virtualagentprofiles", "planner-researcher")
    assert status["Accepted"][:2] == ("True", "Included")
    assert status["Ready"][:2] == ("True", "Included")


def test_a_refused_spec_is_stalled_with_the_reason_and_message() -> None:
    memory, clock, window = Memory(), Clock(), SettleWindow(1.0)
    put(memory, "agentconfigs", CONFIG)
    configs.reconcile(memory, "ns", "planner")  # revision 1, at once (no window)
    wide = copy.deepcopy(PROFILES[0])
    wide["metadata"]["name"] = "wide"
    wide["spec"]["key"] = "wide"
    wide["spec"]["label"] = "語" * 70  # over 200 bytes: past the schema, not the model
    put(memory, "virtualagentprofiles", wide)
    with pytest.raises(Later):  # held for the window like any change
        configs.reconcile(memory, "ns", "planner", settle=window, clock=clock)
    clock.now += 1.0
    configs.reconcile(memory, "ns", "planner", settle=window, clock=clock)
    stalled = conditions(memory, "agentconfigs", "planner")["Stalled"]
    assert stalled[:2] == ("True", "InvalidProfile")
    assert "VirtualAgentProfile/wide: spec.label" in stalled[2]
    assert "the last good revision stays active" in stalled[2]
    assert conditions(memory, "agentconfigs", "planner")["Ready"][:2] == (
        "False",
        "InvalidProfile",
    )
    assert active(memory)["revision"] == 1  # type: ignore[index]
    culprit = conditions(memory, "virtualagentprofiles", "wide")
    assert culprit["Stalled"][:2] == ("True", "InvalidProfile")
    warnings = [e for e in memory.events if e[1] == "Warning"]
    # A refusal already reported is not held again, nor reported twice.
    clock.now += 0.1
    configs.reconcile(memory, "ns", "planner", settle=window, clock=clock)
    assert [e for e in memory.events if e[1] == "Warning"] == warnings


def test_a_profile_left_out_of_the_map_is_stalled() -> None:
    memory = Memory()
    put(memory, "agentconfigs", CONFIG)
    put(memory, "virtualagentprofiles", PROFILES[0])
    twin = copy.deepcopy(PROFILES[0])
    twin["metadata"]["name"] = "twin"
    twin["metadata"]["creationTimestamp"] = "2031-01-01T00:00:00Z"  # younger: it loses
    put(memory, "virtualagentprofiles", twin)
    configs.reconcile(memory, "ns", "planner")
    status = conditions(memory, "virtualagentprofiles", "twin")
    assert status["Accepted"][:2] == ("False", "DuplicateKey")
    assert status["Stalled"][:2] == ("True", "DuplicateKey")
    assert conditions(memory, "virtualagentprofiles", "planner-researcher")["Ready"][0] == "True"
    assert conditions(memory, "agentconfigs", "planner")["Ready"][0] == "True"


def test_a_revision_names_the_flux_kustomization_that_applied_its_change() -> None:
    memory = Memory()
    config = copy.deepcopy(CONFIG)
    config["metadata"]["labels"] = {
        "kustomize.toolkit.fluxcd.io/name": "agents-staging",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    put(memory, "agentconfigs", config)
    configs.reconcile(memory, "ns", "planner")
    revision = memory.find("agentconfigrevisions", "planner-r1") or {}
    assert revision["metadata"]["annotations"] == {
        "agentworkers.io/applied-by": "Flux Kustomization flux-system/agents-staging"
    }
