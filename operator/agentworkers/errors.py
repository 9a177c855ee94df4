"""Turning refusals into messages that name the field and the rule."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from agentworkers.virtualagent import VirtualAgentError


class InvalidSpecError(VirtualAgentError):
    """A spec that does not even decode: a wrong type or an unknown field."""

    reason = "InvalidSpec"


class UnknownWorkerError(VirtualAgentError):
    reason = "UnknownWorker"


class WorkerFinishedError(VirtualAgentError):
    reason = "WorkerFinished"


class NotYourChildError(VirtualAgentError):
    reason = "NotYourChild"


class SecretNotAllowedError(VirtualAgentError):
    reason = "SecretNotAllowed"


class TooManyProfilesError(VirtualAgentError):
    """A standalone profile that came after the agent's map was full."""

    reason = "TooManyProfiles"


class DuplicateKeyError(VirtualAgentError):
    """A standalone profile whose key an older standalone profile already declares."""

    reason = "DuplicateKey"


class ForeignRevisionError(VirtualAgentError):
    reason = "RevisionWriteRefused"


def _segment(part: str | int) -> str:
    return f"[{part}]" if isinstance(part, int) else f".{to_camel(part) if '_' in part else part}"


def describe(error: ValidationError, prefix: str = "spec") -> InvalidSpecError:
    """The first decoding problem, as `spec.overlay.providers: unknown field`."""
    problems = []
    for item in error.errors():
        path = prefix + "".join(_segment(p) for p in item["loc"])
        rule = (
            "unknown field (not part of the schema)"
            if item["type"] == "extra_forbidden"
            else item["msg"]
        )
        problems.append((path, rule))
    path, rule = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return InvalidSpecError(path, rule + more)
