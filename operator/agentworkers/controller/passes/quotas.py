"""TokenQuotas at work: the admission check of a spawn, and the accountant that keeps each
quota's usage on its status (`core.quota` decides both).

Admission is exact under a burst the way tree limits are (docs/trees.md): under a lock of
the namespace, it counts what the store has and the spawns it let through that the store
has not seen yet (`Pending`), each holding its whole budget. The accountant sums, every
`INTERVAL` seconds, the tokens the namespace's Workers reported onto each quota's status,
where they outlive the Workers (collected) and the operator (restarted).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from agentworkers.api.agentconfig import AgentConfigSpec
from agentworkers.api.quota import TokenQuotaSpec, TokenQuotaStatus
from agentworkers.api.worker import TERMINAL_PHASES
from agentworkers.controller.infra import metrics
from agentworkers.core.objects import meta, phase
from agentworkers.core.quota import Run, Usage, account, check_spawn, in_scope
from agentworkers.core.tree import tokens_used
from agentworkers.errors import ApiError
from agentworkers.kube.repository import Repository

PLURAL = "tokenquotas"
# How often the accountant sums usage onto the statuses (admission never waits for it: it
# counts from the store itself).
INTERVAL = 5.0

log = logging.getLogger(__name__)


def budget_of(storage: Repository, namespace: str) -> Callable[[str], int | None]:
    """An agent's run budget (its AgentConfig's limits.tokenBudget), read once per agent."""
    known: dict[str, int | None] = {}

    def budget(agent: str) -> int | None:
        if agent not in known:
            body = storage.get("agentconfigs", namespace, agent) or {}
            try:
                known[agent] = AgentConfigSpec.model_validate(
                    body.get("spec") or {}
                ).limits.token_budget
            except ValidationError:
                known[agent] = None
        return known[agent]

    return budget


Holds = Callable[[dict[str, Any]], bool]


def runs(
    storage: Repository,
    namespace: str,
    holds: Holds | None = None,
    bodies: list[dict[str, Any]] | None = None,
) -> list[Run]:
    """The namespace's Workers (`bodies`, default: the store's) as quotas see them;
    `holds`: which live runs hold their budget (default: every one)."""
    budget = budget_of(storage, namespace)
    found = []
    for body in storage.in_namespace("workers", namespace) if bodies is None else bodies:
        agent = (body.get("spec") or {}).get("agent", "")
        run = meta(body)
        found.append(
            Run(
                uid=run.uid or run.name,
                agent=agent,
                tokens=tokens_used(body),
                budget=budget(agent),
                live=phase(body) not in TERMINAL_PHASES and (holds is None or holds(body)),
            )
        )
    return found


def _parsed(body: dict[str, Any]) -> tuple[TokenQuotaSpec, TokenQuotaStatus] | None:
    try:
        spec = TokenQuotaSpec.model_validate(body.get("spec") or {})
        status = TokenQuotaStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return None  # refused by the CRD schema before it got here; nothing to enforce
    return spec, status


def usages(
    storage: Repository,
    namespace: str,
    now: dt.datetime,
    holds: Holds | None = None,
    bodies: list[dict[str, Any]] | None = None,
) -> list[tuple[dict[str, Any], TokenQuotaSpec, Usage]]:
    """Each quota of the namespace and its usage now (from `bodies`: see `runs`)."""
    quotas = storage.in_namespace(PLURAL, namespace)
    if not quotas:
        return []
    found = runs(storage, namespace, holds, bodies)
    out = []
    for body in quotas:
        if (parsed := _parsed(body)) is not None:
            spec, status = parsed
            out.append((body, spec, account(spec, status, found, now)))
    return out


_LOCKS = tuple(threading.Lock() for _ in range(64))


def lock(namespace: str) -> threading.Lock:
    """The lock under which a namespace's spawns and run starts are counted."""
    return _LOCKS[zlib.crc32(namespace.encode()) % len(_LOCKS)]


