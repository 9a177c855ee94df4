"""What the client raises: the seed's lifecycle errors, on agentworkers' one root.

`ClientError` is that root (`agentworkers.errors.AgentWorkersError`): catching it catches
everything the client raises on purpose. Each error has the `reason` the operator uses
for the same condition; a refusal by the operator's admission comes back as its own
class, recognised by the reason in the API Status's details (not by its message).
"""

from __future__ import annotations

from agentworkers.api import reasons
from agentworkers.errors import (
    AgentWorkersError,
    ApiError,
    ConfigError,
    NotFoundError,
    TokenQuotaError,
    TreeLimitError,
    UnknownWorkerError,
    WorkerFinishedError,
)

ClientError = AgentWorkersError


class WorkerNameConflictError(AgentWorkersError):
    """A live worker already has that name."""

    reason = "WorkerNameConflict"


class WaitTimeoutError(AgentWorkersError, TimeoutError):
    """The worker did not reach the awaited phase within the timeout."""

    reason = "WaitTimeout"


class CollectTimeoutError(WaitTimeoutError):
    """The worker did not settle (idle, done, failed, killed) within the timeout."""

    reason = "CollectTimeout"


# Refusals of the operator the client raises as their own class.
_REFUSALS: dict[str, type[AgentWorkersError]] = {
    WorkerFinishedError.reason: WorkerFinishedError,
    UnknownWorkerError.reason: UnknownWorkerError,
    **dict.fromkeys(
        (
            reasons.TREE_TOO_DEEP,
            reasons.TOO_MANY_CHILDREN,
            reasons.TREE_FULL,
            reasons.TREE_BUDGET,
        ),
        TreeLimitError,
    ),
    **dict.fromkeys(
        (reasons.TOKEN_QUOTA_EXCEEDED, reasons.TOKEN_QUOTA_NEEDS_BUDGET), TokenQuotaError
    ),
}


def translate(error: ApiError, not_found: AgentWorkersError | None = None) -> AgentWorkersError:
    """An API error as the client's: `not_found` for a 404, an operator's refusal as its
    class, anything else as it is."""
    if error.status == 404 and not_found is not None:
        return not_found
    if error.cause is not None and error.cause.reason in _REFUSALS:
        reason = error.cause.reason
        return _REFUSALS[reason](error.cause.rule, error.cause.field, reason=reason)
    return error


__all__ = [
    "ApiError",
    "ClientError",
    "CollectTimeoutError",
    "ConfigError",
    "NotFoundError",
    "TokenQuotaError",
    "TreeLimitError",
    "UnknownWorkerError",
    "WaitTimeoutError",
    "WorkerFinishedError",
    "WorkerNameConflictError",
    "translate",
]
