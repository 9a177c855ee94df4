"""Every branch of a Worker's reconcile, one row each, against the in-memory repository.

The end-to-end tests show the same on a real API server; these show every failure branch
in a second, and what each leaves behind: phase, Ready reason, pod, Events, writes.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.api.names import BINDING_ANNOTATION
from agentworkers.api.workerpod import WorkerPod
from agentworkers.controller.passes import configs, workers
from agentworkers.core.inputs import encode
from agentworkers.core.pods import DEFAULT_IMAGE
from agentworkers.core.worker_plan.running import RUNTIME_REPORT_SECONDS
from agentworkers.errors import ApiError
from tests.unit.controller.memory import Memory

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CONFIG = yaml.safe_load((EXAMPLES / "agentconfig.yaml").read_text())
PROFILES = list(yaml.safe_load_all((EXAMPLES / "virtualagentprofiles.yaml").read_text()))


def worker(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name, "generation": 1},
        "spec": {"agent": "planner", **spec},
    }


def planner(memory: Memory, **spec: Any) -> None:
    """The example agent and its profiles, reconciled to revision 1."""
    memory.put("agentconfigs", {**CONFIG, "spec": {**CONFIG["spec"], **spec}})
    for profile in PROFILES:
        memory.put("virtualagentprofiles", profile)
    configs.reconcile(memory, "ns", "planner")


def reconcile(memory: Memory, name: str) -> str:
    """One pass; "retry" when it asks to be run again later."""
    return "done" if workers.reconcile(memory, "ns", name) is None else "retry"


def pod_phase(memory: Memory, name: str, phase: str, **status: Any) -> None:
    """What kwok (a kubelet) reports of the pod."""
    pod = memory.objects[("pods", "ns", name)]
    pod["status"] = {"phase": phase, **status}


def started(memory: Memory, name: str, **spec: Any) -> None:
    """A Worker whose pod runs."""
    memory.put("workers", worker(name, **spec))
    reconcile(memory, name)
    pod_phase(memory, name, "Running")
    reconcile(memory, name)


def bound_child(memory: Memory, name: str, profile: str, **spec: Any) -> None:
    memory.put("workers", worker(name, parent="parent", profile=profile, suspend=True, **spec))
    reconcile(memory, name)


def resume(memory: Memory, name: str) -> None:
    memory.objects[("workers", "ns", name)]["spec"]["suspend"] = False


@dataclass(frozen=True)
class Row:
    """A situation, the Worker it is about, and what a user then sees."""

    scene: Callable[[Memory], None]
    name: str
    phase: str | None
    reason: str | None  # of the Ready condition
    pod: bool
    events: tuple[str, ...] = ()
    outcome: str = "done"


def _no_config(memory: Memory) -> None:
    memory.put("workers", worker("w"))


def _no_revision(memory: Memory) -> None:
    memory.put("agentconfigs", CONFIG)
    memory.put("workers", worker("w"))


def _top_level(memory: Memory) -> None:
    planner(memory)
    memory.put("workers", worker("w"))


def _parent_gone(memory: Memory) -> None:
    planner(memory)
    memory.put("workers", worker("w", parent="ghost"))


def _pod_lost(memory: Memory) -> None:
    planner(memory)
    started(memory, "w")
    memory.objects.pop(("pods", "ns", "w"))


def _foreign_pod(memory: Memory) -> None:
    planner(memory)
    memory.put("pods", {"metadata": {"name": "w", "ownerReferences": [{"uid": "other"}]}})
    memory.put("workers", worker("w"))


def _killed_before_its_pod(memory: Memory) -> None:
    planner(memory)
    memory.put("workers", worker("w", kill={"reason": "not needed", "by": "alice"}))


def _killed_running(memory: Memory) -> None:
    planner(memory)
    started(memory, "w")
    memory.objects[("workers", "ns", "w")]["spec"]["kill"] = {"reason": "enough"}


def _killed_with_a_foreign_pod(memory: Memory) -> None:
    planner(memory)
    memory.put("pods", {"metadata": {"name": "w", "ownerReferences": [{"uid": "other"}]}})
    memory.put("workers", worker("w", kill={"reason": "not needed"}))


def _suspended(memory: Memory) -> None:
    planner(memory)
    memory.put("workers", worker("w", suspend=True))


def _secret_refused(memory: Memory) -> None:
    planner(memory)
    memory.put("workers", worker("w", allowedSecrets=["root-password"]))


def _thinking_refused(memory: Memory) -> None:
    """Admission off: the Worker asks for Anthropic's thinking, its agent is scripted."""
    planner(memory)
    memory.put("workers", worker("w", reasoningAPI="enabled"))


