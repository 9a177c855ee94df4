"""Nine changes to kopf (1.45), applied before `kopf.run`.

Each replaces or wraps a private part of kopf (`kopf._cogs`, `kopf._core`), so
`pyproject.toml` holds kopf to the releases they are tested on, and `apply` checks every
point it patches before it patches any: a kopf that moved one stops the operator at its
start (`KopfChanged`, naming kopf's version and the point), since running without a fix
brings back the defect it fixes (admission answering from a store still filling, lost
namespaces, stuck handlers).

1. Admission refusals say why in machine-readable form. kopf answers a refused review
with a Status of only a message and a code; a `Refused` error adds `details.causes` with
our reason and field, which the API server passes on to the client
(`agentworkers.kube.api.refusal` reads them back).

2. A work-around for a kopf defect that loses namespaces.

Given namespace patterns (`--namespace team-*`), kopf (1.45) finds the namespaces to
serve in two steps: it lists them, then starts a watch-stream on namespaces, which lists
them again before it watches. It skips that second listing (its events have type None),
so a namespace created between the two listings is never served: nothing in it is
handled until the operator restarts. We saw it lose namespaces created in a window of
about 20 ms, right after the operator's start. Serving listed namespaces like added ones
closes the gap; adding a namespace kopf already serves changes nothing.

`tests/e2e/test_operator.py` creates namespaces through the operator's start and checks
that every one is served; it fails if a kopf upgrade brings the gap back.

3. A signal that kopf has indexed every watched kind (`indexed`).

kopf holds its handlers back until each watched kind in each served namespace is
listed and indexed, but says so to nothing else; admission, answered on threads of its
own from the store those index functions fill, must wait for the same moment. The
signal is kopf's own toggle set (with no namespace to serve yet, it is on at once).

4. Webhooks limited to the namespaces the operator serves.

kopf registers its webhooks for every namespace, whatever `--namespace` says. Two
releases in one cluster, each serving its own namespaces, then review each other's
writes: each refuses the other's revisions as not its own, and either one down fails
the other's writes closed. A `matchCondition` per webhook (CEL, Kubernetes 1.30+; older
API servers ignore it and review everything, as before) keeps the API server from
calling an operator about a namespace it does not serve.

5. An event's body and patch freed as soon as it is handled.

kopf wraps each event in a `Body` and each handling in a `Patch` that keep views of
themselves (`body.meta`, `meta.labels`, `patch.status`...), each pointing back: every
event's whole object is a reference cycle that only Python's cyclic collector frees, in
batches, while every thread waits. Under a burst that was tens of thousands of objects a
second and pauses of 10-100 ms, the tail of admission and of every pass. Made on each
access instead, the views point back at nothing that points at them: reference counting
frees an event the moment kopf lets it go. `tests/unit/controller/test_kopf_fixes.py`
fails if a kopf upgrade brings the cycles back.

6. A watcher kopf stops before it has listed its kind no longer holds every handler back.

kopf holds each event's handlers until every watcher has listed its kind: a toggle per
(kind, namespace), made when the watcher starts and dropped only by its listing. A
watcher stopped before that (its namespace gone, its listing answered 429 while the API
server re-initialises that kind's storage) left its toggle off for good, and every
watcher started after it waited on it: nothing in a namespace created later was handled
(kopf logged "Unprocessed streams left" as those namespaces went) until a restart. Seen
in CI: the operator started while a test's namespace was being deleted, served it for a
moment, and stopped its watchers during their 429 retry. The toggle now goes with its
watcher, however it ends. `tests/unit/controller/test_kopf_fixes.py` reproduces it with
kopf's own orchestration.

7. The kinds whose events only feed the store and hand a key over skip kopf's machinery.

Every Worker and pod event went through kopf's per-object processing: its memory of the
object, a Body and a Patch, three loggers, an error throttler, cause detection, and the
invocation of each handler with its kwargs, its state and its outcome. That was 45% of
the operator's CPU at 10 spawns/s (py-spy), for handlers that take microseconds: the
store's index function and an event handler that queues a pass. A kind declared `lean`
has its events given straight to those two, in the order kopf gives them (the index
before the readiness wait, the handler after). It stays registered with kopf as before,
which is what makes kopf watch it and wait for its listing, and what runs its handlers
if a kopf upgrade moves the function replaced here. A handler's error is logged and the
stream goes on, as kopf does for an event handler's.

8. No MutatingWebhookConfiguration without a mutating webhook.

kopf manages a validating and a mutating configuration side by side, and creates each at
start, whether or not it has a webhook of that kind. The operator has validating ones
only: the mutating configuration it made stayed empty and owned by nothing, so each
`helm uninstall` (which removes the chart's validating one) left one behind. Its manager
now runs only when a mutating webhook is registered; else it waits, as kopf's own does
when it manages nothing (a root task that ends stops the operator).

9. A watch that lists its kind again says what is no longer there.

kopf lists a kind again when its watch ends with "410 Gone" (or its listing failed), and
gives the listed objects as events of type None: an object deleted while no watch was
open gets no DELETED event, and the store would keep it for good (a pod gone in that gap
went on holding its pooled account, a run on waiting for it). As client-go's informers do
on a relisting, the objects the store holds that the listing did not list, though no
newer than the listing, are given as DELETED events after it. The listing's version is
read off kopf's listing call as it passes.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from importlib.metadata import version
from typing import Any

import kopf
from kopf._cogs.clients import fetching, watching
from kopf._cogs.structs import bodies, dicts, patches
from kopf._core.engines import admission
from kopf._core.intents import causes, registries
from kopf._core.reactor import observation, orchestration, processing, queueing

from agentworkers.errors import Refusal

log = logging.getLogger(__name__)


async def process_discovered_namespace_event(
    *,
    raw_event: Any,
    namespaces: Any,
    insights: Any,
    **_: Any,
) -> None:
    """kopf's own processor, without its skip of listed (type None) namespaces."""
    async with insights.revised:
        observation.revise_namespaces(
            raw_events=[raw_event], insights=insights, namespaces=namespaces
        )
        insights.revised.notify_all()


