"""kopf registrations of the controller. Each handler parses, delegates and returns; the
work is elsewhere. `startup` connects and feeds the store; these reconcile from it.

Handlers are synchronous: kopf runs them in its thread pool, where the blocking
`kubernetes` client belongs (never on the event loop).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import kopf

from agentworkers import metrics
from agentworkers.controller import configs, workers
from agentworkers.controller.requeue import API_TROUBLE, Requeue, trouble
from agentworkers.controller.startup import (
    AGENT_CONFIGS,
    POD_FILTER,
    PODS,
    PROFILES,
    WORKERS,
    register_store,
)
from agentworkers.pods import WORKER_LABEL

# Workers, pods and profiles have event handlers here, which forget deletions themselves.
register_store(forgotten_elsewhere=("workers", "pods", "virtualagentprofiles"))


@kopf.on.startup()
def start_queues(memo: kopf.Memo, **_: Any) -> None:
    memo.workers = Requeue("Worker", "worker", partial(workers.reconcile, memo.storage))
    # Profile changes reach their AgentConfig through `on.event`, which kopf never retries.
    memo.profile_agents = Requeue(
        "AgentConfig", "profile", partial(configs.reconcile, memo.storage)
    )


@kopf.on.cleanup()
def stop_queues(memo: kopf.Memo, **_: Any) -> None:
    memo.workers.stop()
    memo.profile_agents.stop()


@kopf.on.resume(*AGENT_CONFIGS)
@kopf.on.create(*AGENT_CONFIGS)
@kopf.on.update(*AGENT_CONFIGS, field="spec")
def agent_config_changed(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    try:
        configs.reconcile(memo.storage, namespace, name)
    except API_TROUBLE as e:
        metrics.HANDLER_ERRORS.labels(handler="agentconfig").inc()
        raise kopf.TemporaryError(f"{trouble(e)}; retrying", delay=5) from e


@kopf.on.event(*PROFILES)
def profile_event(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """Any change to a profile (including its deletion) re-resolves its agent's map."""
    body = event.get("object") or {}
    if event.get("type") == "DELETED":
        memo.store.forget("virtualagentprofiles", body)
    agent = (body.get("spec") or {}).get("agent")
    if not agent or event.get("type") is None:  # None: the initial listing, covered by resume
        return
    memo.profile_agents.attempt(body["metadata"]["namespace"], agent)


# Workers are reconciled level-triggered from watch events (their own, and their pods'),
# not through kopf's create/update handlers: those keep a copy of the whole spec in an
# annotation, and a Worker's queries can outgrow the annotation limit.


@kopf.on.event(*WORKERS)
def worker_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body["metadata"]
    if type == "DELETED":
        memo.store.forget("workers", body)
        memo.workers.forget((meta["namespace"], meta["name"]))
        workers.deleted(memo.storage, dict(body))
        return
    memo.workers.attempt(meta["namespace"], meta["name"])


@kopf.on.event(*PODS, **POD_FILTER)
def pod_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body["metadata"]
    if type == "DELETED":
        memo.store.forget("pods", body)
    memo.workers.attempt(meta["namespace"], meta["labels"][WORKER_LABEL])