def _pod_failed(memory: Memory) -> None:
    planner(memory)
    started(memory, "w")
    pod_phase(memory, "w", "Failed", reason="DeadlineExceeded", message="too slow")


def _pod_succeeded(memory: Memory) -> None:
    planner(memory)
    started(memory, "w")
    pod_phase(memory, "w", "Succeeded")


def _unreadable(memory: Memory) -> None:
    planner(memory)
    memory.put("workers", worker("w", kind="nonsense"))


def _profiled_child(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    memory.put("workers", worker("w", parent="parent", profile="reviewer"))


def _unknown_profile(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    memory.put("workers", worker("w", parent="parent", profile="nope"))


def _sibling_binding(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    bound_child(memory, "w", "translator")
    bound_child(memory, "b", "researcher")
    sibling = memory.objects[("workers", "ns", "b")]["metadata"]["annotations"][BINDING_ANNOTATION]
    memory.objects[("workers", "ns", "w")]["metadata"]["annotations"][BINDING_ANNOTATION] = sibling
    resume(memory, "w")


def _binding_removed(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    bound_child(memory, "w", "translator")
    del memory.objects[("workers", "ns", "w")]["metadata"]["annotations"][BINDING_ANNOTATION]


def _stale_pin(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    bound_child(memory, "w", "translator")
    memory.objects[("agentconfigs", "ns", "planner")]["spec"]["description"] = "edited"
    configs.reconcile(memory, "ns", "planner")  # revision 2
    resume(memory, "w")


def _below_a_profile_run(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    started(memory, "researcher", parent="parent", profile="researcher")
    memory.put("workers", worker("w", parent="researcher"))


def _kind_disagrees(memory: Memory) -> None:
    """As admission (when it is off) would have refused: a child that says it is static."""
    planner(memory)
    started(memory, "parent")
    memory.put("workers", worker("w", parent="parent", kind="static"))


def _inputs(*names: str) -> list[dict[str, Any]]:
    return [encode(name, b"text\n").wire() for name in names]


def _inputs_past_the_profile(memory: Memory) -> None:
    """As admission (when it is off) would have refused: researcher takes *.md, text/*."""
    planner(memory)
    started(memory, "parent")
    memory.put(
        "workers", worker("w", parent="parent", profile="researcher", inputs=_inputs("x.sh"))
    )


def _inputs_below_a_profile_run(memory: Memory) -> None:
    """Bounded by the researcher run's profile, as its other bounds are."""
    _below_a_profile_run(memory)
    memory.objects[("workers", "ns", "w")]["spec"]["inputs"] = _inputs(*"abcde")


def _inputs_within_the_profile(memory: Memory) -> None:
    planner(memory)
    started(memory, "parent")
    memory.put(
        "workers",
        worker("w", parent="parent", profile="researcher", inputs=_inputs("a.md", "b.txt")),
    )


def _runtime_failed(memory: Memory) -> None:
    planner(memory)
    started(memory, "w")
    body = memory.objects[("workers", "ns", "w")]
    body["status"] = {**body["status"], "phase": "Failed", "error": "ModelError: unreachable"}


ROWS = {
    "no AgentConfig: the run waits, with the reason": Row(
        _no_config, "w", "Pending", "AgentConfigMissing", pod=False, outcome="retry"
    ),
    "no revision yet: the run waits": Row(
        _no_revision, "w", "Pending", "NoActiveRevision", pod=False, outcome="retry"
    ),
    "a top-level run gets its pod": Row(_top_level, "w", "Pending", "Running", pod=True),
    "the parent is gone": Row(
        _parent_gone, "w", "Failed", "UnknownWorker", pod=False, events=("UnknownWorker",)
    ),
    "the pod was deleted under it": Row(
        _pod_lost, "w", "Failed", "PodLost", pod=False, events=("PodLost",)
    ),
    "a pod of its name is someone else's": Row(
        _foreign_pod, "w", "Failed", "PodConflict", pod=True, events=("PodConflict",)
    ),
    "killed before its pod": Row(
        _killed_before_its_pod, "w", "Killed", "Killed", pod=False, events=("Killed",)
    ),
    "killed while running": Row(
        _killed_running, "w", "Killed", "Killed", pod=False, events=("Killed",)
    ),
    "killed, with someone else's pod of its name (left alone)": Row(
        _killed_with_a_foreign_pod, "w", "Killed", "Killed", pod=True, events=("Killed",)
    ),
    "suspended: no pod yet": Row(_suspended, "w", "Pending", None, pod=False),
    "a secret its agent does not allow": Row(
        _secret_refused, "w", "Failed", "SecretNotAllowed", pod=False, events=("SecretNotAllowed",)
    ),
    "reasoningAPI on an agent that is not anthropic": Row(
        _thinking_refused,
        "w",
        "Failed",
        "ReasoningAPIUnsupported",
        pod=False,
        events=("ReasoningAPIUnsupported",),
    ),
    "its pod failed": Row(
        _pod_failed, "w", "Failed", "DeadlineExceeded", pod=True, events=("DeadlineExceeded",)
    ),
    "its pod succeeded": Row(
        _pod_succeeded, "w", "Done", "Completed", pod=True, events=("Completed",)
    ),
    "its runtime reports a failure": Row(
        _runtime_failed, "w", "Failed", "RunFailed", pod=True, events=("RunFailed",)
    ),
    "a spec that does not decode": Row(
        _unreadable, "w", "Failed", "InvalidSpec", pod=False, events=("InvalidSpec",)
    ),
    "a profiled child is bound, then started": Row(
        _profiled_child, "w", "Pending", "Running", pod=True
    ),
    "a profile not in the parent's map": Row(
        _unknown_profile, "w", "Failed", "UnknownProfile", pod=False, events=("UnknownProfile",)
    ),
    "a sibling's binding": Row(
        _sibling_binding, "w", "Failed", "TamperedBinding", pod=False, events=("TamperedBinding",)
    ),
    "a binding removed after binding": Row(
        _binding_removed, "w", "Failed", "TamperedBinding", pod=False, events=("TamperedBinding",)
    ),
    "the agent moved on since the parent froze": Row(
        _stale_pin, "w", "Failed", "StaleProfilePin", pod=False, events=("StaleProfilePin",)
    ),
    "below a profile run": Row(_below_a_profile_run, "w", "Pending", "Running", pod=True),
    "inputs no inputPattern of its profile matches": Row(
        _inputs_past_the_profile,
        "w",
        "Failed",
        "InputNotAllowed",
        pod=False,
        events=("InputNotAllowed",),
    ),
    "inputs past the inputCount of the profile run above": Row(
        _inputs_below_a_profile_run,
        "w",
        "Failed",
        "InputNotAllowed",
        pod=False,
        events=("InputNotAllowed",),
    ),
    "a kind that disagrees with its parent": Row(
        _kind_disagrees, "w", "Failed", "InvalidSpec", pod=False, events=("InvalidSpec",)
    ),
    "inputs within its profile": Row(
        _inputs_within_the_profile, "w", "Pending", "Running", pod=True
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_a_worker_reconcile(row: Row) -> None:
    memory = Memory()
    row.scene(memory)
    assert reconcile(memory, row.name) == row.outcome
    assert reconcile(memory, row.name) == row.outcome  # and again: nothing changes twice
    body = memory.find("workers", row.name)
    assert body is not None
    status = body.get("status") or {}
    assert status.get("phase") == row.phase, status
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
    assert (ready or {}).get("reason") == row.reason, status
    # kstatus beside Ready: Stalled=True exactly when the run Failed, saying why (what Flux
    # and `kubectl wait` report); Reconciling=True while it is on its way to a pod.
    kstatus = {c["type"]: c for c in status.get("conditions", []) if c["type"] != "Ready"}
    if ready is not None:
        assert kstatus["Stalled"]["status"] == ("True" if row.phase == "Failed" else "False")
        assert kstatus["Reconciling"]["status"] == ("True" if row.phase == "Pending" else "False")
        if row.phase == "Failed":
            assert kstatus["Stalled"]["reason"] == row.reason
            assert kstatus["Stalled"]["message"] == (status.get("error") or ready["message"])
    assert (memory.find("pods", row.name) is not None) == row.pod
    assert tuple(memory.reasons(row.name)) == row.events  # one Event per terminal transition
    assert sum(1 for w in memory.writes if w == ("POST", "pods", row.name)) <= 1


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_one_status_write_per_pass_at_most(row: Row) -> None:
    """Gather, decide, write once: no pass writes its Worker's status twice, and no pass
    writes any Worker's status twice (a kill's cascade writes each run below once)."""
    memory = Memory()
    row.scene(memory)
    for _ in range(3):
        written = status_writes(memory, row.name)
        assert len(written) == len(set(written)), written


def status_writes(memory: Memory, name: str) -> list[str]:
    """The Workers whose status one pass over `name` writes, once per write."""
    before = len(memory.writes)
    reconcile(memory, name)
    return [name for _, kind, name in memory.writes[before:] if kind == "workers/status"]


def test_a_kill_cascade_writes_each_run_once() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "root")
    started(memory, "child", parent="root")
    started(memory, "grandchild", parent="child")
    memory.objects[("workers", "ns", "root")]["spec"]["kill"] = {"reason": "enough"}
    assert sorted(status_writes(memory, "root")) == ["child", "grandchild", "root"]


def test_a_top_level_run_freezes_the_active_revision_through_its_pod() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "w")
    status = memory.find("workers", "w")["status"]  # type: ignore[index]
    assert status["phase"] == "Running" and status["frozenRevision"]["revision"] == 1
    pod = memory.find("pods", "w")
    assert pod is not None
    assert pod["spec"]["serviceAccountName"] == "worker-w"
    role = memory.objects[("Role", "ns", "worker-w")]
    assert next(r["resourceNames"] for r in role["rules"] if "resourceNames" in r) == ["w"]


def test_two_writes_on_the_way_to_the_pod_and_its_access_after() -> None:
    """The ServiceAccount must exist before the pod (the API server refuses a pod naming
    an absent one); the Role and RoleBinding come after it, off the pod's path."""
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))
    before = len(memory.writes)
    reconcile(memory, "w")
    made = [(verb, kind) for verb, kind, _ in memory.writes[before:] if verb == "POST"]
    assert made[:4] == [
        ("POST", "ServiceAccount"),
        ("POST", "pods"),
        ("POST", "Role"),
        ("POST", "RoleBinding"),
    ]


def test_a_pass_that_ended_between_the_pod_and_its_access_is_completed() -> None:
    """A crash after the pod, before the Role: the next pass finds a pod its Worker does not
    record yet and grants the runtime its access (not a second pod)."""
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))
    real = memory.ensure_access

    def crash_at_the_role(objects: list[dict[str, Any]]) -> bool:
        if any(o["kind"] == "Role" for o in objects):
            raise ApiError("the operator died here", 503)
        return real(objects)

    memory.ensure_access = crash_at_the_role  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        workers.reconcile(memory, "ns", "w")
    assert memory.find("pods", "w") is not None
    assert ("Role", "ns", "worker-w") not in memory.objects
    memory.ensure_access = real  # type: ignore[method-assign]
    reconcile(memory, "w")
    assert ("Role", "ns", "worker-w") in memory.objects
    assert ("RoleBinding", "ns", "worker-w") in memory.objects
    assert sum(1 for w in memory.writes if w == ("POST", "pods", "w")) == 1


def test_a_bound_child_runs_its_profile_and_is_in_its_parent_s_role() -> None:
    memory = Memory()
    _profiled_child(memory)
    reconcile(memory, "w")
    body = memory.find("workers", "w")
    assert body is not None
    binding = json.loads(body["metadata"]["annotations"][BINDING_ANNOTATION])
    assert binding["key"] == "reviewer" and body["status"]["binding"]["key"] == "reviewer"
    assert [o["name"] for o in body["metadata"]["ownerReferences"]] == ["parent"]
    env = {e["name"]: e["value"] for e in memory.find("pods", "w")["spec"]["containers"][0]["env"]}  # type: ignore[index]
    assert json.loads(env["AGENTWORKERS_EFFECTIVE_CONFIG"])["model"] == "demo-small"
    parent_role = memory.objects[("Role", "ns", "worker-parent")]
    assert any(r.get("resourceNames") == ["w"] for r in parent_role["rules"])


def test_a_binding_whose_status_write_was_lost_is_recorded_by_the_next_pass() -> None:
    """The binding landed, the status write after it did not (one write a pass: a
    conflict, or an API error in between): the next pass records the binding it finds."""
    memory = Memory()
    planner(memory)
    started(memory, "parent")
    bound_child(memory, "w", "translator")
    memory.objects[("workers", "ns", "w")].pop("status")
    reconcile(memory, "w")
    status = memory.find("workers", "w")["status"]  # type: ignore[index]
    assert status["binding"]["key"] == "translator"
    bound = next(c for c in status["conditions"] if c["type"] == "ProfileBound")
    assert (bound["status"], bound["reason"]) == ("True", "Bound")
    resume(memory, "w")
    reconcile(memory, "w")
    assert memory.find("pods", "w") is not None


def test_below_a_profile_run_the_bounds_are_inherited() -> None:
    memory = Memory()
    _below_a_profile_run(memory)
    reconcile(memory, "w")
    status = memory.find("workers", "w")["status"]  # type: ignore[index]
    assert status["inherited"] == {"worker": "researcher", "profile": "researcher"}
    env = {e["name"]: e["value"] for e in memory.find("pods", "w")["spec"]["containers"][0]["env"]}  # type: ignore[index]
    effective = json.loads(env["AGENTWORKERS_EFFECTIVE_CONFIG"])
    assert effective["skills"] == ["research", "summarise"] and effective["maxSteps"] == 20


def test_a_stale_write_is_retried_not_forced() -> None:
    """The runtime wrote the status between our read and our write: our write is refused
    (409, an ApiError as from the API server) rather than undoing its report, and the
    retry writes on top of what the runtime wrote, with the pod the first pass made."""
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))
    real_get = memory.get

    def get_then_runtime_writes(plural: str, namespace: str, name: str) -> Any:
        found = real_get(plural, namespace, name)
        if plural == "workers" and name == "w":
            memory.patch_status("workers", "ns", "w", {"lastEvent": "from the runtime"})
        return found

    memory.get = get_then_runtime_writes  # type: ignore[method-assign]
    with pytest.raises(ApiError) as refused:  # what `Requeue` retries, with backoff
        workers.reconcile(memory, "ns", "w")
    assert refused.value.status == 409
    assert memory.find("workers", "w")["status"] == {"lastEvent": "from the runtime"}  # type: ignore[index]
    memory.get = real_get  # type: ignore[method-assign]
    assert reconcile(memory, "w") == "done"  # the retry, on what the runtime wrote
    status = memory.find("workers", "w")["status"]  # type: ignore[index]
    assert status["phase"] == "Pending" and status["pod"] == "w"
    assert sum(1 for w in memory.writes if w == ("POST", "pods", "w")) == 1  # not a second


