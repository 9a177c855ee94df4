"""Validation of keys, overlays, profiles, maps and bindings against the seed's bounds.

Each function returns ``None`` or raises the seed's error for the first rule broken, in
the seed's order, naming the field (rooted at the object validated) and the rule.
Values are checked as given, not normalised: an over-long label fails even when
trimming would shorten it, as in the seed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from agentworkers.virtualagent.canonical import sha256_hex
from agentworkers.virtualagent.constants import (
    DEFAULT_MAX_PROFILES,
    HEX_DIGEST_PATTERN,
    INPUT_DISPOSITIONS,
    KEY_PATTERN,
    MAX_ENTRY_LENGTH,
    MAX_INPUT_COUNT,
    MAX_INSTRUCTIONS_BYTES,
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_MAX_STEPS,
    MAX_MAX_TOKEN_BUDGET,
    MAX_MAX_TOKENS,
    MAX_MODEL_LENGTH,
    MAX_SKILL_ENTRIES,
    MAX_TEMPERATURE,
    MAX_TOOL_LIST_ENTRIES,
    REASONING_EFFORTS,
)
from agentworkers.virtualagent.errors import (
    InvalidKeyError,
    InvalidMapError,
    InvalidOverlayError,
    InvalidProfileError,
    TamperedBindingError,
    VirtualAgentError,
    nested,
)
from agentworkers.virtualagent.models import Binding, Overlay, Profile, ProfileMap
from agentworkers.virtualagent.normalization import (
    check_output_schema,
    normalize_and_hash,
    output_schema_json,
)
from agentworkers.virtualagent.text import is_blank, trim_space, utf8_len

_KEY_RE = re.compile(KEY_PATTERN)
_HEX_DIGEST_RE = re.compile(HEX_DIGEST_PATTERN)


def _too_long(text: str, limit: int) -> str | None:
    """The rule ``text`` breaks by exceeding ``limit`` bytes, if it does."""
    size = utf8_len(text)
    return f"{size} bytes exceeds the maximum {limit}" if size > limit else None


def validate_key(key: str) -> None:
    """A key is 1 to ``MAX_KEY_LENGTH`` bytes matching ``KEY_PATTERN``."""
    if not key:
        raise InvalidKeyError("key", "must not be empty")
    if rule := _too_long(key, MAX_KEY_LENGTH):
        raise InvalidKeyError("key", rule)
    if not _KEY_RE.fullmatch(key):
        raise InvalidKeyError("key", f"{key!r} must match {KEY_PATTERN}")


def _check_range(field: str, value: float, low: float, high: float) -> None:
    if math.isnan(value):
        raise InvalidOverlayError(field, "NaN is not a number")
    if value < low:
        raise InvalidOverlayError(field, f"{value} is below the minimum {low}")
    if value > high:
        raise InvalidOverlayError(field, f"{value} is above the maximum {high}")


def _check_names(
    error: type[VirtualAgentError], field: str, names: Sequence[str], max_entries: int | None
) -> None:
    """A name list: at most ``max_entries`` entries, each non-blank and bounded in bytes."""
    if max_entries is not None and len(names) > max_entries:
        raise error(field, f"{len(names)} entries exceeds the maximum {max_entries}")
    for index, name in enumerate(names):
        if is_blank(name):
            raise error(f"{field}[{index}]", "must not be blank")
        if rule := _too_long(name, MAX_ENTRY_LENGTH):
            raise error(f"{field}[{index}]", rule)


def validate_overlay(overlay: Overlay) -> None:
    """The overlay's bounded, narrow-only invariants; fields are rooted at ``overlay``."""
    if overlay.model is not None:
        model = trim_space(overlay.model)
        if not model:
            raise InvalidOverlayError("overlay.model", "must not be blank")
        if rule := _too_long(model, MAX_MODEL_LENGTH):
            raise InvalidOverlayError("overlay.model", rule)
    if overlay.temperature is not None:
        _check_range("overlay.temperature", overlay.temperature, 0, MAX_TEMPERATURE)
    if overlay.max_tokens is not None:
        _check_range("overlay.max_tokens", overlay.max_tokens, 1, MAX_MAX_TOKENS)
    effort = overlay.reasoning_effort
    if effort is not None and effort not in REASONING_EFFORTS:
        raise InvalidOverlayError(
            "overlay.reasoning_effort", f"{effort!r} is not one of {', '.join(REASONING_EFFORTS)}"
        )
    if overlay.skills is not None:
        _check_names(InvalidOverlayError, "overlay.skills", overlay.skills, MAX_SKILL_ENTRIES)
    for name in ("disabled_tools", "paused_servers"):
        names = getattr(overlay, name) or ()
        _check_names(InvalidOverlayError, f"overlay.{name}", names, MAX_TOOL_LIST_ENTRIES)
    if overlay.max_steps is not None:
        _check_range("overlay.max_steps", overlay.max_steps, 1, MAX_MAX_STEPS)
    if overlay.token_budget is not None:
        _check_range("overlay.token_budget", overlay.token_budget, 1, MAX_MAX_TOKEN_BUDGET)
    if rule := _too_long(overlay.instructions, MAX_INSTRUCTIONS_BYTES):
        raise InvalidOverlayError("overlay.instructions", rule)


