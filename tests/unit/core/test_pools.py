"""The warm pool's pure parts: the pass's plan, which pods a run may claim, the settings
hash that says when a warm pod fits a run, the claim's write and the runtime's check."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import jsonpatch
import pytest

from agentworkers.api import AgentConfigSpec
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import (
    AGENT_LABEL,
    BINDING_ANNOTATION,
    CLAIM_ANNOTATION,
    CLAIMED_LABEL,
    FROZEN_ANNOTATION,
    POD_SETTINGS_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    WORKER_LABEL,
)
from agentworkers.api.worker import WorkerSpec
from agentworkers.api.workerpod import WarmPool
from agentworkers.core import pools
from agentworkers.core.effective import ModelEndpoint, resolve
from agentworkers.core.pods import build_pod
from agentworkers.core.pools import Claim, PoolPod, plan_pool
from agentworkers.errors import WarmPodMismatchError

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
POOL = WarmPool(size=3, idle_seconds=600)
R2 = RevisionRef(name="planner-2", revision=2, digest="d" * 64)


def pod(name: str, age: float = 10, phase: str | None = "Running", **kw: Any) -> PoolPod:
    fields: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "version": "7",
        "revision": "planner-2",
        "settings": "s",
        "created": NOW - dt.timedelta(seconds=age),
        "phase": phase,
        **kw,
    }
    return PoolPod(**fields)


def names(plan: pools.PoolPlan) -> list[tuple[str, str]]:
    return [(p.name, why) for p, why in plan.delete]


@pytest.mark.parametrize(
    ("pool", "pods", "create", "delete", "ready", "starting"),
    [
        # An empty pool fills to its size.
        (POOL, [], 3, [], 0, 0),
        # A full one does nothing; a pod not running yet is starting.
        (POOL, [pod("a"), pod("b"), pod("c", phase="Pending")], 0, [], 2, 1),
        # Another revision or other settings: replaced (a roll).
        (POOL, [pod("a", revision="planner-1"), pod("b", settings="x")], 3,
         [("a", "stale"), ("b", "stale")], 0, 0),
        # Past its idle lifetime: replaced.
        (POOL, [pod("a", age=600), pod("b")], 2, [("a", "idle")], 1, 0),
        # An ended warm pod (its runtime died): replaced.
        (POOL, [pod("a", phase="Failed")], 3, [("a", "ended")], 0, 0),
        # Over the size: the starting ones go first, then the oldest.
        (WarmPool(size=1, idle_seconds=600),
         [pod("old", age=50), pod("new", age=5), pod("slow", phase="Pending", age=1)], 0,
         [("new", "surplus"), ("slow", "surplus")], 1, 0),
        # Turned off (size 0, or no pool): every pod goes.
        (WarmPool(size=0), [pod("a")], 0, [("a", "surplus")], 0, 0),
        (None, [pod("a")], 0, [("a", "stale")], 0, 0),
        # A pod being deleted is neither kept nor deleted again.
        (POOL, [pod("a", deleting=True)], 3, [], 0, 0),
    ],
)  # fmt: skip
def test_a_pool_pass_plans_from_the_pods_it_finds(
    pool: WarmPool | None,
    pods: list[PoolPod],
    create: int,
    delete: list[tuple[str, str]],
    ready: int,
    starting: int,
) -> None:
    wanted = "s" if pool is not None else None
    plan = plan_pool(pool, "planner-2" if pool else None, wanted, pods, NOW)
    assert (plan.create, names(plan), plan.ready, plan.starting) == (
        create,
        delete,
        ready,
        starting,
    )


def test_a_pass_makes_at_most_its_batch_and_asks_again_when_the_oldest_expires() -> None:
    plan = plan_pool(WarmPool(size=50), "planner-2", "s", [], NOW)
    assert plan.create == pools.CREATE_PER_PASS
    plan = plan_pool(POOL, "planner-2", "s", [pod("a", age=100), pod("b", age=500)], NOW)
    assert plan.again_in == pytest.approx(100)


def test_no_revision_yet_keeps_no_warm_pod() -> None:
    plan = plan_pool(POOL, None, None, [pod("a")], NOW)
    assert (plan.create, names(plan)) == (0, [("a", "stale")])


def test_a_run_claims_only_ready_pods_of_its_revision_and_settings_oldest_first() -> None:
    found = pools.claimable(
        [
            pod("young", age=5),
            pod("old", age=50),
            pod("starting", phase="Pending"),
            pod("stale", revision="planner-1"),
            pod("other", settings="x"),
            pod("expired", age=700),
            pod("going", deleting=True),
        ],
        "planner-2",
        "s",
        NOW,
        600,
    )
    assert [p.name for p in found] == ["old", "young"]


CONFIG = AgentConfigSpec.model_validate(
    {
        "model": {"provider": "scripted", "model": "m"},
        "skills": ["research", "summarise"],
        "allowedSecrets": ["search-key"],
    }
)


def cold(name: str, spec: WorkerSpec, config: AgentConfigSpec = CONFIG) -> dict[str, Any]:
    body = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
    }
    return build_pod(body, spec, config, resolve(config, spec), service_account=f"worker-{name}")


def test_runs_with_the_same_pod_settings_hash_alike_whatever_names_them() -> None:
    a = cold("a", WorkerSpec(agent="planner", initial_message="one", model="m2"))
    b = cold("b", WorkerSpec(agent="planner", initial_message="two"))
    assert pools.settings_hash(a) == pools.settings_hash(b)


@pytest.mark.parametrize(
    "spec",
    [
        WorkerSpec(agent="planner", skills=("research",)),  # one skill fewer: one volume less
        WorkerSpec(agent="planner", allowed_secrets=("search-key",)),  # a Secret mounted
    ],
)
def test_a_run_that_mounts_other_volumes_has_other_settings(spec: WorkerSpec) -> None:
    plain = cold("a", WorkerSpec(agent="planner"))
    assert pools.settings_hash(cold("b", spec)) != pools.settings_hash(plain)


def test_other_pod_knobs_give_other_settings() -> None:
    other = CONFIG.model_copy(update={"worker": CONFIG.worker.model_copy(update={"image": "x"})})
    spec = WorkerSpec(agent="planner")
    assert pools.settings_hash(cold("a", spec, other)) != pools.settings_hash(cold("a", spec))


OWNER = {
    "apiVersion": "agentworkers.io/v1alpha1",
    "kind": "AgentConfig",
    "metadata": {"name": "planner", "namespace": "team", "uid": "uid-planner"},
}


def test_a_warm_pod_is_the_template_less_its_run_waiting_for_a_claim() -> None:
    template = cold("warm", WorkerSpec(agent="planner"))
    warm = pools.warm_pod(template, "planner", R2, OWNER, "warm-planner-1a2b")
    container = warm["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "AGENTWORKERS_WORKER" not in env and "AGENTWORKERS_EFFECTIVE_CONFIG" not in env
    assert env[pools.WARM_REVISION_ENV] == "planner-2"
    # What a warm runtime builds its model client from ahead of a claim: a plain run's.
    assert ModelEndpoint.model_validate_json(env[pools.WARM_MODEL_ENV]) == ModelEndpoint(
        provider="scripted"
    )
    assert container["args"] == ["--warm", "--namespace=team"]
    assert warm["spec"]["serviceAccountName"] == "warm-planner-1a2b"
    claim_volume = next(v for v in warm["spec"]["volumes"] if v["name"] == "claim")
    path = claim_volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
    assert path == f"metadata.annotations['{CLAIM_ANNOTATION}']"
    labels = warm["metadata"]["labels"]
    assert labels[WORKER_LABEL] == "" and labels[POOL_LABEL] == "planner"
    assert labels[pools.POD_SETTINGS_LABEL] == pools.settings_hash(template)
    assert warm["metadata"]["ownerReferences"][0]["uid"] == "uid-planner"
    # The hardening is the template's, unchanged.
    assert warm["spec"]["securityContext"] == template["spec"]["securityContext"]
    assert container["securityContext"] == template["spec"]["containers"][0]["securityContext"]


WORKER = {
    "apiVersion": "agentworkers.io/v1alpha1",
    "kind": "Worker",
    "metadata": {"name": "w", "namespace": "team", "uid": "uid-w"},
}
CLAIM = Claim(worker="w", uid="uid-w", revision=R2, effective="{}")


def test_a_claim_moves_the_pod_to_its_run_only_while_it_is_in_the_pool() -> None:
    labels = {
        POOL_LABEL: "planner",
        AGENT_LABEL: "planner",
        REVISION_LABEL: "planner-2",
        POD_SETTINGS_LABEL: "s" * 32,
    }
    warm = {"metadata": {"uid": "uid-p", "resourceVersion": "41", "labels": labels}, "spec": {}}
    ops = pools.claim_patch(warm, WORKER, CLAIM, R2, 300)
    # Its preconditions: the same pod, as chosen, in the pool, not being deleted. Not its
    # version: a status or finalizer written since does not fail a claim.
    assert [(o["path"], o["value"]) for o in ops if o["op"] == "test"] == [
        ("/metadata/uid", "uid-p"),
        ("/metadata/deletionTimestamp", None),
        ("/metadata/labels/agentworkers.io~1warm-pool", "planner"),
        ("/metadata/labels/agentworkers.io~1revision", "planner-2"),
        (f"/metadata/labels/{POD_SETTINGS_LABEL.replace('/', '~1')}", "s" * 32),
    ]
    claimed = jsonpatch.apply_patch(warm, [o for o in ops if o["op"] != "test"])
    meta = claimed["metadata"]
    assert meta["labels"] == {
        **{k: v for k, v in labels.items() if k != POOL_LABEL},
        CLAIMED_LABEL: "planner",
        WORKER_LABEL: "w",
    }
    assert [o["uid"] for o in meta["ownerReferences"]] == ["uid-w"]
    assert Claim.model_validate_json(meta["annotations"][CLAIM_ANNOTATION]) == CLAIM
    assert RevisionRef.model_validate_json(meta["annotations"][FROZEN_ANNOTATION]) == R2
    assert claimed["spec"] == {"activeDeadlineSeconds": 300}


def binding(revision: str, digest: str) -> str:
    return json.dumps({"configRevisionID": revision, "configDigest": digest, "key": "k"})


@pytest.mark.parametrize(
    ("claim", "warm_revision", "annotations", "field"),
    [
        (CLAIM, "planner-2", {}, None),
        (CLAIM, "planner-2", {BINDING_ANNOTATION: binding("2", "d" * 64)}, None),
        # Warmed at another revision than the claim names.
        (CLAIM, "planner-1", {}, CLAIM_ANNOTATION),
        # A claim for another Worker (a name reused).
        (CLAIM.model_copy(update={"uid": "uid-old"}), "planner-2", {}, CLAIM_ANNOTATION),
        # A profiled run bound to another revision.
        (CLAIM, "planner-2", {BINDING_ANNOTATION: binding("1", "d" * 64)}, BINDING_ANNOTATION),
        (CLAIM, "planner-2", {BINDING_ANNOTATION: binding("2", "e" * 64)}, BINDING_ANNOTATION),
    ],
)
def test_the_runtime_checks_its_claim_fits_its_pod_and_its_run(
    claim: Claim, warm_revision: str, annotations: dict[str, str], field: str | None
) -> None:
    body = {"metadata": {**WORKER["metadata"], "annotations": annotations}}
    if field is None:
        pools.check_claim(claim, warm_revision, body)
        return
    with pytest.raises(WarmPodMismatchError) as caught:
        pools.check_claim(claim, warm_revision, body)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("last_claim", "short_since", "now", "wait"),
    [
        (None, 100.0, 100.0, 0.0),  # never claimed from: fill at once
        (99.5, 99.5, 100.0, 0.5),  # a claim half a second ago: wait for the pause
        (98.0, 98.0, 100.0, 0.0),  # claims paused: refill
        (99.9, 95.5, 100.0, 0.5),  # claims go on: refill at most REFILL_MAX_WAIT after
        (99.9, 94.0, 100.0, 0.0),
    ],
)
def test_a_refill_waits_for_claims_to_pause_but_not_for_ever(
    last_claim: float | None, short_since: float, now: float, wait: float
) -> None:
    assert pools.refill_wait(last_claim, short_since, now) == pytest.approx(wait)