def test_a_kill_reaches_the_whole_tree_once() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "root")
    started(memory, "child", parent="root")
    started(memory, "grandchild", parent="child")
    started(memory, "done", parent="root")
    memory.objects[("workers", "ns", "done")]["status"]["phase"] = "Done"
    memory.objects[("workers", "ns", "root")]["spec"]["kill"] = {"reason": "over budget"}
    reconcile(memory, "root")
    reconcile(memory, "root")  # and again: nothing twice
    for name, reason in (
        ("root", "over budget"),
        ("child", "parent killed: over budget"),
        ("grandchild", "parent killed: over budget"),
    ):
        status = memory.find("workers", name)["status"]  # type: ignore[index]
        assert (status["phase"], status["error"]) == ("Killed", reason), name
        assert memory.find("pods", name) is None, name
        assert memory.reasons(name) == ["Killed"], name
    assert memory.find("workers", "done")["status"]["phase"] == "Done"  # type: ignore[index]
    assert memory.find("pods", "done") is not None


def test_a_child_of_a_killed_run_stops_when_it_is_next_reconciled() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "root")
    started(memory, "late", parent="root")
    root = memory.objects[("workers", "ns", "root")]
    root["status"] = {**root["status"], "phase": "Killed", "error": "enough"}
    assert reconcile(memory, "late") == "done"
    status = memory.find("workers", "late")["status"]  # type: ignore[index]
    assert (status["phase"], status["error"]) == ("Killed", "parent killed: enough")
    assert memory.find("pods", "late") is None


