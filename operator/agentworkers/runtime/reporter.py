"""The runtime's part of its Worker's status: phase, output, error, its events, written
in batches on a thread of its own so that the agent loop never waits on the API."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from agentworkers.api.worker import WorkerEvent
from agentworkers.core.clocks import now
from agentworkers.errors import ApiError
from agentworkers.kube.repository import Storage
from agentworkers.runtime.events import EventBus

log = logging.getLogger("agentworkers.runtime")

RING = 50
REPORT_EVERY = 0.5  # seconds: events are batched into one status write


class Reporter:
    """Writes the runtime's part of the Worker status, batching events, never blocking the loop."""

    def __init__(self, storage: Storage, namespace: str, name: str, bus: EventBus) -> None:
        self.storage, self.namespace, self.name, self.bus = storage, namespace, name, bus
        self.pending: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.sent_index = 0
        self.on_report: Callable[[dict[str, Any]], None] = lambda _: None  # the run span's
        self.thread = threading.Thread(target=self._run, name="status-reporter", daemon=True)
        self.thread.start()

    def report(self, **fields: Any) -> None:
        self.on_report(fields)
        with self.lock:
            self.pending.update(fields)
        self.wake.set()

    def _run(self) -> None:
        while not self.stopped.is_set():
            self.wake.wait(REPORT_EVERY)
            self.wake.clear()
            self.flush()

    def flush(self) -> None:
        with self.lock:
            fields, self.pending = self.pending, {}
        if self.bus.last_index > self.sent_index:
            events = self.bus.recent(0, RING)
            fields["recentEvents"] = [
                WorkerEvent(
                    index=e.index, kind=e.kind.value, time=e.time, summary=e.summary()
                ).wire()
                for e in events
            ]
            fields["eventIndex"] = self.bus.last_index
            fields.setdefault("lastEvent", events[-1].summary()[:200])
            self.sent_index = self.bus.last_index
        if not fields:
            return
        fields["updatedAt"] = now()
        try:
            self.storage.patch_status("workers", self.namespace, self.name, fields)
        except ApiError as e:
            log.warning("could not report status (%s); retrying with the next report", e)
            with self.lock:
                self.pending = {**fields, **self.pending}

    def close(self) -> None:
        self.stopped.set()
        self.wake.set()
        self.thread.join(5)
        self.flush()