class Refused(kopf.AdmissionError):
    """An admission refusal of ours: 422 Invalid, with its reason and field."""

    def __init__(self, error: Refusal) -> None:
        super().__init__(f"{error.reason}: {error}", code=422)
        self.error = error


def _kopf_s(module: Any, name: str) -> Any:
    """kopf's own `name`, or None where this kopf lacks it (`missing` says which)."""
    return getattr(module, name, None)


_build_response: Callable[..., Any] = _kopf_s(admission, "build_response")


def refusal_details(error: Refusal) -> dict[str, Any]:
    """The Status `details` of a refusal: its reason, field and rule, for clients to read.

    Details only: a Status reason (Invalid) would make kubectl print the causes instead of
    the message, and lose the reason word users read."""
    return {
        "details": {
            "causes": [{"reason": error.reason, "field": error.field, "message": error.rule}]
        }
    }


def build_response(*, outcomes: dict[Any, Any], **kwargs: Any) -> Any:
    """kopf's response, and for a refusal of ours the Status details."""
    response = _build_response(outcomes=outcomes, **kwargs)
    status = response["response"].get("status")
    refused = [o.exception for o in outcomes.values() if isinstance(o.exception, Refused)]
    if status is not None and refused:
        status.update(refusal_details(refused[0].error))
    return response


# Set once kopf has indexed every kind it watches: the store is complete from then on.
indexed = threading.Event()
_spawn_missing_watchers: Callable[..., Awaitable[None]] = _kopf_s(
    orchestration, "spawn_missing_watchers"
)
_waiting: set[asyncio.Task[None]] = set()


async def _set_when_indexed(toggles: Any) -> None:
    await toggles.wait_for(True)
    indexed.set()


async def spawn_missing_watchers(*, ensemble: Any, **kwargs: Any) -> None:
    """kopf's own, then (until the first time) wait for its index toggles to be on."""
    await _spawn_missing_watchers(ensemble=ensemble, **kwargs)
    if not indexed.is_set() and not _waiting:
        task = asyncio.create_task(_set_when_indexed(ensemble.operator_indexed))
        _waiting.add(task)
        task.add_done_callback(_waiting.discard)


_watcher: Callable[..., Awaitable[None]] = _kopf_s(queueing, "watcher")


async def watcher(
    *, operator_indexed: Any = None, resource_indexed: Any = None, **kwargs: Any
) -> None:
    """kopf's own watcher; when it ends, for whatever reason, its kind's index toggle goes
    too (kopf drops it only when the watcher has listed its kind)."""
    try:
        await _watcher(
            operator_indexed=operator_indexed, resource_indexed=resource_indexed, **kwargs
        )
    finally:
        if operator_indexed is not None and resource_indexed is not None:
            # Shielded: stopping cancels the watcher, maybe twice; the drop must happen.
            await asyncio.shield(operator_indexed.drop_toggle(resource_indexed))