def test_the_api_server_s_trouble_is_retried_not_a_failed_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ApiError is not a refusal: the pass gives up (its Requeue retries), the run waits."""
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))

    def unavailable(*_: Any) -> None:
        raise ApiError("503 Service Unavailable: etcd leader changed", 503)

    monkeypatch.setattr(memory, "create_pod", unavailable)
    with pytest.raises(ApiError):
        workers.reconcile(memory, "ns", "w")
    status = memory.find("workers", "w").get("status") or {}  # type: ignore[union-attr]
    assert status.get("phase") != "Failed" and not memory.reasons("w")
    monkeypatch.undo()
    assert reconcile(memory, "w") == "done"
    assert memory.find("pods", "w") is not None


def test_a_child_whose_pod_the_cascade_removed_is_killed_not_lost() -> None:
    """The parent is asked to stop and the cascade has deleted the child's pod, but its
    status write lost a race with the child's runtime: the child's own pass says Killed."""
    memory = Memory()
    planner(memory)
    started(memory, "root")
    started(memory, "child", parent="root")
    memory.objects[("workers", "ns", "root")]["spec"]["kill"] = {"reason": "stop"}
    memory.objects.pop(("pods", "ns", "child"))
    assert reconcile(memory, "child") == "done"
    status = memory.find("workers", "child")["status"]  # type: ignore[index]
    assert (status["phase"], status["error"]) == ("Killed", "parent killed: stop")
    assert memory.reasons("child") == ["Killed"]


def _running_for(seconds: float) -> dict[str, Any]:
    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    state = {"running": {"startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    return {"containerStatuses": [{"name": "runtime", "state": state}]}


def test_the_runtime_reports_running_itself_and_the_pod_stands_in_when_it_is_silent() -> None:
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    writes = len(memory.writes)
    # The container has just started: its runtime gets the first word, in a pass soon.
    pod_phase(memory, "w", "Running", **_running_for(0))
    later = workers.reconcile(memory, "ns", "w")
    # (Each run's clocks run out at its own fraction of the second: up to 1 s more.)
    assert later is not None and 0 < later <= RUNTIME_REPORT_SECONDS + 1
    assert memory.find("workers", "w")["status"]["phase"] == "Pending"  # type: ignore[index]
    assert len(memory.writes) == writes  # nothing to write yet
    # Still silent after the grace: the pod's phase stands in.
    pod_phase(memory, "w", "Running", **_running_for(RUNTIME_REPORT_SECONDS + 1))
    assert reconcile(memory, "w") == "done"
    assert memory.find("workers", "w")["status"]["phase"] == "Running"  # type: ignore[index]


def _ago(seconds: float) -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _report(memory: Memory, name: str, **status: Any) -> None:
    """What the run's runtime reports to its status."""
    memory.objects[("workers", "ns", name)]["status"].update(status)


