"""Warm pools (docs/scaling.md, "Warm pool"): keep an agent's pool full, and let a run
claim one of its pods.

A pool pass (`reconcile`, on a queue of its own, off every run's path) plans with
`core.pools.plan_pool` from the store and applies the plan: it deletes stale, idle, ended
and surplus warm pods (each only at the version it saw: a pod claimed meanwhile is not
deleted), makes new ones (each its own ServiceAccount first, which then goes with its
pod), and writes the pool's counts to the AgentConfig's status.

A run's pass (`claim`, from `workers._start`) gives it a ready warm pod of its agent at
its revision and with its pod's settings, found in the store: one JSON patch whose `test`
operations are its preconditions (`core.pools.claim_patch`: the same pod, still in the
pool, not being deleted), so no pod serves two runs; none ready, the caller creates the
pod cold at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections import OrderedDict
from functools import partial
from typing import Any

from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, AgentConfigStatus
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import AGENT_LABEL, CLAIMED_LABEL, POOL_LABEL, WORKER_LABEL
from agentworkers.api.provider import ModelProviderSpec
from agentworkers.api.worker import WorkerSpec
from agentworkers.api.workerpod import WarmPool, WorkerPod
from agentworkers.controller.infra import metrics
from agentworkers.controller.passes import identities
from agentworkers.controller.passes.requeue import Later
from agentworkers.core import pools
from agentworkers.core.access import agent_account
from agentworkers.core.effective import EffectiveConfig, resolve
from agentworkers.core.objects import meta, phase
from agentworkers.core.owners import owned_by, owner_reference
from agentworkers.core.pods import build_pod, pod_name
from agentworkers.errors import REFUSALS, ApiError
from agentworkers.kube.repository import Repository

log = logging.getLogger(__name__)

# Claims a pass tries before it starts the run cold (each lost one: another run won it).
CLAIM_TRIES = 3
ENDED = ("Succeeded", "Failed")


def reconcile(
    storage: Repository, namespace: str, name: str, pod_defaults: WorkerPod | None = None
) -> None:
    """One pass over the warm pool of AgentConfig `name`."""
    body = storage.get("agentconfigs", namespace, name)
    if body is None or meta(body).deleting:
        identities.forget(namespace, name)
        with _counts_lock:
            _counts_written.pop((namespace, name), None)
        return  # its pods and their accounts go with it (ownerReferences)
    try:
        config = AgentConfigSpec.model_validate(body["spec"])
    except ValidationError:
        return  # its own pass reports the fault
    config = config.model_copy(update={"worker": config.worker.over(pod_defaults or WorkerPod())})
    # Its pooled identities first: a pass over them is quick, and a cold run may wait on none.
    identity_pass = identities.PASS_SECONDS if identities.refresh(storage, body, config) else None
    status = AgentConfigStatus.model_validate(body.get("status") or {})
    active = status.active_revision
    pool = config.worker.warm_pool
    template = _template(storage, body, config) if pool and pool.size and active else None
    settings = pools.settings_hash(template) if template is not None else None
    pods = storage.pods_labelled(namespace, POOL_LABEL, name)
    plan = pools.plan_pool(
        pool,
        active.name if active else None,
        settings,
        [pools.PoolPod.of(p) for p in pods],
        dt.datetime.now(dt.UTC),
    )
    for pod, why in plan.delete:
        log.info("warm pod %s/%s: deleting (%s)", namespace, pod.name, why)
        storage.delete_pod(namespace, pod.name, pod.uid, pod.version)
    made = 0
    wait = 0.0
    key = (namespace, name)
    if template is not None and active is not None and plan.create:
        now = time.monotonic()
        with _claimed_lock:
            short_since = _short_since.setdefault(key, now)
            wait = pools.refill_wait(_last_claim.get(key), short_since, now)
        if wait <= 0:
            for _ in range(plan.create):
                _create(storage, body, config, template, active)
                made += 1
    if made or not plan.create:
        with _claimed_lock:
            _short_since.pop(key, None)
    claimed = sum(
        phase(p) not in ENDED for p in storage.pods_labelled(namespace, CLAIMED_LABEL, name)
    )
    counts = {"ready": plan.ready, "starting": plan.starting + made, "claimed": claimed}
    again = [
        _publish_counts(storage, body, pool, counts),
        wait if wait > 0 else None,
        plan.again_in + 1.0 if plan.again_in is not None else None,
        identity_pass,
    ]
    if any(d is not None for d in again):
        raise Later(min(d for d in again if d is not None))


def _publish_counts(
    storage: Repository, body: dict[str, Any], pool: WarmPool | None, counts: dict[str, int]
) -> float | None:
    """The pool's counts, to the gauge now and to the AgentConfig's status if they
    changed, at most every `core.pools.COUNTS_SECONDS`: None, or the seconds to wait."""
    key = (meta(body).namespace, meta(body).name)
    with _counts_lock:
        if pool is None or not pool.size:
            _counts.pop(key, None)
        else:
            _counts[key] = counts
        wait = pools.counts_wait(_counts_written.get(key), time.monotonic())
    known = (body.get("status") or {}).get("warmPool")
    if known == counts or (pool is None and known is None):
        return None
    if wait > 0:
        return wait
    storage.patch_status("agentconfigs", key[0], key[1], {"warmPool": counts})
    with _counts_lock:
        _counts_written[key] = time.monotonic()
    return None


# Each pool's counts as its last pass found them: the agentworkers_warm_pods gauge sums them.
_counts: dict[tuple[str, str], dict[str, int]] = {}
# When this process last wrote each pool's counts (`core.pools.counts_wait`).
_counts_written: dict[tuple[str, str], float] = {}
_counts_lock = threading.Lock()


def _total(state: str) -> float:
    with _counts_lock:
        return float(sum(c[state] for c in _counts.values()))


for _state in ("ready", "starting", "claimed"):
    metrics.WARM_PODS.labels(state=_state).set_function(partial(_total, _state))


def _template(
    storage: Repository, body: dict[str, Any], config: AgentConfigSpec
) -> dict[str, Any] | None:
    """The pod a plain top-level run of the agent would get now; None while such a run
    would wait (its ModelProvider missing, no model) or be refused."""
    namespace, agent = meta(body).namespace, meta(body).name
    ref_ = config.model.provider_ref
    if ref_ is not None:
        found = storage.get("modelproviders", namespace, ref_)
        if found is None:
            return None
        try:
            provider = ModelProviderSpec.model_validate(found.get("spec") or {})
        except ValidationError:
            return None
        config = config.model_copy(update={"model": config.model.with_provider(provider)})
    if config.model.model is None:
        return None
    spec = WorkerSpec(agent=agent)
    try:
        effective = resolve(config, spec, None)
    except REFUSALS:
        return None
    stand_in = {
        "apiVersion": body["apiVersion"],
        "kind": "Worker",
        "metadata": {"name": "warm", "namespace": namespace, "uid": ""},
    }
    return build_pod(stand_in, spec, config, effective, service_account="warm")


def _create(
    storage: Repository,
    body: dict[str, Any],
    config: AgentConfigSpec,
    template: dict[str, Any],
    active: RevisionRef,
) -> None:
    """One warm pod and its own ServiceAccount (no rights: a claim binds a run's Role to
    it). The account is made first (the API server admits no pod naming an absent one),
    owned by the AgentConfig, then handed to its pod so that it goes with it."""
    config_meta = meta(body)
    namespace, agent = config_meta.namespace, config_meta.name
    name = pools.account_name(agent)
    annotations = config.worker.service_account_annotations
    storage.ensure_access([agent_account(body, name, AGENT_LABEL, annotations)])
    pod = storage.create_pod(pools.warm_pod(template, agent, active, body, name), config_meta.uid)
    storage.patch_object(
        "serviceaccounts",
        namespace,
        name,
        {"metadata": {"ownerReferences": [owner_reference(pod)]}},
    )
    metrics.WARM_CREATED.inc()


# --- a run's side ------------------------------------------------------------------------

# When this process gave each run its warm pod (by Worker uid), until the run reports
# Running: `claim -> Running` (agentworkers_warm_claim_to_running_seconds). Bounded.
_claimed_at: OrderedDict[str, float] = OrderedDict()
_claimed_lock = threading.Lock()
# By pool (namespace, agent): when this process last gave one of its pods to a run, and
# since when its pass has been waiting to refill it (`core.pools.refill_wait`).
_last_claim: dict[tuple[str, str], float] = {}
_short_since: dict[tuple[str, str], float] = {}
# Warm pods (namespace, name) a pass of this process is claiming or has tried (claimed,
# or refused): not tried again. The passes of a burst run at once on one store, each from
# the pool as it read it: they would try the same oldest pods, and the pods claimed since
# they read, each try refused, three making a cold start. Names are never reused
# (`core.pools.account_name`). The API's preconditions still settle a race with another
# process. Bounded, the oldest forgotten first.
_tried: OrderedDict[tuple[str, str], None] = OrderedDict()
CLAIMS_REMEMBERED = 10_000


def run_pod(
    storage: Repository, namespace: str, worker_body: dict[str, Any]
) -> dict[str, Any] | None:
    """A run's pod as the store has it: the one its status names, else the one of its
    name, else a warm pod claimed for it whose claim a crash kept from its status (the
    pod names the run in its label and is owned by it)."""
    run = meta(worker_body)
    recorded = (worker_body.get("status") or {}).get("pod")
    pod = storage.get_pod(namespace, recorded or pod_name(run.name))
    if pod is not None:
        return pod
    for found in storage.pods_labelled(namespace, WORKER_LABEL, run.name):
        if owned_by(found, run.uid):
            return found
    return None


def spawner(storage: Repository, username: str, namespace: str) -> str | None:
    """The run whose runtime `username` is, when it is a warm pod's account: the run that
    claimed the pod of that name (a warm pod no run claimed, or a pod of that name that is
    not a warm pod: "", which names no run, so no spawn of it is a child of its). None:
    not a warm pod's account."""
    prefix = f"system:serviceaccount:{namespace}:"
    account = username.removeprefix(prefix)
    if account == username or not pools.is_pool_account(account):
        return None
    pod = storage.get_pod(namespace, account)
    if pod is None or pools.claimed_account(pod) != account:
        return ""
    return meta(pod).labels.get(WORKER_LABEL) or ""


