"""The admission webhook: its checks, and their kopf registrations; imported only when on.

kopf registers one webhook per check (its path is the check's id) and keeps their
configuration up to date; `admission_server.ThreadedWebhookServer` answers them on
threads of its own, from the operator's watch-fed store, so a busy operator still
answers within milliseconds. (The registered kopf handlers run the same checks, should
kopf ever serve a review itself.)

Every webhook is persistent: a stopping operator leaves it in the configuration, so
while no operator answers (a restart, a rollout) writes fail closed (failurePolicy
Fail) instead of going through unchecked.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from typing import Any

import kopf

from agentworkers.controller.admission import admission
from agentworkers.controller.admission.admission_server import Check, Review
from agentworkers.controller.admission.tls import CertificateWatch
from agentworkers.controller.infra import tracing
from agentworkers.controller.infra.options import Options
from agentworkers.controller.kopf.startup import AGENT_CONFIGS, PROFILES, REVISIONS, WORKERS
from agentworkers.controller.passes import lineage, quotas
from agentworkers.core.objects import meta
from agentworkers.kube.repository import Repository

WRITES = ["CREATE", "UPDATE"]
SWITCH_INTERVAL = 0.0005  # seconds


def checks(
    storage: Repository, operator: str | None, synced: threading.Event | None = None
) -> dict[str, Check]:
    """Each webhook's check, by id; `operator` is the operator's own username. Until
    `synced` is set (the store has listed every kind), every review is refused as not
    ready: answered from a store that is still filling, a spawn's parent would look
    missing and a tree would look empty."""

    def ready(check: Check) -> Check:
        def gated(review: Review, warnings: list[str]) -> None:
            if synced is not None and not synced.is_set():
                raise kopf.AdmissionError(
                    "the agentworkers operator is starting and has not read every object "
                    "yet; try again in a moment",
                    code=503,
                )
            check(review, warnings)

        return gated

    def agent_config(review: Review, warnings: list[str]) -> None:
        config = meta(review.body)
        spec = review.body.get("spec") or {}
        admission.validate_agent_config(storage, spec, config.name, config.namespace)

    def profile(review: Review, warnings: list[str]) -> None:
        read = meta(review.body)
        # A profile being created comes after every existing one, even within their second.
        created = read.creation_timestamp or "" if review.old else ""
        admission.validate_profile(
            storage,
            review.body.get("spec") or {},
            read.name,
            read.namespace,
            warnings,
            created,
        )

    admitted = lineage.Admitted()
    quota_pending = quotas.Pending()

    def worker(review: Review, warnings: list[str]) -> None:
        # A spawn's admission is a span of it (an update's is not).
        span = tracing.spawn_span("admission", review.body) if review.old is None else None
        with span or contextlib.nullcontext():
            _validate_worker(review, warnings)

    def _validate_worker(review: Review, warnings: list[str]) -> None:
        admission.validate_worker(
            storage,
            review.body,
            review.old,
            warnings,
            review.username,
            operator,
            admitted,
            review.dry_run,
            quota_pending,
        )

    def revision(review: Review, warnings: list[str]) -> None:
        admission.validate_revision(review.username, operator)

    return {
        "agentconfig": ready(agent_config),
        "virtualagentprofile": ready(profile),
        "worker": ready(worker),
        "agentconfigrevision": ready(revision),
    }


@kopf.on.startup()
def serve(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    options: Options = memo.options
    # A review's thread waits for the interpreter lock behind kopf's event loop, which is
    # busy with watch events under a burst; a shorter switch interval (5 ms by default)
    # bounds each wait, at a small cost in throughput.
    sys.setswitchinterval(SWITCH_INTERVAL)
    memo.checks = checks(memo.storage, memo.identity, memo.synced)
    settings.admission.server = options.webhook_server(memo.checks, memo.synced.is_set)
    settings.admission.managed = options.webhook_name
    # The server reads its certificate once: a new one restarts the process.
    memo.certificate_watch = CertificateWatch(options.tls_dir / "tls.crt").start()


def _registered(check_id: str) -> Any:
    async def handler(
        body: kopf.Body,
        old: dict[str, Any] | None,
        memo: kopf.Memo,
        warnings: list[str],
        userinfo: dict[str, Any],
        dryrun: bool,
        **_: Any,
    ) -> None:
        review = Review(dict(body), old, str(userinfo.get("username", "")), bool(dryrun))
        await asyncio.to_thread(memo.checks[check_id], review, warnings)

    return handler


for check_id, resource in (
    ("agentconfig", AGENT_CONFIGS),
    ("virtualagentprofile", PROFILES),
    ("worker", WORKERS),
    ("agentconfigrevision", REVISIONS),
):
    kopf.on.validate(*resource, id=check_id, operations=WRITES, persistent=True)(
        _registered(check_id)
    )