def test_an_idle_run_past_its_idle_timeout_ends_done_and_frees_its_pod() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "chat", interactive=True, idleTimeoutSeconds=60)
    _report(memory, "chat", phase="Idle", idleSince=_ago(10))
    later = workers.reconcile(memory, "ns", "chat")  # 50 s to go: a pass then, nothing before
    assert later is not None and 49 <= later <= 51
    assert memory.find("pods", "chat") is not None
    _report(memory, "chat", idleSince=_ago(61))
    assert reconcile(memory, "chat") == "done"
    status = memory.find("workers", "chat")["status"]  # type: ignore[index]
    assert status["phase"] == "Done" and memory.find("pods", "chat") is None
    assert memory.reasons("chat") == ["IdleTimeout"]  # one Event, and no Completed after it
    reconcile(memory, "chat")
    assert memory.reasons("chat") == ["IdleTimeout"]


def test_a_finished_run_nobody_collects_is_deleted_after_its_ttl() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "w", ttlSecondsAfterFinished=30)
    started(memory, "kid", parent="w", ttlSecondsAfterFinished=0)
    _report(memory, "kid", phase="Done")
    # Its parent runs: it may still collect the child.
    assert workers.reconcile(memory, "ns", "kid") is not None
    assert memory.find("workers", "kid") is not None
    _report(memory, "w", phase="Done")
    later = workers.reconcile(memory, "ns", "w")  # finished just now: 30 s to go
    assert later is not None and 28 <= later <= 31
    ready = next(
        c
        for c in memory.objects[("workers", "ns", "w")]["status"]["conditions"]
        if c["type"] == "Ready"
    )
    ready["lastTransitionTime"] = _ago(31)
    assert reconcile(memory, "w") == "done"
    assert memory.find("workers", "w") is None
    assert memory.reasons("w") == ["Completed", "TTLExpired"]
    kid_ready = next(
        c
        for c in memory.objects[("workers", "ns", "kid")]["status"]["conditions"]
        if c["type"] == "Ready"
    )
    kid_ready["lastTransitionTime"] = _ago(1)  # its TTL of 0 is out, whatever its fraction
    assert reconcile(memory, "kid") == "done"  # its parent is gone: nobody will collect it
    assert memory.find("workers", "kid") is None


