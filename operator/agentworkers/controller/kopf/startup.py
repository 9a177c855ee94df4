"""What every role of the operator shares: kopf's settings, the connection, its identity,
and the watch-fed store (`agentworkers.kube.store`) that reconciles and reviews read.

kopf indexes every object before any handler runs, and holds handlers back until every
indexed kind is listed; feeding the store from index functions therefore makes it complete
before the first reconcile reads it. Admission has no such wait of its own: `memo.synced`
is set when kopf has indexed every kind (`kopf_fixes.indexed`), and until then the webhook
refuses reviews (503, try again) and its `/readyz` says not ready. The index functions
keep nothing in kopf's own index (they return None). kopf does not call them for
deletions: `register_store` adds an event handler per kind that forgets deleted objects,
except for kinds whose reconcile handlers forget them already (one handler fewer per
event).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache, partial
from typing import Any

import kopf

from agentworkers import kube
from agentworkers.api import GROUP, VERSION
from agentworkers.api.names import FINALIZER, WORKER_LABEL
from agentworkers.controller.infra import metrics
from agentworkers.controller.infra.options import Options
from agentworkers.controller.kopf import kopf_fixes
from agentworkers.kube.api import Api
from agentworkers.kube.repository import Storage
from agentworkers.kube.store import TRIM, Store

AGENT_CONFIGS = (GROUP, VERSION, "agentconfigs")
PROFILES = (GROUP, VERSION, "virtualagentprofiles")
REVISIONS = (GROUP, VERSION, "agentconfigrevisions")
PROVIDERS = (GROUP, VERSION, "modelproviders")
WORKERS = (GROUP, VERSION, "workers")
TOKEN_QUOTAS = (GROUP, VERSION, "tokenquotas")
PODS = ("", "v1", "pods")
# Kueue's, one per queued run's pod: why it waits. kopf watches them only where Kueue's
# CRD exists (it watches CRDs, and starts when one appears).
WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
# Only the pods of Workers: the operator never reads any other.
POD_FILTER: dict[str, Any] = {"labels": {WORKER_LABEL: kopf.PRESENT}}


@kopf.on.startup()
def configure(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    options: Options = memo.options
    # kopf writes on no object (every kind's events go the lean way, past its change
    # handling); were that to change, its marks would be under our prefix, not kopf's.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # We post our own Events with reasons; kopf's per-handler chatter stays in the log.
    settings.posting.enabled = False
    settings.watching.server_timeout = options.watch_timeout
    # A connection that died silently (no reset: a partition, a dropped NAT entry) is given
    # up on: a request after request_timeout, a watch after kopf's inactivity_timeout (70 s,
    # past the API server's bookmarks) or, at the latest, past the server's own end.
    settings.networking.request_timeout = options.request_timeout
    settings.networking.connect_timeout = kube.CONNECT_TIMEOUT
    settings.watching.connect_timeout = kube.CONNECT_TIMEOUT
    settings.watching.client_timeout = options.watch_timeout + 30
    # The API server filters the pods: the others in a served namespace (a team's own
    # Deployments, Jobs) never reach the operator, which would only decode and drop them.
    settings.watching.label_selectors[PODS] = WORKER_LABEL
    settings.execution.max_workers = options.workers
    settings.networking.error_backoffs = [1, 2, 5, 10, 30, 60]
    # kopf's own peering stays off: replicas take turns on our Leases (`sharding`), and
    # every replica keeps watching, its store warm for a takeover.
    settings.peering.standalone = True
    memo.api = kube.connect(
        options.kubeconfig, timeout=options.request_timeout, threads=options.workers
    ).api
    # Admission tells the operator's own writes (a binding, a revision) from anyone else's.
    api = Api(memo.api)
    memo.identity = api.whoami()
    logger.info("operating as %s", memo.identity)
    memo.store = Store(judged=frozenset(_JUDGED))
    memo.storage = Storage(api, memo.store)
    memo.synced = kopf_fixes.indexed
    kopf_fixes.forget_unlisted(memo.store.unlisted)
    for plural in TRIM:
        metrics.STORE_OBJECTS.labels(kind=plural).set_function(partial(memo.store.size, plural))


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    if "certificate_watch" in memo:
        memo.certificate_watch.stop()
    kopf_fixes.forget_unlisted(None)
    memo.api.close()


# The kinds whose event handlers ask the store whether an event is news (`Store.news`).
_JUDGED: set[str] = set()


@cache
def store_indexer(plural: str) -> Any:
    """The index function feeding `plural`'s objects to the store (one per kind: kopf and
    the lean path are given the same)."""

    # async: a few microseconds of work, done on the event loop rather than in a thread.
    async def index(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        memo.store.observed(plural, body)

    return index


def _forgetter(plural: str) -> Any:
    async def forget(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        if type == "DELETED":
            memo.store.forget(plural, body)

    return forget


def register_store(forgotten_elsewhere: Iterable[str] = (), judged: Iterable[str] = ()) -> None:
    """Feed the store from every kind the operator reads. `forgotten_elsewhere`: plurals
    whose own event handlers forget deletions (and are made lean by their module);
    `judged`: plurals whose event handlers ask whether an event is news (kopf runs a
    kind's index functions before its handlers, for each event in turn). Every other
    kind's events go straight to its two handlers, past kopf's machinery (`kopf_fixes`,
    7): no kind has kopf's change handlers, so kopf writes nothing on any object."""
    skip = set(forgotten_elsewhere)
    _JUDGED.update(judged)
    for resource, extra in (
        (AGENT_CONFIGS, {}),
        (PROFILES, {}),
        (REVISIONS, {}),
        (PROVIDERS, {}),
        (WORKERS, {}),
        (TOKEN_QUOTAS, {}),
        (PODS, POD_FILTER),
    ):
        plural = resource[2]
        index = store_indexer(plural)
        kopf.index(*resource, id=f"store_{plural}", **extra)(index)
        if plural not in skip:
            forget = _forgetter(plural)
            kopf.on.event(*resource, id=f"forget_{plural}", **extra)(forget)
            kopf_fixes.lean(resource, index=index, event=forget)
