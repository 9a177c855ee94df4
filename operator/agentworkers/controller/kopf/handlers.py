"""kopf registrations of the controller. Each handler parses, delegates and returns; the
work is elsewhere. `startup` connects and feeds the store; these reconcile from it.

With `--shards` or `--leader-elect`, a replica handles only the namespaces of the shards
it holds (`sharding`; active/standby is one shard); every replica still keeps the whole
store, so a shard it takes over is reconciled from what it already knows.

Handlers that only queue work are `async`: they run on kopf's event loop as their event
arrives. A synchronous one would wait for a thread of kopf's pool, holding its event's
whole body meanwhile: in a burst, thousands of pod and Worker bodies at once, and memory
that Python's allocator never gives back (the RSS of a 3,000 burst: 433 MiB, of which
64 MiB live). The work itself runs on the queues' threads; the rare deletion that posts an
Event runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import kopf

from agentworkers.api.names import CLAIMED_LABEL, POOL_LABEL, WORKER_LABEL
from agentworkers.api.worker import TERMINAL_PHASES
from agentworkers.controller.infra import metrics
from agentworkers.controller.infra.options import Options
from agentworkers.controller.infra.sharding import Everything, Shards, shard_of
from agentworkers.controller.kopf import kopf_fixes
from agentworkers.controller.kopf.startup import (
    AGENT_CONFIGS,
    POD_FILTER,
    PODS,
    PROFILES,
    WORKERS,
    WORKLOADS,
    register_store,
    store_indexer,
)
from agentworkers.controller.passes import configs, lineage, pools, quotas, workers
from agentworkers.controller.passes.requeue import Requeue
from agentworkers.core.objects import Meta, meta, phase
from agentworkers.core.owners import owner_names
from agentworkers.core.revisions import SettleWindow
from agentworkers.errors import UnknownWorkerError
from agentworkers.kube.leases import Leases

# Workers, pods, AgentConfigs and profiles have event handlers here, which forget
# deletions themselves.
register_store(
    forgotten_elsewhere=("workers", "pods", "agentconfigs", "virtualagentprofiles"),
    judged=("workers", "pods", "agentconfigs"),
)


def _if_mine(
    memo: kopf.Memo, reconcile: Callable[..., float | None]
) -> Callable[[str, str], float | None]:
    """A reconcile that passes over namespaces this replica does not serve (a retry may
    fire after the shard went to another replica)."""

    def attempt(namespace: str, name: str) -> float | None:
        if memo.shards.owns(namespace):
            return reconcile(memo.storage, namespace, name)
        return None

    return attempt


@kopf.on.startup()
def start_queues(memo: kopf.Memo, **_: Any) -> None:
    options: Options = memo.options
    memo.sharding_stop = threading.Event()
    if options.shards > 1 or options.leader_elect:
        memo.shards = Shards(
            options.shards,
            options.shard_index,
            Leases(memo.storage.api, options.lease_namespace),
            on_gained=partial(_take_over, memo),
            prefix=options.lease_name,
        )
        # Set before the queues: a standby never shows 1, not even while it starts.
        metrics.SHARDS_HELD.set_function(lambda: len(memo.shards.held()))
    else:
        memo.shards = Everything()
        metrics.SHARDS_HELD.set(1)
    memo.workers = Requeue(
        "Worker",
        "worker",
        _if_mine(memo, partial(workers.reconcile, pod_defaults=options.worker_defaults)),
        threads=options.workers,
    )
    # Profile changes reach their AgentConfig through `on.event`, which kopf never retries.
    settle = SettleWindow(options.settle_seconds) if options.settle_seconds > 0 else None
    # Warm pools (docs/scaling.md): a queue of their own, so that filling one never
    # holds up a revision or a run. A config's pass may move its active revision: its
    # pool's pass follows it.
    memo.pools = Requeue(
        "AgentConfig",
        "warmpool",
        _if_mine(memo, partial(pools.reconcile, pod_defaults=options.worker_defaults)),
        threads=1,
    )

    def config_then_pool(storage: Any, namespace: str, name: str) -> None:
        try:
            configs.reconcile(storage, namespace, name, settle=settle)
        finally:
            memo.pools.attempt(namespace, name)

    memo.configs = Requeue(
        "AgentConfig", "agentconfig", _if_mine(memo, config_then_pool), threads=2
    )
    if isinstance(memo.shards, Shards):
        memo.shards.step()  # hold our own shard before the first event arrives (queues made)
        threading.Thread(
            target=memo.shards.run, args=(memo.sharding_stop,), name="sharding", daemon=True
        ).start()
    memo.accountant = quotas.Accountant(
        memo.storage, partial(memo.store.keys, quotas.PLURAL), memo.shards.owns
    ).start()


def _take_over(memo: kopf.Memo, shards: set[int]) -> None:
    """A pass over every AgentConfig and Worker of shards just gained, from the store."""
    count = memo.options.shards
    for plural, queue in (("agentconfigs", memo.configs), ("workers", memo.workers)):
        for namespace, name in memo.store.keys(plural):
            if shard_of(namespace, count) in shards:
                queue.attempt(namespace, name)


# How long a clean exit waits for the running passes before it gives its Leases up.
STOP_SECONDS = 10.0


@kopf.on.cleanup()
def stop_queues(memo: kopf.Memo, **_: Any) -> None:
    """Stop the passes, then hand the Leases over at once (a rolling update, a drained
    node); only once no pass of ours runs, else they are left to run out."""
    memo.sharding_stop.set()
    until = time.monotonic() + STOP_SECONDS
    stopped = [memo.accountant, memo.workers, memo.configs, memo.pools]
    quiet = [s.stop(max(until - time.monotonic(), 0)) for s in stopped]  # each one stopped
    if all(quiet) and isinstance(memo.shards, Shards):
        memo.shards.resign()


# AgentConfigs and profiles are reconciled from watch events too, not through kopf's
# create/update/resume handlers: those write kopf's own annotations (its copy of the last
# handled spec, its progress) on the users' objects, which the operator never writes.


@kopf.on.event(*AGENT_CONFIGS)
async def agent_config_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A new AgentConfig, a change a pass has not seen (not its own status write's echo),
    the listing at start and a deletion (its profiles then say their agent is missing)
    each take a pass."""
    config = meta(body)
    if type == "DELETED":
        memo.store.forget("agentconfigs", body)
    elif not _news("agentconfigs", type, config, memo):
        return
    memo.configs.attempt(config.namespace, config.name)