def test_a_child_s_deadline_is_within_its_parent_s() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "parent", deadlineSeconds=100)
    started(memory, "kid", parent="parent", deadlineSeconds=3600)
    parent_ends = memory.find("workers", "parent")["status"]["deadlineAt"]  # type: ignore[index]
    kid_ends = memory.find("workers", "kid")["status"]["deadlineAt"]  # type: ignore[index]
    assert kid_ends == parent_ends  # cut to the parent's, exactly
    assert 98 <= memory.find("pods", "kid")["spec"]["activeDeadlineSeconds"] <= 100  # type: ignore[index]


# --- the pod's knobs: the install's defaults under the agent's own ---------------------


def test_the_install_s_worker_defaults_fill_in_what_the_agent_leaves_out() -> None:
    """An AgentConfig's spec.worker wins field by field; the install's defaults (the chart's
    workerDefaults, its image included) fill in the rest, workload identity included."""
    memory = Memory()
    planner(memory, worker={"nodeSelector": {"pool": "gpu"}, "runtimeClassName": "kata"})
    memory.put("workers", worker("w"))
    defaults = WorkerPod.model_validate(
        {
            "image": "registry.example.com/aw:1",
            "imagePullSecrets": ["regcred"],
            "runtimeClassName": "gvisor",
            "nodeSelector": {"pool": "agents"},
            "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}},
            "priorityClassName": "agents",
            "serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": "a@p.iam"},
        }
    )
    workers.reconcile(memory, "ns", "w", pod_defaults=defaults)
    pod = memory.find("pods", "w")
    assert pod is not None
    spec = pod["spec"]
    [container] = spec["containers"]
    assert container["image"] == "registry.example.com/aw:1"
    assert container["resources"] == {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["runtimeClassName"] == "kata"  # the agent's own
    assert spec["nodeSelector"] == {"pool": "gpu"}  # the agent's own, not merged key by key
    assert spec["tolerations"] == [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["affinity"] == {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}
    }
    assert spec["priorityClassName"] == "agents"
    account = memory.objects[("ServiceAccount", "ns", "worker-w")]
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "a@p.iam"}
    # Still the restricted pod: the knobs add placement, never privilege.
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_an_agent_without_an_image_runs_this_release_s_image_without_defaults() -> None:
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    pod = memory.find("pods", "w")
    assert pod is not None
    assert pod["spec"]["containers"][0]["image"] == DEFAULT_IMAGE
    assert "runtimeClassName" not in pod["spec"] and "nodeSelector" not in pod["spec"]