def validate_profile(profile: Profile) -> None:
    """The profile envelope: key, label, parent, overlay, inputs and output schema.

    A bad key raises ``InvalidKeyError``; everything else ``InvalidProfileError``.
    """
    validate_key(profile.key)
    if rule := _too_long(profile.label, MAX_LABEL_LENGTH):
        raise InvalidProfileError("label", rule)
    if is_blank(profile.parent):
        raise InvalidProfileError("parent", "must not be blank")
    try:
        validate_overlay(profile.overlay)
    except InvalidOverlayError as exc:
        raise nested(exc, "", InvalidProfileError) from exc
    _check_names(InvalidProfileError, "input_patterns", profile.input_patterns or (), None)
    if not 0 <= profile.input_count <= MAX_INPUT_COUNT:
        raise InvalidProfileError(
            "input_count", f"{profile.input_count} is outside 0 to {MAX_INPUT_COUNT}"
        )
    if profile.input_disposition not in INPUT_DISPOSITIONS:
        raise InvalidProfileError(
            "input_disposition",
            f"{profile.input_disposition!r} is not one of "
            f"{', '.join(repr(d) for d in INPUT_DISPOSITIONS)}",
        )
    schema = profile.output_schema
    if schema is None:
        if profile.output_schema_hash:
            raise InvalidProfileError("output_schema_hash", "is set without an output_schema")
        return
    if not profile.output_schema_hash:
        check_output_schema(schema)
        return
    digest = sha256_hex(output_schema_json(schema))
    if profile.output_schema_hash != digest:
        raise InvalidProfileError(
            "output_schema_hash",
            f"{profile.output_schema_hash!r} does not match the output schema's digest {digest}",
        )


def validate_map(profile_map: ProfileMap) -> None:
    """The map: an owner, at most its cap of profiles, each valid, owned and unique.

    Any failure raises ``InvalidMapError``, its field rooted at ``profiles[i]`` for a
    member's failure.
    """
    owner = trim_space(profile_map.owner)
    if not owner:
        raise InvalidMapError("owner", "must not be blank")
    cap = profile_map.max_profiles if profile_map.max_profiles > 0 else DEFAULT_MAX_PROFILES
    if len(profile_map.profiles) > cap:
        raise InvalidMapError(
            "profiles", f"{len(profile_map.profiles)} profiles exceeds the maximum {cap}"
        )
    first_index: dict[str, int] = {}
    for index, profile in enumerate(profile_map.profiles):
        where = f"profiles[{index}]"
        try:
            validate_profile(profile)
        except VirtualAgentError as exc:
            raise nested(exc, where, InvalidMapError) from exc
        if profile.parent != owner:
            raise InvalidMapError(
                f"{where}.parent",
                f"{profile.parent!r} is not the owner {owner!r}: profiles are owned by one "
                "top-level agent and never recurse",
            )
        if profile.key in first_index:
            raise InvalidMapError(
                f"{where}.key",
                f"duplicate key {profile.key!r} (first at profiles[{first_index[profile.key]}])",
            )
        first_index[profile.key] = index


def _check_digest(field: str, value: str) -> None:
    if not _HEX_DIGEST_RE.fullmatch(value):
        raise TamperedBindingError(field, f"{value!r} is not a 64-hex SHA-256")


def validate_binding(binding: Binding) -> None:
    """The shape of a persisted binding, not yet its agreement with any map.

    Raises ``TamperedBindingError`` for a missing or malformed field,
    ``InvalidKeyError`` for a bad key, and for a sealed snapshot that is invalid the
    snapshot's own error (its field rooted at ``profile``), or ``TamperedBindingError``
    when the snapshot does not hash to ``profile_hash``.
    """
    if is_blank(binding.agent_id):
        raise TamperedBindingError("agent_id", "must not be blank")
    validate_key(binding.key)
    if rule := _too_long(binding.label, MAX_LABEL_LENGTH):
        raise TamperedBindingError("label", rule)
    for name in ("parent", "config_revision_id"):
        if is_blank(getattr(binding, name)):
            raise TamperedBindingError(name, "must not be blank")
    _check_digest("config_digest", binding.config_digest)
    if binding.parent != binding.agent_id:
        raise TamperedBindingError(
            "parent", f"{binding.parent!r} is not the agent {binding.agent_id!r}"
        )
    _check_digest("profile_hash", binding.profile_hash)
    if binding.profile is None:
        return
    try:
        snapshot, snapshot_hash = normalize_and_hash(binding.profile)
        validate_profile(snapshot)
    except VirtualAgentError as exc:
        raise nested(exc, "profile", type(exc)) from exc
    if snapshot_hash != binding.profile_hash:
        raise TamperedBindingError(
            "profile",
            f"the sealed snapshot hashes to {snapshot_hash[:12]}, not the pinned "
            f"profile_hash {binding.profile_hash[:12]}",
        )