class Pending:
    """Spawns admission let through under a quota that the store has not seen yet, with
    the budget each holds; remembered until the store has the Worker, or for `TTL` seconds
    (a create something else refused never arrives)."""

    TTL = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # namespace -> {worker: (expiry, agent, budget)}
        self._spawns: dict[str, dict[str, tuple[float, str, int]]] = {}

    def unseen(self, namespace: str, seen: set[str]) -> list[tuple[str, int]]:
        """(agent, budget) of each spawn not among the Workers `seen` in one read of the
        store; the seen and the expired are forgotten. Read after that walk, never before:
        a Worker the store gets in between is then in the walk or here, not in neither."""
        now = time.monotonic()
        with self._lock:
            spawns = self._spawns.get(namespace, {})
            for name, (expiry, _, _) in list(spawns.items()):
                if expiry < now or name in seen:
                    del spawns[name]
            return [(agent, budget) for _, agent, budget in spawns.values()]

    def add(self, namespace: str, name: str, agent: str, budget: int) -> None:
        with self._lock:
            self._spawns.setdefault(namespace, {})[name] = (
                time.monotonic() + self.TTL,
                agent,
                budget,
            )


def check(
    storage: Repository,
    namespace: str,
    name: str,
    agent: str,
    pending: Pending,
    dry_run: bool = False,
) -> None:
    """The spawn of `name` (a run of `agent`) fits every quota of its namespace, or
    TokenQuotaError; if it fits (and is not a dry run), it holds its budget from now."""
    if not storage.in_namespace(PLURAL, namespace):
        return
    budget = budget_of(storage, namespace)(agent)
    with lock(namespace):
        now = dt.datetime.now(dt.UTC)
        bodies = storage.in_namespace("workers", namespace)
        unseen = pending.unseen(namespace, {meta(b).name for b in bodies})
        for body, spec, usage in usages(storage, namespace, now, bodies=bodies):
            if in_scope(spec, agent):
                held = sum(b for a, b in unseen if in_scope(spec, a))
                check_spawn(meta(body).name, spec, usage, budget, held)
        if not dry_run and budget is not None:
            pending.add(namespace, name, agent, budget)


def account_all(
    storage: Repository, keys: list[tuple[str, str]], owns: Callable[[str], bool]
) -> None:
    """One accounting pass: every quota this replica serves gets its usage written, if it
    changed, and its gauges set."""
    now = dt.datetime.now(dt.UTC)
    for namespace in sorted({ns for ns, _ in keys if owns(ns)}):
        for body, spec, usage in usages(storage, namespace, now):
            name = meta(body).name
            status = usage.status(spec, now)
            for kind, value in (
                ("limit", spec.tokens),
                ("used", usage.used),
                ("reserved", usage.reserved),
                ("remaining", status.remaining or 0),
            ):
                metrics.QUOTA_TOKENS.labels(namespace, name, kind).set(value)
            old = TokenQuotaStatus.model_validate(body.get("status") or {})
            if old.model_copy(update={"accounted_at": None}) == status.model_copy(
                update={"accounted_at": None}
            ):
                continue
            patch = status.model_dump(by_alias=True, exclude_none=True)
            # A merge patch keeps what it does not name: the runs gone are named, as null.
            patch["counted"] = {**dict.fromkeys(old.counted.keys() - status.counted.keys()),
                                **status.counted}  # fmt: skip
            try:
                storage.patch_status(PLURAL, namespace, name, patch)
            except ApiError as e:
                log.warning("TokenQuota %s/%s: usage not written: %s", namespace, name, e)


class Accountant:
    """The accounting passes, on a thread of their own, every `INTERVAL` seconds."""

    def __init__(self, storage: Repository, keys: Callable[[], list[tuple[str, str]]],
                 owns: Callable[[str], bool]) -> None:  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(storage, keys, owns), name="token-quotas", daemon=True
        )

    def start(self) -> Accountant:
        self._thread.start()
        return self

    def stop(self, wait: float = 0.0) -> bool:
        """No pass starts from now on; waits up to `wait` seconds for a running one to end.
        True when none runs."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(wait)
        return not self._thread.is_alive()

    def _run(
        self,
        storage: Repository,
        keys: Callable[[], list[tuple[str, str]]],
        owns: Callable[[str], bool],
    ) -> None:
        while not self._stop.wait(INTERVAL):
            try:
                account_all(storage, keys(), owns)
            except Exception:  # a pass that failed is tried again at the next interval
                log.exception("TokenQuota accounting pass failed")