# What the store holds that a listing did not list (see 9): (plural, namespace or None for
# all, the listed (namespace, name) keys, the listing's version) -> their bodies. Set once
# the store exists (`forget_unlisted`).
Unlisted = Callable[[str, str | None, set[tuple[str, str]], str], list[dict[str, Any]]]
_unlisted: list[Unlisted] = []
# The version of the listing kopf's watch made last, in this task.
_listed_version: ContextVar[str] = ContextVar("listed_version", default="")
_fetch_objs: Callable[..., AsyncIterator[Any]] = _kopf_s(fetching, "fetch_objs")
_continuous_watch: Callable[..., AsyncIterator[Any]] = _kopf_s(watching, "continuous_watch")


def forget_unlisted(unlisted: Unlisted | None) -> None:
    _unlisted[:] = [unlisted] if unlisted is not None else []


async def fetch_objs(**kwargs: Any) -> AsyncIterator[Any]:
    """kopf's own listing, its version noted (an async generator runs in its consumer's
    context: the watch that listed reads it)."""
    async for chunk, listed_at in _fetch_objs(**kwargs):
        _listed_version.set(listed_at)
        yield chunk, listed_at


async def continuous_watch(*, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
    """kopf's own watch, with a DELETED event after its listing for each object the store
    holds that the listing did not list (see 9)."""
    listed: set[tuple[str, str]] | None = set()
    _listed_version.set("")
    async for event in _continuous_watch(resource=resource, namespace=namespace, **kwargs):
        if listed is not None and event is watching.Bookmark.LISTED:
            version = _listed_version.get()
            gone = [b for f in _unlisted for b in f(resource.plural, namespace, listed, version)]
            for body in gone:
                log.info(
                    "%s %s/%s: gone while the watch was away (not in its new listing)",
                    resource.plural,
                    body["metadata"].get("namespace"),
                    body["metadata"]["name"],
                )
                yield {"type": "DELETED", "object": body}
            listed = None
        elif listed is not None and isinstance(event, dict) and event.get("type") is None:
            of = event["object"].get("metadata") or {}
            listed.add((of.get("namespace") or "", of.get("name") or ""))
        yield event


def _takes(function: Any, *names: str) -> bool:
    """Whether kopf's `function` still takes the arguments a replacement relies on."""
    try:
        return set(names) <= inspect.signature(function).parameters.keys()
    except (TypeError, ValueError):
        return False


# (group, plural) of a lean kind: its index function and its event handler.
EventHandler = Callable[..., Awaitable[None]]
_LEAN: dict[tuple[str, str], tuple[EventHandler, EventHandler]] = {}
_process_resource_event: Callable[..., Awaitable[str | None]] = _kopf_s(
    processing, "process_resource_event"
)


def lean(resource: tuple[str, str, str], index: EventHandler, event: EventHandler) -> None:
    """Give `resource`'s events to `index(body=, memo=)` (not for a deletion) and then to
    `event(type=, body=, memo=)`, and to nothing else of kopf's (see 7 above); both are
    also registered with kopf, as its index and event handlers."""
    group, _, plural = resource
    _LEAN[(group, plural)] = (index, event)


async def process_resource_event(
    *,
    resource: Any,
    raw_event: Any,
    memobase: Any,
    resource_indexed: Any = None,
    operator_indexed: Any = None,
    **kwargs: Any,
) -> str | None:
    """kopf's own, but for a lean kind: its two handlers, and kopf's readiness wait."""
    handlers = _LEAN.get((resource.group, resource.plural))
    if handlers is None:
        return await _process_resource_event(
            resource=resource,
            raw_event=raw_event,
            memobase=memobase,
            resource_indexed=resource_indexed,
            operator_indexed=operator_indexed,
            **kwargs,
        )
    index, event = handlers
    kind, body = raw_event.get("type"), raw_event["object"]
    if kind != "DELETED":
        await _guarded(index, resource, body=body, memo=memobase)
    # As kopf: this object is indexed; its handler waits until every listed one is.
    if operator_indexed is not None and resource_indexed is not None:
        await operator_indexed.drop_toggle(resource_indexed)
    if operator_indexed is not None:
        await _wait_indexed(operator_indexed, resource, body)
    await _guarded(event, resource, type=kind, body=body, memo=memobase)
    return None


# How long a handler waits for kopf's index before the wait is logged (and again each time).
INDEX_STALL_SECONDS = 10.0


async def _wait_indexed(toggles: Any, resource: Any, body: Any) -> None:
    """kopf's readiness wait, logged while it lasts: every handler waits on the one
    barrier, so a watcher that cannot list its kind stalls them all, silently."""
    waited = 0.0
    while True:
        try:
            await asyncio.wait_for(toggles.wait_for(True), INDEX_STALL_SECONDS)
            return
        except TimeoutError:
            waited += INDEX_STALL_SECONDS
            meta = body.get("metadata") or {}
            log.warning(
                "%s %s/%s: waited %.0f s for kopf's index, still off: %s",
                resource.plural,
                meta.get("namespace"),
                meta.get("name"),
                waited,
                ", ".join(sorted(str(t.name or t) for t in toggles if t.is_off())) or "none",
            )


async def _guarded(handler: EventHandler, resource: Any, **kwargs: Any) -> None:
    try:
        await handler(**kwargs)
    except Exception:
        meta = kwargs["body"].get("metadata") or {}
        log.exception(
            "%s %s/%s: %s failed",
            resource.plural,
            meta.get("namespace"),
            meta.get("name"),
            getattr(handler, "__name__", handler),
        )


_build_webhooks: Callable[..., list[dict[str, Any]]] = _kopf_s(admission, "build_webhooks")
_mutating_configuration_manager: Callable[..., Awaitable[None]] = _kopf_s(
    admission, "mutating_configuration_manager"
)


def _mutating(registry: Any) -> list[Any]:
    return [
        handler
        for handler in registry._webhooks.get_all_handlers()
        if handler.reason == causes.WebhookType.MUTATING
    ]


async def mutating_configuration_manager(*, registry: Any, **kwargs: Any) -> None:
    """kopf's own if a mutating webhook is registered; else nothing, for good (see 8)."""
    if _mutating(registry):
        await _mutating_configuration_manager(registry=registry, **kwargs)
    else:
        await asyncio.Event().wait()


def served_condition(patterns: Sequence[str]) -> dict[str, str] | None:
    """A webhook matchCondition: the request's namespace matches one of the operator's
    namespace globs (`team-*`) and none of its exclusions (`!team-secret`); None when it
    serves every namespace."""
    allowed = [p for p in patterns if not p.startswith("!")]
    excluded = [p[1:] for p in patterns if p.startswith("!")]
    if not allowed and not excluded:
        return None
    parts = [f"request.namespace.matches('{_regex(allowed)}')"] if allowed else []
    if excluded:
        parts.append(f"!request.namespace.matches('{_regex(excluded)}')")
    return {"name": "served-namespaces", "expression": " && ".join(parts)}


def _regex(globs: Sequence[str]) -> str:
    """RE2 for any of `globs` (* and ? as in a shell), anchored. Namespace names hold only
    [a-z0-9-]; anything else is put in a class of its own, so the CEL string needs no
    backslash."""

    def one(glob: str) -> str:
        return "".join(
            ".*" if c == "*" else "." if c == "?" else c if c.isalnum() or c == "-" else f"[{c}]"
            for c in glob
        )

    return "^(" + "|".join(one(g) for g in globs) + ")$"


def _served_only(patterns: Sequence[str]) -> Any:
    condition = served_condition(patterns)

    def build_webhooks(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        webhooks = _build_webhooks(*args, **kwargs)
        if condition is not None:
            for webhook in webhooks:
                webhook["matchConditions"] = [condition]
        return webhooks

    return build_webhooks


# Per class: the attribute its __init__ caches a view in, the view, the names it is read by.
_VIEWS: dict[type, dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]]] = {
    bodies.Body: {
        "_meta": (bodies.Meta, ("meta", "metadata")),
        "_spec": (bodies.Spec, ("spec",)),
        "_status": (bodies.Status, ("status",)),
    },
    bodies.Meta: {
        "_labels": (lambda meta: dicts.MappingView(meta, "labels"), ("labels",)),
        "_annotations": (lambda meta: dicts.MappingView(meta, "annotations"), ("annotations",)),
    },
    patches.Patch: {
        "_meta": (patches.MetaPatch, ("meta", "metadata")),
        "_spec": (patches.SpecPatch, ("spec",)),
        "_status": (patches.StatusPatch, ("status",)),
    },
    patches.MetaPatch: {
        "_labels": (lambda meta: dicts.MutableMappingView(meta, "labels"), ("labels",)),
        "_annotations": (
            lambda meta: dicts.MutableMappingView(meta, "annotations"),
            ("annotations",),
        ),
    },
}


