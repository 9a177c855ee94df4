"""Freeze, bind, verify: the spawn-time and child-run-start checks, in the seed's order."""

from __future__ import annotations

import pytest

from agentworkers.virtualagent import (
    Binding,
    FrozenMap,
    InvalidKeyError,
    InvalidMapError,
    InvalidSelectedProfileError,
    MissingProfileError,
    Overlay,
    Profile,
    StaleProfilePinError,
    TamperedBindingError,
    UnknownProfileError,
    clone_binding,
    normalize_profile,
    profile_hash,
    validate_binding,
)
from tests.unit.virtualagent.factories import DIGEST, OWNER, REVISION, make_map, make_profile

OTHER_DIGEST = "b" * 64


def freeze(*profiles: Profile, revision: str = REVISION, digest: str = DIGEST) -> FrozenMap:
    return FrozenMap.freeze(make_map(*(profiles or (make_profile(),))), revision, digest)


@pytest.fixture
def frozen() -> FrozenMap:
    return freeze()


@pytest.fixture
def binding(frozen: FrozenMap) -> Binding:
    selected = frozen.profile("reviewer")
    assert selected is not None
    return frozen.bind(selected)


# Freeze


def test_freeze_refuses_an_invalid_map() -> None:
    with pytest.raises(InvalidMapError) as caught:
        FrozenMap.freeze(make_map(make_profile(parent="other")), REVISION, DIGEST)
    assert caught.value.field == "profiles[0].parent"


def test_freeze_refuses_an_empty_owner() -> None:
    with pytest.raises(InvalidMapError) as caught:
        FrozenMap.freeze(make_map(owner=" "), REVISION, DIGEST)
    assert caught.value.field == "owner"


def test_freeze_holds_the_canonical_map() -> None:
    raw = make_profile(label="  padded ", overlay=Overlay(skills=["b", "a"]))
    frozen = FrozenMap.freeze(make_map(raw, owner=f" {OWNER} "), REVISION, DIGEST)

    assert (frozen.owner, frozen.revision_id, frozen.config_digest) == (OWNER, REVISION, DIGEST)
    assert frozen.profile("reviewer") == normalize_profile(raw)
    assert frozen.hash_of("reviewer") == profile_hash(raw)


def test_absent_keys(frozen: FrozenMap) -> None:
    assert frozen.profile("nope") is None
    assert frozen.hash_of("nope") is None


def test_profile_returns_a_copy_the_caller_cannot_corrupt() -> None:
    frozen = freeze(make_profile(output_schema={"type": "object"}))
    before = frozen.hash_of("reviewer")

    copy = frozen.profile("reviewer")
    assert copy is not None and copy.output_schema is not None
    copy.output_schema["type"] = "array"

    again = frozen.profile("reviewer")
    assert again is not None and again.output_schema == {"type": "object"}
    assert profile_hash(again) == before


# verify_current


def test_verify_current_without_a_live_reader_trusts_the_pin(frozen: FrozenMap) -> None:
    frozen.verify_current()


def test_verify_current_passes_while_the_live_revision_matches() -> None:
    frozen = FrozenMap.freeze(
        make_map(make_profile()), REVISION, DIGEST, lambda: (REVISION, DIGEST)
    )

    frozen.verify_current()


@pytest.mark.parametrize(
    ("live", "field"),
    [(("rev-2", DIGEST), "revision_id"), ((REVISION, OTHER_DIGEST), "config_digest")],
)
def test_verify_current_fails_when_the_live_revision_moved(
    live: tuple[str, str], field: str
) -> None:
    frozen = FrozenMap.freeze(make_map(make_profile()), REVISION, DIGEST, lambda: live)

    with pytest.raises(StaleProfilePinError) as caught:
        frozen.verify_current()
    assert caught.value.field == field
    assert "no longer matches the frozen pin 'rev-1'/aaaaaaaaaaaa" in str(caught.value)


def test_verify_current_fails_closed_when_the_live_revision_cannot_be_read() -> None:
    def broken() -> tuple[str, str]:
        raise ConnectionError("api server down")

    frozen = FrozenMap.freeze(make_map(make_profile()), REVISION, DIGEST, broken)

    with pytest.raises(StaleProfilePinError) as caught:
        frozen.verify_current()
    assert "api server down" in str(caught.value)
    assert isinstance(caught.value.__cause__, ConnectionError)


# bind


def test_bind_pins_the_frozen_profile(frozen: FrozenMap, binding: Binding) -> None:
    validate_binding(binding)
    assert binding.agent_id == binding.parent == OWNER
    assert binding.key == "reviewer"
    assert binding.label == "test label reviewer"
    assert (binding.config_revision_id, binding.config_digest) == (REVISION, DIGEST)
    assert binding.profile_hash == frozen.hash_of("reviewer")
    assert binding.profile == frozen.profile("reviewer")


def test_bind_accepts_the_same_profile_in_another_order(frozen: FrozenMap) -> None:
    reordered = make_profile(
        overlay=Overlay(
            model="profile-model", max_tokens=4000, skills=["summarize", "review", "review"]
        )
    )

    assert frozen.bind(reordered).profile_hash == frozen.hash_of("reviewer")


def test_bind_refuses_an_unknown_key(frozen: FrozenMap) -> None:
    with pytest.raises(UnknownProfileError) as caught:
        frozen.bind(make_profile("nope"))
    assert caught.value.field == "key"
    assert "'nope' is not a profile of 'top-agent'" in str(caught.value)


