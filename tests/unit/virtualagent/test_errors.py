"""The error classes: one per seed error, each a ValueError with a reason and a field."""

from __future__ import annotations

import copy
import pickle

import pytest

import agentworkers.virtualagent as va
from agentworkers.virtualagent.errors import nested

REASONS = {
    va.InvalidKeyError: "InvalidKey",
    va.InvalidOverlayError: "InvalidOverlay",
    va.InvalidProfileError: "InvalidProfile",
    va.InvalidMapError: "InvalidMap",
    va.UnknownProfileError: "UnknownProfile",
    va.InvalidSelectedProfileError: "InvalidSelectedProfile",
    va.StaleProfilePinError: "StaleProfilePin",
    va.ProfileRecursionError: "ProfileRecursion",
    va.NoProfileMapError: "NoProfileMap",
    va.TamperedBindingError: "TamperedBinding",
    va.MissingProfileError: "MissingProfile",
}


@pytest.mark.parametrize(("error", "reason"), REASONS.items())
def test_each_error_is_a_value_error_with_its_reason(
    error: type[va.VirtualAgentError], reason: str
) -> None:
    instance = error("overlay.model", "must not be blank")

    assert isinstance(instance, va.VirtualAgentError)
    assert isinstance(instance, ValueError)
    assert error.reason == reason
    assert instance.field == "overlay.model"
    assert instance.rule == "must not be blank"
    assert str(instance) == "overlay.model: must not be blank"


def test_reasons_are_distinct() -> None:
    assert len(set(REASONS.values())) == len(REASONS)


def test_an_error_without_a_field_is_its_rule() -> None:
    assert str(va.InvalidProfileError("", "cannot be hashed")) == "cannot be hashed"


def test_errors_survive_pickling_and_copying() -> None:
    error = va.StaleProfilePinError("revision_id", "moved")

    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(clone) is va.StaleProfilePinError
        assert (clone.field, clone.rule) == ("revision_id", "moved")


def test_nested_roots_the_field_and_changes_the_type() -> None:
    inner = va.InvalidOverlayError("overlay.max_tokens", "0 is below the minimum 1")

    outer = nested(inner, "profiles[3]", va.InvalidMapError)

    assert type(outer) is va.InvalidMapError
    assert str(outer) == "profiles[3].overlay.max_tokens: 0 is below the minimum 1"
    assert nested(va.InvalidMapError("", "r"), "p", va.InvalidMapError).field == "p"
    assert nested(inner, "", va.InvalidProfileError).field == "overlay.max_tokens"