def _views_per_access(
    cls: type, views: dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]]
) -> None:
    init = vars(cls)["__init__"]
    if getattr(init, "_views_per_access", False):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        for attr in views:
            self.__dict__.pop(attr, None)

    __init__._views_per_access = True  # type: ignore[attr-defined]
    setattr(cls, "__init__", __init__)  # noqa: B010
    for make, names in views.values():
        for name in names:
            setattr(cls, name, property(make))


class KopfChanged(RuntimeError):
    """The installed kopf lacks a point these fixes patch: the operator does not start."""


TESTED_ON = "1.45.2"


def missing() -> list[str]:
    """The points `apply` patches that this kopf does not have (as they are tested)."""
    toggles = ("operator_indexed", "resource_indexed")
    points = {
        f"{cls.__module__}.{cls.__name__}.{name}": name in vars(cls)
        for cls, views in _VIEWS.items()
        for name in ("__init__", *(n for _, names in views.values() for n in names))
    }
    points.update(
        {
            "kopf._core.engines.admission.build_response(outcomes)": _takes(
                _build_response, "outcomes"
            ),
            "kopf._core.engines.admission.build_webhooks": callable(_build_webhooks),
            "kopf._core.engines.admission.mutating_configuration_manager(registry)": _takes(
                _mutating_configuration_manager, "registry"
            ),
            "kopf._core.intents.registries.OperatorRegistry._webhooks.get_all_handlers": hasattr(
                getattr(registries.OperatorRegistry(), "_webhooks", None), "get_all_handlers"
            ),
            "kopf._core.intents.causes.WebhookType.MUTATING": hasattr(
                getattr(causes, "WebhookType", None), "MUTATING"
            ),
            "kopf._core.reactor.orchestration.spawn_missing_watchers(ensemble)": _takes(
                _spawn_missing_watchers, "ensemble"
            ),
            "kopf._core.reactor.processing.process_resource_event"
            "(resource, raw_event, memobase, operator_indexed, resource_indexed)": _takes(
                _process_resource_event, "resource", "raw_event", "memobase", *toggles
            ),
            "kopf._core.reactor.queueing.watcher(operator_indexed, resource_indexed)": _takes(
                _watcher, *toggles
            ),
            "kopf._cogs.clients.fetching.fetch_objs": callable(_fetch_objs),
            "kopf._cogs.clients.watching.continuous_watch(resource, namespace)": _takes(
                _continuous_watch, "resource", "namespace"
            ),
            "kopf._cogs.clients.watching.Bookmark.LISTED": hasattr(
                getattr(watching, "Bookmark", None), "LISTED"
            ),
            "kopf._core.reactor.observation.process_discovered_namespace_event": hasattr(
                observation, "process_discovered_namespace_event"
            ),
            "kopf._core.reactor.observation.revise_namespaces"
            "(raw_events, insights, namespaces)": _takes(
                _kopf_s(observation, "revise_namespaces"),
                "raw_events",
                "insights",
                "namespaces",
            ),
        }
    )
    return [point for point, found in points.items() if not found]


def apply(namespaces: Sequence[str] = ()) -> None:
    """Install all nine (idempotent): kopf looks these up when it runs them. `namespaces`:
    the operator's `--namespace` patterns (none: every namespace). Raises `KopfChanged`,
    having patched nothing, when a point is missing."""
    if gone := missing():
        raise KopfChanged(
            f"kopf {version('kopf')} is not a kopf the operator's fixes to it are "
            f"made for (tested on kopf {TESTED_ON}); missing: {'; '.join(gone)}. "
            "Install the kopf version pyproject.toml names."
        )
    for cls, views in _VIEWS.items():
        _views_per_access(cls, views)
    admission.build_response = build_response
    admission.build_webhooks = _served_only(namespaces)
    admission.mutating_configuration_manager = mutating_configuration_manager
    orchestration.spawn_missing_watchers = spawn_missing_watchers
    processing.process_resource_event = process_resource_event  # type: ignore[assignment]
    queueing.watcher = watcher
    observation.process_discovered_namespace_event = process_discovered_namespace_event
    fetching.fetch_objs = fetch_objs
    watching.continuous_watch = continuous_watch