def test_bind_refuses_an_invalid_selected_profile(frozen: FrozenMap) -> None:
    with pytest.raises(InvalidSelectedProfileError) as caught:
        frozen.bind(make_profile(overlay=Overlay(max_tokens=0)))
    assert str(caught.value) == "overlay.max_tokens: 0 is below the minimum 1"


def test_bind_refuses_a_profile_other_than_the_frozen_one(frozen: FrozenMap) -> None:
    with pytest.raises(StaleProfilePinError) as caught:
        frozen.bind(make_profile(label="edited since the freeze"))
    assert caught.value.field == "profile"


# verify_pin, in order: shape, missing, stale, hash, snapshot, label / parent


def test_verify_pin_reproduces_the_exact_profile(frozen: FrozenMap, binding: Binding) -> None:
    assert frozen.verify_pin(binding) == frozen.profile("reviewer")
    # A fresh freeze of the same configuration accepts the pin: a restart.
    assert freeze().verify_pin(binding) == normalize_profile(make_profile())


def test_a_malformed_binding_is_tampering(frozen: FrozenMap, binding: Binding) -> None:
    with pytest.raises(TamperedBindingError) as caught:
        frozen.verify_pin(binding.model_copy(update={"key": "UPPER"}))
    assert caught.value.field == "key"
    assert isinstance(caught.value.__cause__, InvalidKeyError)

    with pytest.raises(TamperedBindingError) as caught:
        frozen.verify_pin(binding.model_copy(update={"config_digest": "abc"}))
    assert caught.value.field == "config_digest"


def test_shape_is_checked_before_the_key_is_looked_up(binding: Binding) -> None:
    elsewhere = freeze(make_profile("other"))

    with pytest.raises(TamperedBindingError):
        elsewhere.verify_pin(binding.model_copy(update={"profile_hash": "short"}))


def test_a_removed_profile_is_missing(binding: Binding) -> None:
    with pytest.raises(MissingProfileError) as caught:
        freeze(make_profile("other")).verify_pin(binding)
    assert caught.value.field == "key"


def test_missing_is_checked_before_stale(binding: Binding) -> None:
    with pytest.raises(MissingProfileError):
        freeze(make_profile("other"), revision="rev-2").verify_pin(binding)


@pytest.mark.parametrize(
    ("revision", "digest", "field"),
    [("rev-2", DIGEST, "config_revision_id"), (REVISION, OTHER_DIGEST, "config_digest")],
)
def test_a_moved_revision_is_stale(
    binding: Binding, revision: str, digest: str, field: str
) -> None:
    with pytest.raises(StaleProfilePinError) as caught:
        freeze(revision=revision, digest=digest).verify_pin(binding)
    assert caught.value.field == field


def test_stale_is_checked_before_the_hash(binding: Binding) -> None:
    edited = make_profile(overlay=Overlay(max_tokens=9000))

    with pytest.raises(StaleProfilePinError):
        freeze(edited, revision="rev-2").verify_pin(binding)


def test_an_edited_profile_is_tampering(binding: Binding) -> None:
    edited = make_profile(overlay=Overlay(max_tokens=9000))

    with pytest.raises(TamperedBindingError) as caught:
        freeze(edited).verify_pin(binding)
    assert caught.value.field == "profile_hash"


def test_a_missing_snapshot_is_tampering(frozen: FrozenMap, binding: Binding) -> None:
    with pytest.raises(TamperedBindingError) as caught:
        frozen.verify_pin(binding.model_copy(update={"profile": None}))
    assert caught.value.field == "profile"
    assert "snapshot is missing" in caught.value.rule


def test_a_swapped_snapshot_is_tampering(frozen: FrozenMap, binding: Binding) -> None:
    swapped = binding.model_copy(update={"profile": make_profile(label="forged")})

    with pytest.raises(TamperedBindingError) as caught:
        frozen.verify_pin(swapped)
    assert caught.value.field == "profile"


def test_a_forged_label_is_tampering(frozen: FrozenMap, binding: Binding) -> None:
    with pytest.raises(TamperedBindingError) as caught:
        frozen.verify_pin(binding.model_copy(update={"label": "forged label"}))
    assert caught.value.field == "label"


def test_a_forged_agent_and_parent_is_tampering(frozen: FrozenMap, binding: Binding) -> None:
    forged = binding.model_copy(update={"agent_id": "other-agent", "parent": "other-agent"})

    with pytest.raises(TamperedBindingError) as caught:
        frozen.verify_pin(forged)
    assert caught.value.field == "parent"


# clone_binding


def test_clone_binding_is_equal_and_shares_nothing_mutable() -> None:
    frozen = freeze(make_profile(output_schema={"type": "object"}))
    selected = frozen.profile("reviewer")
    assert selected is not None
    original = frozen.bind(selected)

    clone = clone_binding(original)

    assert clone == original
    assert clone.profile is not None and original.profile is not None
    assert clone.profile is not original.profile
    assert clone.profile.output_schema is not None
    clone.profile.output_schema["type"] = "array"
    assert original.profile.output_schema == {"type": "object"}


def test_clone_binding_normalises_the_snapshot() -> None:
    raw = make_profile(label=" spaced ")
    clone = clone_binding(Binding(key="reviewer", profile=raw))

    assert clone.profile == normalize_profile(raw)
    assert clone_binding(Binding(key="k")).profile is None