@kopf.on.event(*PROFILES)
async def profile_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Any change to a profile (including its deletion) re-resolves its agent's map. So
    does the listing: a new namespace's may hold a profile applied before its AgentConfig,
    which must say that its agent is missing (an agent asked for by many events is queued
    once)."""
    if type == "DELETED":
        memo.store.forget("virtualagentprofiles", body)
    if agent := (body.get("spec") or {}).get("agent"):
        memo.configs.attempt(meta(body).namespace, agent)


# Workers are reconciled level-triggered from watch events (their own, and their pods'),
# not through kopf's create/update handlers: those keep a copy of the whole spec in an
# annotation, and a Worker's queries can outgrow the annotation limit.


@kopf.on.event(*WORKERS)
async def worker_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    worker = meta(body)
    namespace, name = worker.namespace, worker.name
    # A run below a root changes its tree's sums (status.tree, the token budget): the root
    # takes a pass too, once however many of its runs report meanwhile.
    if (body.get("spec") or {}).get("parent"):
        with contextlib.suppress(UnknownWorkerError):  # a link is missing: no tree to sum
            root = lineage.ancestry(memo.store, namespace, dict(body))[-1]
            memo.workers.attempt(namespace, meta(root).name)
    elif ((body.get("status") or {}).get("tree") or {}).get("budgetExhausted"):
        # A spent tree: each live run below stops itself, in its own pass.
        for run in lineage.descendants(memo.store, namespace, name):
            if phase(run) not in TERMINAL_PHASES:
                memo.workers.attempt(namespace, meta(run).name)
    if type == "DELETED":
        memo.store.forget("workers", body)
        memo.workers.drop((namespace, name))
        if memo.shards.owns(namespace):
            await asyncio.to_thread(workers.deleted, memo.storage, dict(body))
        return
    # An ended run's events all take a pass: the one after its end starts its clocks and
    # stops the runs below it, though a pass wrote that end (a kill, a failure).
    ended = phase(body) in TERMINAL_PHASES
    if _news("workers", type, worker, memo) or ended:
        memo.workers.attempt(namespace, name)


@kopf.on.event(*PODS, **POD_FILTER)
async def pod_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    pod = meta(body)
    labels = pod.labels
    # A warm pod's pool counts it (claimed too), also when a pass wrote the change itself.
    if pool := labels.get(POOL_LABEL) or labels.get(CLAIMED_LABEL):
        memo.pools.attempt(pod.namespace, pool)
    if type == "DELETED":
        memo.store.forget("pods", body)
    elif not _news("pods", type, pod, memo):
        return
    if worker := labels.get(WORKER_LABEL):  # empty on a warm pod no run has claimed
        memo.workers.attempt(pod.namespace, worker)


def _of_a_pod(body: kopf.Body, **_: Any) -> bool:
    """kopf filter: a Workload of Kueue's pod integration (owned by a Pod)."""
    return bool(owner_names(body, "Pod"))


_observe_workload = store_indexer("workloads")


# The lean path passes over kopf's filters: each handler keeps to a pod's Workloads itself.
@kopf.index(*WORKLOADS, id="store_workloads", when=_of_a_pod)
async def workload_index(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if _of_a_pod(body):
        await _observe_workload(body=body, memo=memo)


@kopf.on.event(*WORKLOADS, when=_of_a_pod)
async def workload_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Kueue's word on a queued run's pod (its reason to wait, its admission): a pass of
    the run, while it has not started."""
    if not _of_a_pod(body):
        return
    workload = meta(body)
    if type == "DELETED":
        memo.store.forget("workloads", body)
    for owner in owner_names(body, "Pod"):
        pod = memo.store.get("pods", workload.namespace, owner)
        if pod is None:
            continue  # not a run's pod: the store holds only those
        worker = meta(pod).labels[WORKER_LABEL]
        run = memo.store.get("workers", workload.namespace, worker) or {}
        if phase(run) in (None, "Pending"):
            memo.workers.attempt(workload.namespace, worker)


# Their events only feed the store and queue a pass: kopf's per-event machinery is skipped.
kopf_fixes.lean(WORKERS, index=store_indexer("workers"), event=worker_event)
kopf_fixes.lean(PODS, index=store_indexer("pods"), event=pod_event)
kopf_fixes.lean(AGENT_CONFIGS, index=store_indexer("agentconfigs"), event=agent_config_event)
kopf_fixes.lean(PROFILES, index=store_indexer("virtualagentprofiles"), event=profile_event)
kopf_fixes.lean(WORKLOADS, index=workload_index, event=workload_event)


def _news(plural: str, type: str | None, seen: Meta, memo: kopf.Memo) -> bool:
    """Whether an event asks for a pass: the listing's always do (a start, a watch
    listed again); a change only if a pass has not seen it (`Store.news`)."""
    news = memo.store.news(plural, seen.namespace, seen.name)
    return type is None or news
