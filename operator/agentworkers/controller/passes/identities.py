"""Pooled identities (docs/scaling.md, "Pooled identities"): an agent's ServiceAccounts
made ahead of its cold runs, so that a cold run's pod waits on no account of its own.

A pool pass (`refresh`, from the warm pool's pass, on its queue: off every run's path)
reads which accounts are free (`core.identities.plan`: no pod of the store runs as one,
no pod and no RoleBinding of it left in the API, and quarantined a while since), keeps
`spec.worker.identityPool` of them free, making new ones (owned by the AgentConfig:
removed with the agent) once takes pause, as the warm pool refills, and deleting stale
ones.

A run's pass (`take`, from `worker_start.start`) takes a free one, with no write: the
pool lives in this process, which alone serves the namespace (one active replica, or
one shard holder at a time), and what it gave is recorded by the pod it names (labelled
with it) as soon as the pod exists; until then by a reservation this process keeps. A
process that starts again reads the accounts, pods and RoleBindings from the API, and
holds every account no pod runs as in quarantine before it gives it out.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentworkers.api import AgentConfigSpec
from agentworkers.api.names import IDENTITY_LABEL, IDENTITY_POOL_LABEL, WORKER_LABEL
from agentworkers.controller.infra import metrics
from agentworkers.core import identities
from agentworkers.core.access import agent_account
from agentworkers.core.objects import meta
from agentworkers.core.pools import refill_wait
from agentworkers.kube.repository import Repository

log = logging.getLogger(__name__)

# Seconds between pool passes while a pool has accounts: a take is refilled, and a
# returned account freed, within about this.
PASS_SECONDS = 2.0
# Seconds between listings of a pool's accounts from the API (this process's own creates
# and takes are known without one).
RELIST_SECONDS = 30.0


@dataclass
class _Pool:
    accounts: dict[str, str]  # name -> annotations hash, as listed or made
    uids: dict[str, str]
    fresh: set[str] = field(default_factory=set)  # made here, never named by a pod
    free_since: dict[str, float] = field(default_factory=dict)
    free: list[str] = field(default_factory=list)  # takeable, as the last pass planned
    listed_at: float = 0.0


_lock = threading.Lock()
_pools: dict[tuple[str, str], _Pool] = {}
# Accounts given to a run whose pod the store does not show yet: account -> (run uid, its
# name, when).
_reserved: dict[str, tuple[str, str, float]] = {}
# By pool: when this process last gave one of its accounts to a run, and since when its
# pass has been waiting to refill it (`core.pools.refill_wait`: a burst's pods are not
# made beside the refill's accounts, on the API server they share).
_last_take: dict[tuple[str, str], float] = {}
_short_since: dict[tuple[str, str], float] = {}


def take(storage: Repository, worker_body: dict[str, Any], config: AgentConfigSpec) -> str | None:
    """A free account of the run's agent, now the run's; None: none free (the run gets an
    account of its own). The same run asking again gets the same one."""
    if not config.worker.identity_pool:
        return None
    run = meta(worker_body)
    namespace, uid = run.namespace, run.uid
    want = identities.annotations_hash(config.worker.service_account_annotations)
    with _lock:
        for name, (holder, _, _) in _reserved.items():
            if holder == uid:
                return name
        pool = _pools.get((namespace, worker_body["spec"]["agent"]))
        key = (namespace, worker_body["spec"]["agent"])
        while pool is not None and pool.free:
            name = pool.free.pop(0)
            # The store's word too: no pod runs as it (another replica's, say).
            if pool.accounts.get(name) != want or storage.pods_labelled(
                namespace, IDENTITY_LABEL, name
            ):
                continue
            at = time.monotonic()
            _reserved[name], _last_take[key] = (uid, run.name, at), at
            pool.fresh.discard(name)
            pool.free_since.pop(name, None)
            metrics.IDENTITY_TAKES.inc()
            return name
    metrics.IDENTITY_MISSES.inc()
    return None


def spawner(storage: Repository, username: str, namespace: str) -> str | None:
    """The run whose runtime `username` is, when it is a pooled account: the run of the one
    live pod of the store that runs as it ("" when there is none or more than one: it
    names no run, so no spawn of it is a child of its). None: not a pooled account."""
    account = username.removeprefix(f"system:serviceaccount:{namespace}:")
    if account == username or not identities.is_pool_account(account):
        return None
    runs = {
        pod.labels.get(WORKER_LABEL) or ""
        for pod in map(meta, storage.pods_labelled(namespace, IDENTITY_LABEL, account))
        if not pod.deleting
    }
    return runs.pop() if len(runs) == 1 else ""


def refresh(storage: Repository, body: dict[str, Any], config: AgentConfigSpec | None) -> bool:
    """One pass over the pool of AgentConfig `body` (`config`: None when it is going).
    Returns whether another pass is due in PASS_SECONDS (the pool has accounts)."""
    namespace, agent = meta(body).namespace, meta(body).name
    key = (namespace, agent)
    size = (config.worker.identity_pool or 0) if config is not None else 0
    now = time.monotonic()
    with _lock:
        pool = _pools.get(key)
    if pool is None and not size:
        return False
    if pool is None or now - pool.listed_at >= RELIST_SECONDS:
        pool = _list(storage, key, pool, now)
    want = identities.annotations_hash(
        config.worker.service_account_annotations if config is not None else None
    )
    names = list(pool.accounts)
    busy = {n for n in names if _busy(storage, namespace, pool, n, now)}
    with _lock:
        unconfirmed = [
            n for n in names if n not in busy and n not in pool.free_since and n not in pool.fresh
        ]
    if unconfirmed:
        left = _left(storage, namespace)
        with _lock:
            for name in unconfirmed:
                if name not in left:
                    pool.free_since.setdefault(name, now)
    with _lock:
        seen = [
            identities.Account(
                name=n,
                annotations=pool.accounts[n],
                busy=n in busy,
                free_since=pool.free_since.get(n),
                fresh=n in pool.fresh,
            )
            for n in names
        ]
    plan = identities.plan(seen, size, want, now)
    with _lock:
        pool.free = [n for n in plan.free if n not in _reserved]
        doomed = [n for n in plan.delete if n not in _reserved]
        for name in doomed:
            pool.accounts.pop(name, None)
            pool.free_since.pop(name, None)
            pool.fresh.discard(name)
    for name in doomed:
        storage.delete_account(namespace, name, pool.uids.pop(name, ""))
    wait = 0.0
    if config is not None and plan.create:
        with _lock:
            short_since = _short_since.setdefault(key, now)
            wait = refill_wait(_last_take.get(key), short_since, now)
        if wait <= 0:
            for _ in range(plan.create):
                _create(storage, body, config, pool, want)
    if wait <= 0:
        with _lock:
            _short_since.pop(key, None)
    with _lock:
        if not pool.accounts and not size:
            _pools.pop(key, None)
            return False
    metrics.IDENTITY_ACCOUNTS.labels(state="free").set(_count(lambda p: len(p.free)))
    return True


def forget(namespace: str, agent: str) -> None:
    """The AgentConfig is going: its accounts go with it (ownerReferences)."""
    with _lock:
        _pools.pop((namespace, agent), None)
        _last_take.pop((namespace, agent), None)
        _short_since.pop((namespace, agent), None)


def _count(of: Any) -> float:
    with _lock:
        return float(sum(of(p) for p in _pools.values()))


def _list(storage: Repository, key: tuple[str, str], pool: _Pool | None, now: float) -> _Pool:
    """The pool's accounts as the API lists them; those this process made kept fresh."""
    namespace, agent = key
    listed = [
        a
        for a in map(
            meta, storage.listed("serviceaccounts", namespace, f"{IDENTITY_POOL_LABEL}={agent}")
        )
        if not a.deleting
    ]
    accounts = {a.name: identities.annotations_hash(a.annotations) for a in listed}
    with _lock:
        if pool is None:
            pool = _pools.setdefault(key, _Pool(accounts={}, uids={}))
        pool.accounts = accounts
        pool.uids = {a.name: a.uid for a in listed}
        pool.fresh &= set(accounts)
        pool.listed_at = now
    return pool


