"""kopf registrations. Each handler parses, delegates and returns; the work is elsewhere.

Handlers are synchronous: kopf runs them in its thread pool, where the blocking
`kubernetes` client belongs (never on the event loop).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import kopf

from agentworkers import kube, metrics
from agentworkers.api import GROUP, VERSION
from agentworkers.controller import configs, workers
from agentworkers.controller.options import Options
from agentworkers.controller.requeue import API_TROUBLE, Requeue, trouble
from agentworkers.controller.tls import CertificateWatch
from agentworkers.kube.store import Store
from agentworkers.pods import WORKER_LABEL
from agentworkers.storage import Storage

AGENT_CONFIGS = (GROUP, VERSION, "agentconfigs")
PROFILES = (GROUP, VERSION, "virtualagentprofiles")
REVISIONS = (GROUP, VERSION, "agentconfigrevisions")
WORKERS = (GROUP, VERSION, "workers")


@kopf.on.startup()
def configure(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    options: Options = memo.options
    # Our own prefixes from the first release: changing them later re-handles every object.
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # We post our own Events with reasons; kopf's per-handler chatter stays in the log.
    settings.posting.enabled = False
    settings.watching.server_timeout = options.watch_timeout
    settings.execution.max_workers = options.workers
    settings.networking.error_backoffs = [1, 2, 5, 10, 30, 60]
    settings.peering.standalone = options.standalone
    if options.peering:
        settings.peering.name = options.peering
    if options.webhook_port is not None:
        settings.admission.server = options.webhook_server()
        settings.admission.managed = options.webhook_name
        memo.certificate_watch = CertificateWatch(options.tls_dir / "tls.crt").start()
    memo.api = kube.connect(
        options.kubeconfig, timeout=options.request_timeout, threads=options.workers
    ).api
    # Admission tells the operator's own writes (a binding, a revision) from anyone else's.
    memo.identity = kube.whoami(memo.api)
    logger.info("operating as %s", memo.identity)
    memo.store = Store()
    memo.storage = Storage(memo.api, memo.store)
    memo.workers = Requeue("Worker", "worker", partial(workers.reconcile, memo.storage))
    # Profile changes reach their AgentConfig through `on.event`, which kopf never retries.
    memo.profile_agents = Requeue(
        "AgentConfig", "profile", partial(configs.reconcile, memo.storage)
    )


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    memo.workers.stop()
    memo.profile_agents.stop()
    if "certificate_watch" in memo:
        memo.certificate_watch.stop()
    memo.api.close()


# The store: kopf indexes every object before any handler runs (and holds handlers back
# until every watched kind is listed), so feeding the store from index functions makes it
# complete before the first reconcile reads it. They keep nothing in kopf's own index
# (they return None); deletions reach the store through the event handlers below.


def _indexer(plural: str) -> Any:
    # async: a few microseconds of work, done on the event loop rather than a thread.
    async def index(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        memo.store.wrote(plural, body)

    index.__name__ = f"store_{plural}"
    return index


for _resource in (AGENT_CONFIGS, PROFILES, REVISIONS, WORKERS):
    kopf.index(*_resource, id=f"store_{_resource[2]}")(_indexer(_resource[2]))
kopf.index("", "v1", "pods", labels={WORKER_LABEL: kopf.PRESENT}, id="store_pods")(_indexer("pods"))


@kopf.on.event(*AGENT_CONFIGS)
@kopf.on.event(*REVISIONS)
def forget_deleted(
    type: str | None, body: kopf.Body, resource: kopf.Resource, memo: kopf.Memo, **_: Any
) -> None:
    if type == "DELETED":
        memo.store.forget(resource.plural, body)


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


@kopf.on.event("", "v1", "pods", labels={WORKER_LABEL: kopf.PRESENT})
def pod_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body["metadata"]
    if type == "DELETED":
        memo.store.forget("pods", body)
    memo.workers.attempt(meta["namespace"], meta["labels"][WORKER_LABEL])
