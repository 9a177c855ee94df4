"""Kill and collect, by name or by selector (as `kubectl delete -l`): what each does to a
worker as it is, decided with no I/O. `Client` reads and writes; these decide.

Collect by selector waits on one watch for every selected worker: `PendingCollection`
says which are collectable as the watch reports them (a parent after its selected
children, since removing it removes them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from agentworkers.api.worker import SETTLED_PHASES, TERMINAL_PHASES
from agentworkers.client.errors import WorkerFinishedError
from agentworkers.client.results import CollectResult, KillOutcome, KillResult, WorkerInfo

# What collect by selector says of a selected worker someone else removed meanwhile.
GONE = "deleted before it was collected"

_Key = tuple[str, str]  # (namespace, name)


def collect_phases(info: WorkerInfo) -> frozenset[str]:
    """The phases collect waits for: a run asked to stop is settled only once it is Killed
    (or ended on its own)."""
    return TERMINAL_PHASES if info.spec.kill else SETTLED_PHASES


def settled(info: WorkerInfo) -> bool:
    """Done with for collect."""
    return info.phase in collect_phases(info)


def collect_result(
    info: WorkerInfo, keep: bool, error: str = "", killed_children: tuple[str, ...] = ()
) -> CollectResult:
    """What collect returns for the run as it is; a killed run's error is the kill reason."""
    error = error or info.status.error or ""
    if info.phase == "Killed" and not error:
        error = info.spec.kill.reason if info.spec.kill else "killed"
    output = info.status.output or ""
    return CollectResult(
        info.name, info.phase, output, error, not keep, killed_children, info.namespace
    )


def kill_result(info: WorkerInfo, outcome: KillOutcome, reason: str, dry_run: bool) -> KillResult:
    """What kill reports of the worker as it is now: the reason that stands is the first
    kill's, else the one asked for."""
    stated = info.spec.kill.reason if info.spec.kill else reason.strip() or "killed"
    return KillResult(info.name, info.namespace, outcome, info.phase, stated, dry_run)


def nothing_to_kill(info: WorkerInfo) -> WorkerFinishedError:
    """The refusal of a kill by name of a run that ended on its own (Done, Failed)."""
    return WorkerFinishedError(
        f"worker {info.name!r} is {info.phase}; there is no run to kill", field="spec.kill"
    )


class PendingCollection:
    """The selected workers not collected yet, as the watch last reported them."""

    def __init__(self, chosen: Iterable[WorkerInfo], keep: bool) -> None:
        self._pending: dict[_Key, WorkerInfo] = {(w.namespace, w.name): w for w in chosen}
        self._keep = keep

    def __bool__(self) -> bool:
        return bool(self._pending)

    def __contains__(self, info: WorkerInfo) -> bool:
        return (info.namespace, info.name) in self._pending

    def update(self, info: WorkerInfo) -> None:
        """A selected worker as it is now."""
        self._pending[info.namespace, info.name] = info

    def gone(self, info: WorkerInfo) -> CollectResult:
        """A selected worker someone else removed: no longer waited for; its result."""
        del self._pending[info.namespace, info.name]
        return collect_result(info, keep=True, error=GONE)

    def ready(self) -> Iterator[WorkerInfo]:
        """Each worker collectable now, taken off the list: settled, and (when collect
        removes it) with no selected child left, which its removal would take along. A
        parent follows once the children before it are taken."""
        while ready := [key for key, info in self._pending.items() if self._ready(key, info)]:
            for key in ready:
                yield self._pending.pop(key)

    def _ready(self, key: _Key, info: WorkerInfo) -> bool:
        if not settled(info):
            return False
        return self._keep or all(
            (w.namespace, w.spec.parent) != key for w in self._pending.values()
        )

    def left(self) -> str:
        """The workers still waited for, with their phases."""
        return ", ".join(f"{w.name} ({w.phase})" for w in self._pending.values())
