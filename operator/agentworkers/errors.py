"""The errors agentworkers raises on purpose, under one root, and how a refusal is worded.

Every error carries a machine-readable ``reason`` (the CamelCase word a condition, an
Event or an admission refusal uses), the ``field`` it concerns (empty when no single
field) and the ``rule`` it broke, in words; ``str(error)`` is ``"<field>: <rule>"``.

A `RuleError` is a refusal: the input breaks a rule, and trying again will not help. The
profile rules are the virtualagent port's, and its ``VirtualAgentError`` has the same
three attributes; the port stays unchanged, so the edges that report a refusal (admission,
conditions, Events) take either: `REFUSALS` is what they catch. An `ApiError` is not a
refusal: the reconcile that meets one is retried.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from agentworkers.api.common import FieldValueError
from agentworkers.virtualagent import VirtualAgentError


class AgentWorkersError(Exception):
    """Root of the operator's, the client's and the repository's errors."""

    reason: str = "Error"

    def __init__(self, rule: str, field: str = "", *, reason: str | None = None) -> None:
        self.field = field
        self.rule = rule
        if reason is not None:
            self.reason = reason
        super().__init__(f"{field}: {rule}" if field else rule)

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses' constructors differ; copying or pickling restores the attributes.
        return _rebuild, (type(self), str(self), self.__dict__)


def _rebuild(cls: type[AgentWorkersError], message: str, state: dict[str, object]) -> Exception:
    error = Exception.__new__(cls, message)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class RuleError(AgentWorkersError):
    """A rule refused the input: the write is refused, or the run fails, with the reason.
    Never retried (unlike an ApiError: the API server's trouble passes)."""


# What an edge reports as a refusal: a rule of ours, or the port's profile rules.
REFUSALS = (RuleError, VirtualAgentError)
Refusal = RuleError | VirtualAgentError


# --- refusals of the operator (admission and handlers alike) --------------------------


class InvalidSpecError(RuleError):
    """A spec that does not even decode: a wrong type or an unknown field."""

    reason = "InvalidSpec"


class NotFoundError(AgentWorkersError, LookupError):
    """No such object: a worker, an agent, a revision or a profile."""

    reason = "NotFound"


class UnknownWorkerError(NotFoundError, RuleError):
    """No worker by that name (a parent, an ancestor, a client's target)."""

    reason = "UnknownWorker"


class WorkerFinishedError(RuleError):
    """The run has ended; it takes no more queries."""

    reason = "WorkerFinished"


class NotYourChildError(RuleError):
    """A runtime wrote a Worker that is neither itself nor one of its children."""

    reason = "NotYourChild"


class SecretNotAllowedError(RuleError):
    """A Worker names an API-key Secret its AgentConfig does not allow."""

    reason = "SecretNotAllowed"


class ReasoningAPIUnsupportedError(RuleError):
    """reasoningAPI (Anthropic's thinking) on a run whose provider is not anthropic."""

    reason = "ReasoningAPIUnsupported"


class InvalidInputError(RuleError):
    """An input that is not what it says: bad base64, a digest that differs, past a size."""

    reason = "InvalidInput"


class InputNotAllowedError(RuleError):
    """A spawn's inputs past its profile's bounds (inputCount, inputPatterns) or beyond
    what its inputDisposition can give."""

    reason = "InputNotAllowed"


class TooManyProfilesError(RuleError):
    """A standalone profile that came after the agent's map was full."""

    reason = "TooManyProfiles"


class DuplicateKeyError(RuleError):
    """A standalone profile whose key an older standalone profile already declares."""

    reason = "DuplicateKey"


class ForeignRevisionError(RuleError):
    """Somebody other than the operator wrote an AgentConfigRevision."""

    reason = "RevisionWriteRefused"


class TreeLimitError(RuleError):
    """A spawn past a limit of its tree (`AgentConfig.spec.tree`); `reason` says which."""

    reason = "TreeLimit"


class TokenQuotaError(RuleError):
    """A spawn a TokenQuota of its namespace has no room for; `reason` says why
    (TokenQuotaExceeded, TokenQuotaNeedsBudget)."""

    reason = "TokenQuotaExceeded"


class WarmPodMismatchError(RuleError):
    """A warm pod's claim does not fit it or its run: another revision, another run."""

    reason = "WarmPodMismatch"


class RunFailedError(RuleError):
    """A run that cannot go on; `reason` is the condition's (PodLost, PodConflict, ...)."""

    reason = "RunFailed"


# --- the API, as the repository reports it ---------------------------------------------


class ApiError(AgentWorkersError):
    """The API server refused a request (`status`; its message says why), or could not be
    reached (`status` None). A refusal with details (our admission webhook's, or the
    schema's) comes with its first `cause`: reason, field and rule, read back."""

    reason = "ApiError"

    def __init__(
        self, rule: str, status: int | None = None, cause: AgentWorkersError | None = None
    ) -> None:
        super().__init__(rule)
        self.status = status
        self.cause = cause


class ConfigError(AgentWorkersError):
    """No usable kubeconfig (nor in-cluster service account)."""

    reason = "ConfigError"


# --- wording ------------------------------------------------------------------------------


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
        if isinstance(below := (item.get("ctx") or {}).get("error"), FieldValueError):
            path, rule = f"{path}.{below.path}", below.rule
        problems.append((path, rule))
    path, rule = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return InvalidSpecError(rule + more, path)
