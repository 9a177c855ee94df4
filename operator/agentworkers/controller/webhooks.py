"""kopf registrations of the admission webhook; imported only when the webhook is on."""

from __future__ import annotations

from typing import Any

import kopf

from agentworkers.controller import admission
from agentworkers.controller.handlers import AGENT_CONFIGS, PROFILES, WORKERS


@kopf.on.validate(*AGENT_CONFIGS, id="agentconfig", operations=["CREATE", "UPDATE"])
def admit_agent_config(
    spec: kopf.Spec, name: str, namespace: str, memo: kopf.Memo, **_: Any
) -> None:
    admission.validate_agent_config(memo.storage, dict(spec), name, namespace)


@kopf.on.validate(*PROFILES, id="virtualagentprofile", operations=["CREATE", "UPDATE"])
def admit_profile(
    spec: kopf.Spec, name: str, namespace: str, memo: kopf.Memo, warnings: list[str], **_: Any
) -> None:
    admission.validate_profile(memo.storage, dict(spec), name, namespace, warnings)


@kopf.on.validate(*WORKERS, id="worker", operations=["CREATE", "UPDATE"])
def admit_worker(
    spec: kopf.Spec,
    old: dict[str, Any] | None,
    namespace: str,
    memo: kopf.Memo,
    warnings: list[str],
    userinfo: dict[str, Any],
    **_: Any,
) -> None:
    admission.validate_worker(
        memo.storage, dict(spec), old, namespace, warnings, userinfo.get("username", "")
    )
