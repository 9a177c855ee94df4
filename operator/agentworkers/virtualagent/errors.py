"""The errors of the virtual-agent package, one class per failure the seed names.

Every error is a ``ValueError`` carrying:

* ``reason`` (class attribute): the CamelCase Kubernetes condition / Event reason;
* ``field``: the dotted path that failed, rooted at the object validated
  (``overlay.max_tokens``, ``profiles[2].key``, ``profile.label``); empty when the
  failure belongs to no single field;
* ``rule``: what failed, in words.

``str(error)`` is ``"<field>: <rule>"``, so a condition message names both.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

_E = TypeVar("_E", bound="VirtualAgentError")


class VirtualAgentError(ValueError):
    """Base of every error this package raises."""

    reason: ClassVar[str] = "VirtualAgentError"

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}" if field else rule)

    def __reduce__(self) -> tuple[type[VirtualAgentError], tuple[str, str]]:
        # The two-argument constructor would otherwise break pickling and copying.
        return type(self), (self.field, self.rule)


class InvalidKeyError(VirtualAgentError):
    """A profile key is empty, longer than its bound, or outside the key charset."""

    reason = "InvalidKey"


class InvalidOverlayError(VirtualAgentError):
    """The overlay breaks a bounded, narrow-only invariant."""

    reason = "InvalidOverlay"


class InvalidProfileError(VirtualAgentError):
    """The profile envelope (label, parent, overlay, inputs, output schema) is invalid."""

    reason = "InvalidProfile"


class InvalidMapError(VirtualAgentError):
    """The profile map is invalid: no owner, over its cap, a bad or foreign member, a duplicate."""

    reason = "InvalidMap"


class UnknownProfileError(VirtualAgentError):
    """A spawn selected a key the frozen map lacks; fails before anything persists."""

    reason = "UnknownProfile"


class InvalidSelectedProfileError(VirtualAgentError):
    """A spawn selected a profile that fails re-validation; fails before anything persists."""

    reason = "InvalidSelectedProfile"


class StaleProfilePinError(VirtualAgentError):
    """The live config revision, or the selected profile, no longer matches the pin."""

    reason = "StaleProfilePin"


class ProfileRecursionError(VirtualAgentError):
    """A virtual-profile run tried to spawn another virtual-profile child."""

    reason = "ProfileRecursion"


class NoProfileMapError(VirtualAgentError):
    """A spawn selected a profile in a run that owns no frozen profile map."""

    reason = "NoProfileMap"


class TamperedBindingError(VirtualAgentError):
    """A persisted binding is malformed or disagrees with the profile it pins."""

    reason = "TamperedBinding"


class MissingProfileError(VirtualAgentError):
    """A persisted binding's key is absent from the current profile map."""

    reason = "MissingProfile"


def join_field(prefix: str, field: str) -> str:
    """Join two dotted-path parts, skipping an empty one."""
    return f"{prefix}.{field}" if prefix and field else prefix or field


def nested(error: VirtualAgentError, prefix: str, as_type: type[_E]) -> _E:
    """Re-state ``error`` as ``as_type`` with its field rooted under ``prefix``.

    Raise the result ``from error`` so the original failure stays on the chain.
    """
    return as_type(join_field(prefix, error.field), error.rule)