# --- a model provider defined once ---------------------------------------------------


def _provider(memory: Memory, **spec: Any) -> None:
    memory.put(
        "modelproviders",
        {
            "apiVersion": "agentworkers.io/v1alpha1",
            "kind": "ModelProvider",
            "metadata": {"name": "vllm"},
            "spec": spec,
        },
    )


def _pod_config(memory: Memory, name: str) -> dict[str, Any]:
    pod = memory.find("pods", name)
    assert pod is not None
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    return dict(json.loads(env["AGENTWORKERS_EFFECTIVE_CONFIG"]))


def test_a_provider_named_once_serves_every_run_and_mounts_only_its_key() -> None:
    memory = Memory()
    model = {k: v for k, v in CONFIG["spec"]["model"].items() if k not in ("provider", "model")}
    planner(memory, model={**model, "providerRef": "vllm"})
    memory.put("workers", worker("early"))
    assert reconcile(memory, "early") == "retry"  # no provider yet: the run waits, and says so
    status = memory.find("workers", "early")["status"]  # type: ignore[index]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == (
        "ModelProviderMissing",
        "ModelProvider 'vllm' does not exist",
    )
    _provider(
        memory,
        api="openai",
        endpoint="http://vllm.models:8000/v1",
        apiKeySecret="vllm-key",
        defaultModel="llama-3-70b",
    )
    reconcile(memory, "early")
    decided = _pod_config(memory, "early")
    assert (decided["provider"], decided["baseURL"], decided["model"]) == (
        "openai",
        "http://vllm.models:8000/v1",
        "llama-3-70b",
    )
    volumes = memory.find("pods", "early")["spec"]["volumes"]  # type: ignore[index]
    assert [v["secret"]["secretName"] for v in volumes if "secret" in v] == ["vllm-key"]

    # The endpoint moves and the key is another Secret: one edit, the next run has both.
    _provider(memory, api="openai", endpoint="http://vllm.gpu:8000/v1", apiKeySecret="vllm-key-2",
              defaultModel="llama-3-70b")  # fmt: skip
    memory.put("workers", worker("late"))
    reconcile(memory, "late")
    assert _pod_config(memory, "late")["baseURL"] == "http://vllm.gpu:8000/v1"
    assert _pod_config(memory, "late")["apiKeySecret"] == "vllm-key-2"
    assert _pod_config(memory, "early")["baseURL"] == "http://vllm.models:8000/v1"  # as it started


