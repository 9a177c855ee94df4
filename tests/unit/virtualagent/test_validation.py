"""Every bound at its edge: the last valid value passes, the first invalid one fails,
with the seed's error, the failing field and the rule in the message."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentworkers.virtualagent import (
    DEFAULT_MAX_PROFILES,
    MAX_ENTRY_LENGTH,
    MAX_INSTRUCTIONS_BYTES,
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_MAX_STEPS,
    MAX_MAX_TOKEN_BUDGET,
    MAX_MAX_TOKENS,
    MAX_MODEL_LENGTH,
    MAX_SKILL_ENTRIES,
    MAX_TOOL_LIST_ENTRIES,
    InvalidKeyError,
    InvalidMapError,
    InvalidOverlayError,
    InvalidProfileError,
    Overlay,
    TamperedBindingError,
    VirtualAgentError,
    profile_hash,
    validate_binding,
    validate_key,
    validate_map,
    validate_overlay,
    validate_profile,
)
from agentworkers.virtualagent.canonical import canonical_json, sha256_hex
from tests.unit.virtualagent.factories import OWNER, make_binding, make_map, make_profile

E_ACUTE = "é"  # two UTF-8 bytes
KANJI = "日"  # three UTF-8 bytes


def _fails(
    error: type[VirtualAgentError], field: str, rule_part: str, call: Any, *args: Any
) -> VirtualAgentError:
    with pytest.raises(error) as caught:
        call(*args)
    assert type(caught.value) is error
    assert caught.value.field == field
    assert rule_part in caught.value.rule
    assert str(caught.value) == (f"{field}: {caught.value.rule}" if field else caught.value.rule)
    return caught.value


# Keys


@pytest.mark.parametrize(
    "key",
    ["a", "0", "a.b_c-d", "reviewer", "a" * MAX_KEY_LENGTH, "0" + "-" * (MAX_KEY_LENGTH - 1)],
)
def test_valid_keys(key: str) -> None:
    validate_key(key)


def test_empty_key() -> None:
    _fails(InvalidKeyError, "key", "must not be empty", validate_key, "")


def test_key_one_byte_over() -> None:
    _fails(InvalidKeyError, "key", "129 bytes exceeds the maximum 128", validate_key, "a" * 129)


def test_key_length_is_counted_in_bytes() -> None:
    # 127 + 2 bytes: the length rule fires before the charset rule.
    _fails(InvalidKeyError, "key", "129 bytes", validate_key, "a" * 127 + E_ACUTE)


@pytest.mark.parametrize("key", ["A", "-a", ".a", "_a", "a b", " a", "a\n", "ä", "a/b", "a:b"])
def test_key_outside_the_charset(key: str) -> None:
    _fails(InvalidKeyError, "key", "must match ^[a-z0-9][a-z0-9._-]*$", validate_key, key)


# Overlay


def _overlay_fails(field: str, rule_part: str, **fields: Any) -> None:
    _fails(InvalidOverlayError, f"overlay.{field}", rule_part, validate_overlay, Overlay(**fields))


def test_the_zero_overlay_is_valid() -> None:
    validate_overlay(Overlay())


def test_model_at_its_byte_edge() -> None:
    validate_overlay(Overlay(model="m" * MAX_MODEL_LENGTH))
    validate_overlay(Overlay(model=E_ACUTE * (MAX_MODEL_LENGTH // 2)))
    # Trimmed before measuring.
    validate_overlay(Overlay(model="  " + "m" * MAX_MODEL_LENGTH + "\n"))
    _overlay_fails("model", "129 bytes exceeds the maximum 128", model="m" * 129)
    _overlay_fails("model", "129 bytes", model=E_ACUTE * 64 + "m")


@pytest.mark.parametrize("model", ["", " ", "\t\n\u3000"])
def test_blank_model(model: str) -> None:
    _overlay_fails("model", "must not be blank", model=model)


@pytest.mark.parametrize("value", [0.0, -0.0, 1e-300, 0.7, 2.0, 2])
def test_temperature_inside(value: float) -> None:
    validate_overlay(Overlay(temperature=value))


def test_temperature_edges() -> None:
    _overlay_fails("temperature", "is below the minimum 0", temperature=-1e-9)
    _overlay_fails("temperature", "is above the maximum 2", temperature=math.nextafter(2, 3))
    _overlay_fails("temperature", "is above the maximum 2", temperature=math.inf)
    _overlay_fails("temperature", "below the minimum", temperature=-math.inf)
    _overlay_fails("temperature", "NaN is not a number", temperature=math.nan)


@pytest.mark.parametrize(
    ("field", "maximum"),
    [
        ("max_tokens", MAX_MAX_TOKENS),
        ("max_steps", MAX_MAX_STEPS),
        ("token_budget", MAX_MAX_TOKEN_BUDGET),
    ],
)
def test_limit_edges(field: str, maximum: int) -> None:
    validate_overlay(Overlay(**{field: 1}))
    validate_overlay(Overlay(**{field: maximum}))
    _overlay_fails(field, "0 is below the minimum 1", **{field: 0})
    _overlay_fails(field, "-5 is below the minimum 1", **{field: -5})
    _overlay_fails(field, f"{maximum + 1} is above the maximum {maximum}", **{field: maximum + 1})


def test_message_names_field_and_rule() -> None:
    with pytest.raises(InvalidOverlayError) as caught:
        validate_overlay(Overlay(max_tokens=0))

    assert str(caught.value) == "overlay.max_tokens: 0 is below the minimum 1"
    assert caught.value.reason == "InvalidOverlay"


@pytest.mark.parametrize("effort", ["off", "low", "medium", "high"])
def test_reasoning_effort_values(effort: str) -> None:
    validate_overlay(Overlay(reasoning_effort=effort))


@pytest.mark.parametrize("effort", ["", "turbo", "Low", " low", "none"])
def test_reasoning_effort_outside_the_set(effort: str) -> None:
    _overlay_fails(
        "reasoning_effort", "is not one of off, low, medium, high", reasoning_effort=effort
    )


@pytest.mark.parametrize(
    ("field", "max_entries"),
    [
        ("skills", MAX_SKILL_ENTRIES),
        ("disabled_tools", MAX_TOOL_LIST_ENTRIES),
        ("paused_servers", MAX_TOOL_LIST_ENTRIES),
    ],
)
def test_list_edges(field: str, max_entries: int) -> None:
    validate_overlay(Overlay(**{field: [f"n{i}" for i in range(max_entries)]}))
    validate_overlay(Overlay(**{field: ["x" * MAX_ENTRY_LENGTH]}))
    validate_overlay(Overlay(**{field: [KANJI * 66 + "ab"]}))  # 200 bytes
    _overlay_fails(
        field,
        f"{max_entries + 1} entries exceeds the maximum {max_entries}",
        **{field: [f"n{i}" for i in range(max_entries + 1)]},
    )
    # Counted as written: duplicates count until normalisation folds them.
    _overlay_fails(field, "entries exceeds", **{field: ["same"] * (max_entries + 1)})
    _overlay_fails(f"{field}[1]", "must not be blank", **{field: ["ok", " \t"]})
    _overlay_fails(f"{field}[0]", "must not be blank", **{field: [""]})
    _overlay_fails(
        f"{field}[0]",
        "201 bytes exceeds the maximum 200",
        **{field: ["x" * (MAX_ENTRY_LENGTH + 1)]},
    )
    _overlay_fails(f"{field}[0]", "201 bytes", **{field: [KANJI * 67]})
    # Measured as written, surrounding whitespace included.
    _overlay_fails(f"{field}[0]", "201 bytes", **{field: [" " + "x" * MAX_ENTRY_LENGTH]})


def test_explicit_empty_skills_is_valid() -> None:
    validate_overlay(Overlay(skills=()))


def test_instructions_edges() -> None:
    validate_overlay(Overlay(instructions="x" * MAX_INSTRUCTIONS_BYTES))
    validate_overlay(Overlay(instructions=E_ACUTE * (MAX_INSTRUCTIONS_BYTES // 2)))
    _overlay_fails(
        "instructions",
        "16385 bytes exceeds the maximum 16384",
        instructions="x" * (MAX_INSTRUCTIONS_BYTES + 1),
    )
    _overlay_fails(
        "instructions", "16385 bytes", instructions=E_ACUTE * (MAX_INSTRUCTIONS_BYTES // 2) + "x"
    )
    # Measured before trimming, as written.
    _overlay_fails("instructions", "16385 bytes", instructions=" " * (MAX_INSTRUCTIONS_BYTES + 1))


def test_overlay_checks_in_the_seed_order() -> None:
    _overlay_fails("model", "blank", model=" ", temperature=5, max_tokens=0)
    _overlay_fails("temperature", "above", temperature=5, max_tokens=0)
    _overlay_fails("max_tokens", "below", max_tokens=0, max_steps=0)
    _overlay_fails("skills[0]", "blank", skills=[""], disabled_tools=[""])
    _overlay_fails("disabled_tools[0]", "blank", disabled_tools=[""], paused_servers=[""])
    _overlay_fails("max_steps", "below", max_steps=0, token_budget=0)


# Profiles


def test_the_factory_profile_is_valid() -> None:
    validate_profile(make_profile())


def test_profile_key_error_is_an_invalid_key() -> None:
    _fails(InvalidKeyError, "key", "must not be empty", validate_profile, make_profile(key=""))


def test_label_edges() -> None:
    validate_profile(make_profile(label=""))
    validate_profile(make_profile(label="x" * MAX_LABEL_LENGTH))
    validate_profile(make_profile(label=E_ACUTE * (MAX_LABEL_LENGTH // 2)))
    _fails(
        InvalidProfileError,
        "label",
        "201 bytes exceeds the maximum 200",
        validate_profile,
        make_profile(label="x" * 201),
    )
    _fails(
        InvalidProfileError,
        "label",
        "201 bytes",
        validate_profile,
        make_profile(label=E_ACUTE * 100 + "x"),
    )


@pytest.mark.parametrize("parent", ["", " ", "\n\t"])
def test_blank_parent(parent: str) -> None:
    _fails(
        InvalidProfileError,
        "parent",
        "must not be blank",
        validate_profile,
        make_profile(parent=parent),
    )


def test_overlay_failure_is_an_invalid_profile_naming_the_overlay_field() -> None:
    error = _fails(
        InvalidProfileError,
        "overlay.max_tokens",
        "0 is below the minimum 1",
        validate_profile,
        make_profile(overlay=Overlay(max_tokens=0)),
    )
    assert isinstance(error.__cause__, InvalidOverlayError)


def test_input_patterns_and_count() -> None:
    validate_profile(make_profile(input_patterns=("*.csv", "x" * MAX_ENTRY_LENGTH), input_count=0))
    validate_profile(make_profile(input_count=2**63 - 1))
    _fails(
        InvalidProfileError,
        "input_patterns[1]",
        "must not be blank",
        validate_profile,
        make_profile(input_patterns=("*.csv", " ")),
    )
    _fails(
        InvalidProfileError,
        "input_patterns[0]",
        "201 bytes",
        validate_profile,
        make_profile(input_patterns=("x" * 201,)),
    )
    _fails(
        InvalidProfileError,
        "input_count",
        "-1 is outside",
        validate_profile,
        make_profile(input_count=-1),
    )
    _fails(
        InvalidProfileError,
        "input_count",
        "is outside",
        validate_profile,
        make_profile(input_count=2**63),
    )


def test_output_schema_hash_must_match_the_schema() -> None:
    schema = {"type": "object", "properties": {"b": {}, "a": {"maximum": 1.0}}}
    digest = sha256_hex(canonical_json(schema))

    validate_profile(make_profile(output_schema=schema))
    validate_profile(make_profile(output_schema=schema, output_schema_hash=digest))
    _fails(
        InvalidProfileError,
        "output_schema_hash",
        "does not match the output schema's digest",
        validate_profile,
        make_profile(output_schema=schema, output_schema_hash="0" * 64),
    )
    _fails(
        InvalidProfileError,
        "output_schema_hash",
        "is set without an output_schema",
        validate_profile,
        make_profile(output_schema_hash=digest),
    )


@pytest.mark.parametrize(
    "schema",
    [{"a": math.nan}, {"a": math.inf}, {"a": object()}, {"a": {1: "x"}}, {"a": 10**400}],
)
@pytest.mark.parametrize("schema_hash", ["", "0" * 64])
def test_output_schema_must_be_json(schema: dict[str, Any], schema_hash: str) -> None:
    _fails(
        InvalidProfileError,
        "output_schema",
        "is not representable as JSON",
        validate_profile,
        make_profile(output_schema=schema, output_schema_hash=schema_hash),
    )


# Maps


def test_a_valid_map() -> None:
    validate_map(make_map(make_profile("a"), make_profile("b")))
    validate_map(make_map())


@pytest.mark.parametrize("owner", ["", "  "])
def test_map_without_an_owner(owner: str) -> None:
    _fails(InvalidMapError, "owner", "must not be blank", validate_map, make_map(owner=owner))


@pytest.mark.parametrize(
    ("max_profiles", "cap"),
    [(0, DEFAULT_MAX_PROFILES), (-1, DEFAULT_MAX_PROFILES), (2, 2), (40, 40)],
)
def test_map_cap_edges(max_profiles: int, cap: int) -> None:
    profiles = [make_profile(f"p{i}") for i in range(cap + 1)]

    validate_map(make_map(*profiles[:cap], max_profiles=max_profiles))
    _fails(
        InvalidMapError,
        "profiles",
        f"{cap + 1} profiles exceeds the maximum {cap}",
        validate_map,
        make_map(*profiles, max_profiles=max_profiles),
    )


def test_map_member_failures_are_invalid_map_errors_rooted_at_the_member() -> None:
    bad_overlay = make_profile("b", overlay=Overlay(token_budget=0))
    error = _fails(
        InvalidMapError,
        "profiles[1].overlay.token_budget",
        "0 is below the minimum 1",
        validate_map,
        make_map(make_profile("a"), bad_overlay),
    )
    assert isinstance(error.__cause__, InvalidProfileError)
    _fails(
        InvalidMapError,
        "profiles[0].key",
        "must match",
        validate_map,
        make_map(make_profile("Bad")),
    )


def test_map_member_parent_must_be_the_owner() -> None:
    _fails(
        InvalidMapError,
        "profiles[0].parent",
        "'other-agent' is not the owner 'top-agent'",
        validate_map,
        make_map(make_profile(parent="other-agent")),
    )
    # The owner is trimmed; the parent is compared as written.
    validate_map(make_map(make_profile(), owner=f"  {OWNER} "))
    _fails(
        InvalidMapError,
        "profiles[0].parent",
        "is not the owner",
        validate_map,
        make_map(make_profile(parent=f" {OWNER}")),
    )


def test_map_refuses_a_duplicate_key() -> None:
    _fails(
        InvalidMapError,
        "profiles[2].key",
        "duplicate key 'a' (first at profiles[0])",
        validate_map,
        make_map(make_profile("a"), make_profile("b"), make_profile("a", label="again")),
    )


def test_map_checks_a_member_before_its_parent_before_duplicates() -> None:
    invalid_and_foreign = make_profile("a", parent="other", overlay=Overlay(max_steps=0))
    _fails(
        InvalidMapError,
        "profiles[1].overlay.max_steps",
        "below",
        validate_map,
        make_map(make_profile("a"), invalid_and_foreign),
    )
    _fails(
        InvalidMapError,
        "profiles[1].parent",
        "is not the owner",
        validate_map,
        make_map(make_profile("a"), make_profile("a", parent="other")),
    )


# Bindings


def test_a_well_shaped_binding() -> None:
    validate_binding(make_binding())
    validate_binding(make_binding(config_digest="ABCDEF0123456789" * 4))


@pytest.mark.parametrize(
    ("fields", "error", "field", "rule_part"),
    [
        ({"agent_id": " "}, TamperedBindingError, "agent_id", "must not be blank"),
        ({"key": "UPPER"}, InvalidKeyError, "key", "must match"),
        ({"key": ""}, InvalidKeyError, "key", "must not be empty"),
        ({"label": "x" * 201}, TamperedBindingError, "label", "201 bytes exceeds the maximum 200"),
        ({"parent": ""}, TamperedBindingError, "parent", "must not be blank"),
        (
            {"config_revision_id": ""},
            TamperedBindingError,
            "config_revision_id",
            "must not be blank",
        ),
        (
            {"config_digest": "a" * 63},
            TamperedBindingError,
            "config_digest",
            "is not a 64-hex SHA-256",
        ),
        ({"config_digest": "a" * 65}, TamperedBindingError, "config_digest", "is not a 64-hex"),
        ({"config_digest": "z" * 64}, TamperedBindingError, "config_digest", "is not a 64-hex"),
        ({"config_digest": ""}, TamperedBindingError, "config_digest", "is not a 64-hex"),
        (
            {"parent": "other"},
            TamperedBindingError,
            "parent",
            "'other' is not the agent 'top-agent'",
        ),
        ({"profile_hash": "abc"}, TamperedBindingError, "profile_hash", "is not a 64-hex SHA-256"),
        ({"profile_hash": "g" * 64}, TamperedBindingError, "profile_hash", "is not a 64-hex"),
    ],
)
def test_malformed_bindings(
    fields: dict[str, Any], error: type[VirtualAgentError], field: str, rule_part: str
) -> None:
    _fails(error, field, rule_part, validate_binding, make_binding(**fields))


def test_binding_label_edge_in_bytes() -> None:
    validate_binding(make_binding(label=E_ACUTE * 100))
    _fails(
        TamperedBindingError,
        "label",
        "201 bytes",
        validate_binding,
        make_binding(label=E_ACUTE * 100 + "x"),
    )


def test_binding_checks_in_the_seed_order() -> None:
    _fails(
        TamperedBindingError,
        "agent_id",
        "blank",
        validate_binding,
        make_binding(agent_id="", key=""),
    )
    _fails(InvalidKeyError, "key", "empty", validate_binding, make_binding(key="", parent=""))
    _fails(
        TamperedBindingError,
        "parent",
        "blank",
        validate_binding,
        make_binding(parent="", config_digest=""),
    )
    _fails(
        TamperedBindingError,
        "config_digest",
        "64-hex",
        validate_binding,
        make_binding(config_digest="", parent="x"),
    )
    _fails(
        TamperedBindingError,
        "parent",
        "is not the agent",
        validate_binding,
        make_binding(parent="x", profile_hash=""),
    )


def test_a_sealed_snapshot_must_be_valid_and_hash_to_the_pin() -> None:
    snapshot = make_profile()
    validate_binding(make_binding(profile=snapshot, profile_hash=profile_hash(snapshot)))

    _fails(
        TamperedBindingError,
        "profile",
        "the sealed snapshot hashes to",
        validate_binding,
        make_binding(profile=snapshot, profile_hash="c" * 64),
    )
    invalid = make_profile(overlay=Overlay(max_tokens=MAX_MAX_TOKENS + 1))
    _fails(
        InvalidProfileError,
        "profile.overlay.max_tokens",
        "above the maximum",
        validate_binding,
        make_binding(profile=invalid, profile_hash=profile_hash(invalid)),
    )
    bad_key = make_profile(key="Bad")
    _fails(
        InvalidKeyError,
        "profile.key",
        "must match",
        validate_binding,
        make_binding(profile=bad_key, profile_hash=profile_hash(bad_key)),
    )