def claim(
    storage: Repository,
    worker_body: dict[str, Any],
    config: AgentConfigSpec,
    cold: dict[str, Any],
    active: RevisionRef,
    frozen: RevisionRef | None,
    deadline_seconds: int | None,
    effective: EffectiveConfig,
) -> dict[str, Any] | None:
    """A ready warm pod of the run's agent, at `active` and with `cold`'s settings (the
    pod the run would get cold), given to the run; None: none ready (a cold start)."""
    pool = config.worker.warm_pool
    if pool is None or not pool.size:
        return None
    run = meta(worker_body)
    namespace, agent = run.namespace, str(worker_body["spec"]["agent"])
    warm = {meta(p).name: p for p in storage.pods_labelled(namespace, POOL_LABEL, agent)}
    candidates = pools.claimable(
        [pools.PoolPod.of(p) for p in warm.values()],
        active.name,
        pools.settings_hash(cold),
        dt.datetime.now(dt.UTC),
        pool.idle_seconds,
    )
    if not candidates:
        metrics.WARM_MISSES.labels(reason="none-ready" if warm else "empty").inc()
        return None
    the_claim = pools.Claim(
        worker=run.name,
        uid=run.uid,
        revision=active,
        effective=effective.model_dump_json(by_alias=True),
    )
    now = dt.datetime.now(dt.UTC)
    tries = 0
    for candidate in candidates:
        key = (namespace, candidate.name)
        with _claimed_lock:
            if key in _tried:
                continue  # taken, or being taken, by another pass of this process
            _tried[key] = None
            while len(_tried) > CLAIMS_REMEMBERED:
                _tried.popitem(last=False)
        # activeDeadlineSeconds counts from the pod's start, which was before the claim.
        age = math.ceil((now - candidate.created).total_seconds())
        deadline = deadline_seconds + age if deadline_seconds else None
        patch = pools.claim_patch(warm[candidate.name], worker_body, the_claim, frozen, deadline)
        try:
            got = storage.patch_json("pods", namespace, candidate.name, patch)
        except ApiError as e:
            if e.status not in (404, 422):
                with _claimed_lock:
                    _tried.pop(key, None)  # not refused: a later pass may try it
                raise
            # Claimed by another process's run, being deleted, or gone: the next one.
            log.debug("claim of pod %s/%s refused: %s", namespace, candidate.name, e)
            tries += 1
            if tries == CLAIM_TRIES:
                break
            continue
        metrics.WARM_CLAIMS.inc()
        with _claimed_lock:
            _claimed_at[run.uid] = _last_claim[(namespace, agent)] = time.monotonic()
            while len(_claimed_at) > CLAIMS_REMEMBERED:
                _claimed_at.popitem(last=False)
        return got
    # Every ready pod taken by the passes before it: as good as none ready.
    metrics.WARM_MISSES.labels(reason="lost" if tries else "none-ready").inc()
    return None


def running(uid: str) -> None:
    """The run of Worker `uid` reported Running: its claim -> Running time, if this
    process claimed a warm pod for it."""
    with _claimed_lock:
        since = _claimed_at.pop(uid, None)
    if since is not None:
        metrics.WARM_CLAIM_TO_RUNNING.observe(time.monotonic() - since)