def test_a_failure_is_announced_once_though_its_first_status_write_is_refused() -> None:
    """The runtime died (OOM); the pass that records it meets a 409 (the status changed
    under it) and runs again: one Warning Event, posted by the pass whose write landed,
    with the container's reason."""
    memory = Memory()
    planner(memory)
    started(memory, "w", interactive=True)
    terminated = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    pod_phase(memory, "w", "Failed", containerStatuses=[{"name": "agent", "state": terminated}])
    real = memory.patch_status
    refused = []

    def refuse_once(*args: Any, **kwargs: Any) -> Any:
        if not refused:
            refused.append(True)
            raise ApiError("the object has been modified", 409)
        return real(*args, **kwargs)

    memory.patch_status = refuse_once  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        workers.reconcile(memory, "ns", "w")
    assert memory.reasons("w") == []  # nothing said while nothing is recorded
    reconcile(memory, "w")
    reconcile(memory, "w")
    status = memory.find("workers", "w")["status"]  # type: ignore[index]
    assert status["phase"] == "Failed" and "OOMKilled" in status["error"]
    assert [(t, r) for n, t, r, _ in memory.events if n == "w" and t == "Warning"] == [
        ("Warning", "OOMKilled")
    ]


def test_a_child_created_already_owned_by_its_parent_is_in_its_parent_s_role() -> None:
    """A client may set the parent's ownerReference itself, at create: the operator then
    has no reference to add, and must still let the parent read, patch and delete it."""
    memory = Memory()
    planner(memory)
    started(memory, "parent")
    parent = memory.find("workers", "parent")
    assert parent is not None
    kid = worker("kid", parent="parent")
    kid["metadata"]["ownerReferences"] = [
        {
            "apiVersion": parent["apiVersion"],
            "kind": "Worker",
            "name": "parent",
            "uid": parent["metadata"]["uid"],
        }
    ]
    kid["spec"]["suspend"] = True  # passes before its run starts, each asking again
    memory.put("workers", kid)
    reconcile(memory, "kid")
    parent_role = memory.objects[("Role", "ns", "worker-parent")]
    assert any(r.get("resourceNames") == ["kid"] for r in parent_role["rules"])
    assert ("PATCH", "workers", "kid") not in memory.writes  # no reference to add
    reconcile(memory, "kid")
    assert memory.writes.count(("PATCH", "Role", "worker-parent")) == 1  # granted once
