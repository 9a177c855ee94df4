"""Status conditions, the Kubernetes way: a list keyed by type, transitions timestamped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from agentworkers.api.common import MAX_CONDITION_MESSAGE, Condition
from agentworkers.api.reasons import READY, RECONCILING, STALLED
from agentworkers.core.clocks import now

Status = Literal["True", "False", "Unknown"]


def truncate(message: str, limit: int = MAX_CONDITION_MESSAGE) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: Status,
    reason: str,
    message: str,
    generation: int | None,
    at: str | None = None,
) -> tuple[Condition, ...]:
    """Conditions with `type_` set; its transition time moves only when its status does."""
    previous = next((c for c in conditions if c.type == type_), None)
    keep = previous is not None and previous.status == status
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=truncate(message),
        observed_generation=generation,
        last_transition_time=previous.last_transition_time if keep and previous else (at or now()),
    )
    return (*(c for c in conditions if c.type != type_), updated)


def summary_conditions(
    conditions: Sequence[Condition],
    ready: Status,
    reason: str,
    message: str,
    generation: int | None,
    *,
    stalled: bool = False,
    reconciling: bool = False,
) -> tuple[Condition, ...]:
    """`Ready` with kstatus' `Stalled` and `Reconciling` beside it, all from one verdict."""
    conditions = set_condition(conditions, READY, ready, reason, message, generation)
    return abnormal_conditions(
        conditions, reason, message, generation, stalled=stalled, reconciling=reconciling
    )


def abnormal_conditions(
    conditions: Sequence[Condition],
    reason: str,
    message: str,
    generation: int | None,
    *,
    stalled: bool,
    reconciling: bool,
    at: str | None = None,
) -> tuple[Condition, ...]:
    """kstatus' "abnormal-true" pair. kstatus (Flux's health checks, `kubectl wait`) reads
    Reconciling=True as in progress, Stalled=True as failed (its message is what Flux
    reports), then Ready. Both are written False when they do not hold, so a reader never
    sees a stale True."""
    for type_, holds in ((STALLED, stalled), (RECONCILING, reconciling)):
        conditions = set_condition(
            conditions,
            type_,
            "True" if holds else "False",
            reason,
            message if holds else "",
            generation,
            at,
        )
    return tuple(conditions)
