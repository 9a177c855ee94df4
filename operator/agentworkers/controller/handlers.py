"""kopf registrations. Each handler parses, delegates and returns; the work is elsewhere.

Handlers are synchronous: kopf runs them in its thread pool, where the blocking
`kubernetes` client belongs (never on the event loop).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
import kubernetes
import urllib3

from agentworkers import kube, metrics
from agentworkers.api import GROUP, VERSION
from agentworkers.controller import configs, workers
from agentworkers.controller.options import Options
from agentworkers.controller.requeue import Requeue
from agentworkers.controller.tls import CertificateWatch
from agentworkers.pods import WORKER_LABEL
from agentworkers.storage import Storage

log = logging.getLogger(__name__)

AGENT_CONFIGS = (GROUP, VERSION, "agentconfigs")
PROFILES = (GROUP, VERSION, "virtualagentprofiles")
WORKERS = (GROUP, VERSION, "workers")
# What a reconcile may meet on its way to the API server; all of it is worth a retry.
API_TROUBLE = (kubernetes.client.ApiException, urllib3.exceptions.HTTPError)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
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
    memo.storage = Storage(memo.api)
    memo.requeue = Requeue(lambda key: _reconcile_worker(memo.storage, memo.requeue, *key))


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    memo.requeue.stop()
    if "certificate_watch" in memo:
        memo.certificate_watch.stop()
    memo.api.close()


@kopf.on.resume(*AGENT_CONFIGS)
@kopf.on.create(*AGENT_CONFIGS)
@kopf.on.update(*AGENT_CONFIGS, field="spec")
def agent_config_changed(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    _reconcile(memo.storage, namespace, name, "agentconfig")


@kopf.on.event(*PROFILES)
def profile_event(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """Any change to a profile (including its deletion) re-resolves its agent's map."""
    body = event.get("object") or {}
    agent = (body.get("spec") or {}).get("agent")
    if not agent or event.get("type") is None:  # None: the initial listing, covered by resume
        return
    _reconcile(memo.storage, body["metadata"]["namespace"], agent, "profile")


def _reconcile(storage: Storage, namespace: str, name: str, handler: str) -> None:
    try:
        configs.reconcile(storage, namespace, name)
    except API_TROUBLE as e:
        metrics.HANDLER_ERRORS.labels(handler=handler).inc()
        raise kopf.TemporaryError(f"{_trouble(e)}; retrying", delay=5) from e


def _trouble(e: Exception) -> str:
    if isinstance(e, kubernetes.client.ApiException):
        return f"API error {e.status} {e.reason}"
    return f"API unreachable ({e})"


# Workers are reconciled level-triggered from watch events (their own, and their pods'),
# not through kopf's create/update handlers: those keep a copy of the whole spec in an
# annotation, and a Worker's queries can outgrow the annotation limit.


@kopf.on.event(*WORKERS)
def worker_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body["metadata"]
    if type == "DELETED":
        memo.requeue.forget((meta["namespace"], meta["name"]))
        workers.deleted(memo.storage, dict(body))
        return
    _reconcile_worker(memo.storage, memo.requeue, meta["namespace"], meta["name"])


@kopf.on.event("", "v1", "pods", labels={WORKER_LABEL: kopf.PRESENT})
def pod_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body["metadata"]
    _reconcile_worker(memo.storage, memo.requeue, meta["namespace"], meta["labels"][WORKER_LABEL])


def _reconcile_worker(storage: Storage, requeue: Requeue, namespace: str, name: str) -> None:
    try:
        workers.reconcile(storage, namespace, name)
    except kopf.TemporaryError as e:
        requeue.after((namespace, name), e.delay or 5)
    except API_TROUBLE as e:
        metrics.HANDLER_ERRORS.labels(handler="worker").inc()
        log.warning(
            "worker %s/%s: %s; retrying",
            namespace,
            name,
            _trouble(e),
            extra={"k8s_ref": {"kind": "Worker", "name": name, "namespace": namespace}},
        )
        requeue.after((namespace, name), requeue.backoff((namespace, name)))
    else:
        requeue.forget((namespace, name))
