"""kopf registrations of the admission webhook; imported only when the webhook is on.

Admission answers on capacity of its own: each review runs in a small thread pool of its
own, not in kopf's executor behind the reconciles, and reads the operator's watch-fed
store, so a busy operator still answers within milliseconds.

Every webhook is persistent: a stopping operator leaves it in the configuration, so
while no operator answers (a restart, a rollout) writes fail closed (failurePolicy
Fail) instead of going through unchecked.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from agentworkers.controller import admission
from agentworkers.controller.startup import AGENT_CONFIGS, PROFILES, REVISIONS, WORKERS

WRITES = ["CREATE", "UPDATE"]
REVIEWERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="admission")


async def _review(check: Callable[..., None], *args: Any) -> None:
    await asyncio.get_running_loop().run_in_executor(REVIEWERS, functools.partial(check, *args))


@kopf.on.validate(*AGENT_CONFIGS, id="agentconfig", operations=WRITES, persistent=True)
async def admit_agent_config(
    spec: kopf.Spec, name: str, namespace: str, memo: kopf.Memo, **_: Any
) -> None:
    await _review(admission.validate_agent_config, memo.storage, dict(spec), name, namespace)


@kopf.on.validate(*PROFILES, id="virtualagentprofile", operations=WRITES, persistent=True)
async def admit_profile(
    spec: kopf.Spec,
    meta: kopf.Meta,
    old: dict[str, Any] | None,
    name: str,
    namespace: str,
    memo: kopf.Memo,
    warnings: list[str],
    **_: Any,
) -> None:
    # A profile being created comes after every existing one, even within their second.
    created = meta.get("creationTimestamp") or "" if old else ""
    await _review(
        admission.validate_profile, memo.storage, dict(spec), name, namespace, warnings, created
    )


@kopf.on.validate(*WORKERS, id="worker", operations=WRITES, persistent=True)
async def admit_worker(
    body: kopf.Body,
    old: dict[str, Any] | None,
    memo: kopf.Memo,
    warnings: list[str],
    userinfo: dict[str, Any],
    **_: Any,
) -> None:
    await _review(
        admission.validate_worker,
        memo.storage,
        body,
        old,
        warnings,
        userinfo.get("username", ""),
        memo.identity,
    )


@kopf.on.validate(*REVISIONS, id="agentconfigrevision", operations=WRITES, persistent=True)
async def admit_revision(memo: kopf.Memo, userinfo: dict[str, Any], **_: Any) -> None:
    admission.validate_revision(userinfo.get("username", ""), memo.identity)
