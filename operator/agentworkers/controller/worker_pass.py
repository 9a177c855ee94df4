"""One reconcile pass's view of a Worker: its body, decoded spec, and the status it will write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

import kopf
from pydantic import ValidationError

from agentworkers.api import reasons
from agentworkers.api.worker import RUNTIME_STATUS, WorkerSpec, WorkerStatus
from agentworkers.core.clocks import now
from agentworkers.core.conditions import Status, abnormal_conditions, set_condition
from agentworkers.errors import describe
from agentworkers.kube.repository import Repository


@dataclass
class Worker:
    """One pass's view of a Worker, and the status it will write."""

    body: dict[str, Any]
    spec: WorkerSpec
    status: WorkerStatus
    # Seconds until a clock of this run needs another pass, if one does.
    again_in: float | None = None
    # Events of this pass's transitions (type, reason, message), posted once written.
    announced: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.body["metadata"].get("uid") or "")

    @property
    def generation(self) -> int | None:
        generation = self.body["metadata"].get("generation")
        return int(generation) if generation is not None else None

    @property
    def annotations(self) -> dict[str, str]:
        return self.body["metadata"].get("annotations") or {}

    def update(self, **changes: Any) -> None:
        self.status = self.status.model_copy(update=changes)

    def condition(self, type_: str, status: Status, reason: str, message: str) -> None:
        conditions = set_condition(
            self.status.conditions, type_, status, reason, message, self.generation
        )
        self.update(conditions=conditions)

    def announce(self, type_: str, reason: str, message: str) -> None:
        """An Event for a transition of this pass, posted once its status is written: a
        pass whose write is refused (a 409) says nothing, and the pass that runs again
        says what it finds then, once."""
        self.announced.append((type_, reason, message))

    def again(self, seconds: float) -> None:
        """Another pass in `seconds` (the soonest of the clocks asking)."""
        self.again_in = seconds if self.again_in is None else min(self.again_in, seconds)

    def wait(self, reason: str, message: str) -> NoReturn:
        """The run cannot go on yet: say why (Ready=False) and try again shortly."""
        self.update(phase=self.status.phase or "Pending", last_event=f"waiting: {message}")
        self.condition(reasons.READY, "False", reason, message)
        raise kopf.TemporaryError(message, delay=5)

    def save(self, storage: Repository) -> None:
        """Write the fields that changed since the status read (or last saved), if any but
        timestamps did.

        Only on the version read: the runtime reports to the same status, and a stale
        write must not undo its report (a 409 makes the pass run again on fresh data).
        Then the Events the pass announced.
        """
        before = self.body.get("status") or {}
        status = with_kstatus(self.status).model_copy(
            update={"observed_generation": self.generation}
        )
        new, old = comparable(status.wire()), comparable(before)
        if new != old:
            self._write(storage, status, new, old)
        for event in self.announced:
            storage.post_event(self.body, *event)
        self.announced.clear()

    def _write(
        self, storage: Repository, status: WorkerStatus, new: dict[str, Any], old: dict[str, Any]
    ) -> None:
        self.status = status.model_copy(update={"updated_at": now()})
        wire = self.status.wire()
        changed = {k: v for k, v in wire.items() if k == "updatedAt" or new.get(k) != old.get(k)}
        version = storage.patch_status(
            "workers", self.namespace, self.name, changed, self.body["metadata"]["resourceVersion"]
        )
        if version:
            self.body["metadata"]["resourceVersion"] = version
            self.body["status"] = wire


def load(body: dict[str, Any]) -> Worker:
    try:
        status = WorkerStatus.model_validate(body.get("status") or {})
    except ValidationError:
        status = WorkerStatus()  # unreadable status is recomputed
    try:
        spec = WorkerSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        raise describe(e) from e
    return Worker(body, spec, status)


def with_kstatus(status: WorkerStatus) -> WorkerStatus:
    """Stalled=True once the run Failed (what Flux or `kubectl wait` report), Reconciling=True
    while it is on its way to a pod (Pending), from the Ready condition's reason."""
    ready = next((c for c in status.conditions if c.type == reasons.READY), None)
    if ready is None:
        return status
    failed = status.phase == "Failed"
    conditions = abnormal_conditions(
        status.conditions,
        ready.reason,
        (status.error or ready.message) if failed else ready.message,
        ready.observed_generation,
        stalled=failed,
        reconciling=status.phase in (None, "Pending"),
    )
    return status.model_copy(update={"conditions": conditions})


def comparable(status: dict[str, Any]) -> dict[str, Any]:
    """A status without what changes on every write (timestamps) and without what only the
    runtime writes (the store does not keep it), for change detection."""
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    kept = {k: v for k, v in status.items() if k != "updatedAt" and k not in RUNTIME_STATUS}
    return {**kept, "conditions": conditions}