def _busy(storage: Repository, namespace: str, pool: _Pool, name: str, now: float) -> bool:
    """Whether a pod of the store runs as the account, or a run took it and may still make
    its pod (a reservation, held at most RESERVED_SECONDS)."""
    pods = storage.pods_labelled(namespace, IDENTITY_LABEL, name)
    with _lock:
        reserved = _reserved.get(name)
    done = (
        reserved is not None
        and (
            bool(pods)  # the pod records it now
            or now - reserved[2] >= identities.RESERVED_SECONDS  # the run never made one
            or _made_or_gone(storage, namespace, *reserved[:2])
        )
    )
    with _lock:
        if done:
            _reserved.pop(name, None)
            reserved = None
        busy = bool(pods) or reserved is not None
        if busy:
            pool.fresh.discard(name)
            pool.free_since.pop(name, None)
    return busy


def _made_or_gone(storage: Repository, namespace: str, uid: str, name: str) -> bool:
    """Whether the run that took an account has recorded its pod, or is gone: either way
    its pass makes no pod now, and whether one that ran as the account is left is the
    API's to say (a short run's pod can come and go between two pool passes)."""
    run = storage.get("workers", namespace, name)
    return run is None or meta(run).uid != uid or bool((run.get("status") or {}).get("pod"))


def _left(storage: Repository, namespace: str) -> set[str]:
    """The pooled accounts a pod or a RoleBinding still names, in the API itself (not a
    store that may lag): an account named by neither has every token of its pods refused
    and holds no run's rights. One LIST of each for the whole namespace."""
    return {
        meta(o).labels[IDENTITY_LABEL]
        for plural in ("pods", "rolebindings")
        for o in storage.listed(plural, namespace, IDENTITY_LABEL)
    }


def _create(
    storage: Repository, body: dict[str, Any], config: AgentConfigSpec, pool: _Pool, want: str
) -> None:
    name = identities.account_name(meta(body).name)
    made = storage.create_account(
        agent_account(body, name, IDENTITY_POOL_LABEL, config.worker.service_account_annotations)
    )
    with _lock:
        pool.accounts[name] = want
        pool.uids[name] = meta(made).uid
        pool.fresh.add(name)
        pool.free.append(name)
    metrics.IDENTITY_CREATED.inc()
