"""What a run does to the cluster besides its own status: its planner tools' spawns,
inspections, collections and kills of its children, each retried while the operator is
about to grant it access."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from agentworkers.api import WorkerSpec
from agentworkers.client import Client
from agentworkers.errors import ApiError
from agentworkers.runtime.inputs import read as read_inputs
from agentworkers.runtime.tools import Sandbox
from agentworkers.runtime.tracing import RunSpans

T = TypeVar("T")

GRANT_WAIT = 15.0  # seconds: the operator grants access right after the pod or a child's binding


def once_granted(call: Callable[[], T], pause: float = 0.2) -> T:
    """Retry a call refused with 403 for a short while: the runtime's access arrives just
    after its pod is made (a warm pod's just after its claim), a child's once the operator
    has bound it (within moments)."""
    deadline = time.monotonic() + GRANT_WAIT
    while True:
        try:
            return call()
        except ApiError as e:
            if e.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(pause)


class KubeWorkerOps:
    """The planner tools' view of the cluster: children of this worker, of its agent."""

    def __init__(
        self, client: Client, me: str, agent: str, sandbox: Sandbox, spans: RunSpans
    ) -> None:
        self.client, self.me, self.agent, self.sandbox = client, me, agent, sandbox
        self.spans = spans

    def spawn(
        self, name: str, message: str, profile: str | None, inputs: list[str], description: str
    ) -> dict[str, Any]:
        spec = WorkerSpec(
            agent=self.agent,
            parent=self.me,
            description=description,
            profile=profile,
            initial_message=message,
            inputs=read_inputs(self.sandbox, inputs),
            # The spawn_worker span this runs in: the child's run goes below it.
            traceparent=self.spans.traceparent(),
        )
        created = self.client.spawn(name, spec)
        return {
            "name": created.name,
            "profile": profile,
            "inputs": [i.name for i in spec.inputs],
        }

    def inspect(self, name: str, since: int) -> dict[str, Any]:
        info = once_granted(lambda: self.client.get(name))
        events = [e.wire() for e in info.status.recent_events if e.index > since]
        return {
            "name": name,
            "phase": info.status.phase,
            "lastEvent": info.status.last_event,
            "events": events,
        }

    def collect(self, name: str, timeout: float) -> dict[str, Any]:
        result = once_granted(lambda: self.client.collect(name, timeout))
        return {"name": name, "phase": result.phase, "output": result.output, "error": result.error}

    def kill(self, name: str, reason: str) -> dict[str, Any]:
        once_granted(lambda: self.client.kill(name, reason, by=self.me))
        return {"name": name, "killed": True}
