"""The model shapes: construction, strictness, refused fields, aliases, schema bounds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agentworkers.virtualagent import (
    HEX_DIGEST_PATTERN,
    KEY_PATTERN,
    MAX_ENTRY_LENGTH,
    MAX_INSTRUCTIONS_BYTES,
    MAX_MAX_TOKENS,
    MAX_SKILL_ENTRIES,
    MAX_TOOL_LIST_ENTRIES,
    Binding,
    Bounds,
    Overlay,
    Profile,
    ProfileMap,
)
from tests.unit.virtualagent.factories import make_binding, make_profile

FULL_OVERLAY: dict[str, Any] = {
    "model": "m",
    "temperature": 0.5,
    "max_tokens": 10,
    "reasoning_effort": "low",
    "skills": ["s"],
    "disabled_tools": ["t"],
    "paused_servers": ["p"],
    "max_steps": 3,
    "token_budget": 100,
    "instructions": "be brief",
}
CAMEL_OVERLAY_KEYS = {
    "model",
    "temperature",
    "maxTokens",
    "reasoningEffort",
    "skills",
    "disabledTools",
    "pausedServers",
    "maxSteps",
    "tokenBudget",
    "instructions",
}
WIDENING_FIELDS = [
    "providers",
    "provider",
    "hooks",
    "memory",
    "capabilities",
    "parent_profile",
    "parentProfile",
    "a2a",
    "a2a_target",
    "a2aTarget",
]


def _extra_forbidden(exc: ValidationError) -> set[str]:
    return {str(e["loc"][-1]) for e in exc.errors() if e["type"] == "extra_forbidden"}


@pytest.mark.parametrize("name", WIDENING_FIELDS)
def test_overlay_refuses_a_widening_field(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Overlay.model_validate({"model": "m", name: {"anything": True}})

    assert _extra_forbidden(caught.value) == {name}


@pytest.mark.parametrize("name", WIDENING_FIELDS)
def test_profile_refuses_a_widening_field_at_either_level(name: str) -> None:
    with pytest.raises(ValidationError):
        Profile.model_validate({"key": "k", name: []})
    with pytest.raises(ValidationError):
        Profile.model_validate({"key": "k", "overlay": {name: []}})


@pytest.mark.parametrize("model", [Overlay, Profile, ProfileMap, Binding])
def test_every_model_refuses_unknown_fields(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate({"surprise": 1})

    assert _extra_forbidden(caught.value) == {"surprise"}


def test_overlay_has_exactly_the_narrow_only_fields() -> None:
    assert set(Overlay.model_fields) == set(FULL_OVERLAY)


def test_snake_and_camel_construction_agree_and_dump_round_trips() -> None:
    snake = Overlay(**FULL_OVERLAY)
    camel = Overlay.model_validate(snake.model_dump(by_alias=True))

    assert set(snake.model_dump(by_alias=True)) == CAMEL_OVERLAY_KEYS
    assert camel == snake


def test_binding_uses_kubernetes_id_aliases() -> None:
    binding = make_binding(profile=make_profile())
    dumped = binding.model_dump(by_alias=True, mode="json")

    assert {"agentID", "configRevisionID", "configDigest", "profileHash"} <= set(dumped)
    assert dumped["profile"]["overlay"]["maxTokens"] == 4000
    assert Binding.model_validate(dumped) == binding


def test_profile_and_map_round_trip_through_camel_json() -> None:
    profile = make_profile(
        input_patterns=("*.csv",),
        input_count=2,
        input_disposition="attach",
        output_schema={"type": "object"},
    )
    profile_map = ProfileMap(owner="top", max_profiles=3, profiles=(profile,))
    dumped = profile_map.model_dump(by_alias=True, mode="json")

    assert set(dumped) == {"owner", "maxProfiles", "profiles"}
    assert {"inputPatterns", "inputCount", "inputDisposition", "outputSchema"} <= set(
        dumped["profiles"][0]
    )
    assert ProfileMap.model_validate(dumped) == profile_map


@pytest.mark.parametrize(
    ("model", "fields"),
    [
        (Overlay, {"max_tokens": "5"}),
        (Overlay, {"max_tokens": 5.0}),
        (Overlay, {"max_steps": True}),
        (Overlay, {"temperature": "0.5"}),
        (Overlay, {"temperature": True}),
        (Overlay, {"skills": "review"}),
        (Overlay, {"skills": [1]}),
        (Overlay, {"instructions": None}),
        (Profile, {"key": 5}),
        (Profile, {"input_count": "3"}),
        (Profile, {"output_schema": ["not", "an", "object"]}),
        (ProfileMap, {"max_profiles": "32"}),
    ],
)
def test_construction_does_not_coerce_types(model: type[BaseModel], fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model(**fields)


def test_an_integral_temperature_is_a_float() -> None:
    assert Overlay(temperature=1).temperature == 1.0
    assert isinstance(Overlay(temperature=1).temperature, float)


def test_construction_does_not_check_bounds() -> None:
    overlay = Overlay(
        model="",
        temperature=9.5,
        max_tokens=0,
        reasoning_effort="turbo",
        skills=[""] * (MAX_SKILL_ENTRIES + 1),
        instructions="x" * (MAX_INSTRUCTIONS_BYTES + 1),
    )
    profile = Profile(key="NOT A KEY", overlay=overlay, input_count=-1)

    assert profile.overlay.max_tokens == 0


def test_models_are_frozen() -> None:
    overlay = Overlay(model="m")

    with pytest.raises(ValidationError):
        overlay.model = "other"  # type: ignore[misc]


def test_lists_become_tuples() -> None:
    assert Overlay(skills=["b", "a"]).skills == ("b", "a")


def test_is_zero_for_the_identity_overlay_only() -> None:
    assert Overlay().is_zero()
    assert Overlay(instructions=" \n\t ", disabled_tools=(), paused_servers=()).is_zero()


@pytest.mark.parametrize("field", sorted(FULL_OVERLAY))
def test_is_zero_is_false_when_any_field_is_set(field: str) -> None:
    assert not Overlay(**{field: FULL_OVERLAY[field]}).is_zero()


def test_explicit_empty_skills_is_not_zero() -> None:
    assert not Overlay(skills=()).is_zero()


def test_by_key_keys_profiles_and_the_last_duplicate_wins() -> None:
    first, second, other = (
        make_profile("a", label="first"),
        make_profile("a", label="second"),
        make_profile("b"),
    )
    keyed = ProfileMap(owner="top", profiles=(first, other, second)).by_key()

    assert keyed == {"a": second, "b": other}


def _field_schema(model: type[BaseModel], alias: str) -> dict[str, Any]:
    """A field's schema, inside the anyOf pydantic wraps an optional field in."""
    node: dict[str, Any] = model.model_json_schema(by_alias=True)["properties"][alias]
    values: list[dict[str, Any]] = [b for b in node.get("anyOf", [node]) if b.get("type") != "null"]
    return values[0]


def test_schema_carries_the_bounds_on_the_value_not_the_optional_wrapper() -> None:
    assert _field_schema(Overlay, "maxTokens") == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_MAX_TOKENS,
    }
    assert _field_schema(Overlay, "skills") == {
        "type": "array",
        "maxItems": MAX_SKILL_ENTRIES,
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_ENTRY_LENGTH},
    }
    assert _field_schema(Overlay, "pausedServers")["maxItems"] == MAX_TOOL_LIST_ENTRIES
    assert _field_schema(Overlay, "reasoningEffort")["enum"] == ["off", "low", "medium", "high"]
    assert _field_schema(Overlay, "temperature")["maximum"] == 2
    assert _field_schema(Profile, "key")["pattern"] == KEY_PATTERN
    assert _field_schema(Binding, "configDigest")["pattern"] == HEX_DIGEST_PATTERN


def test_bounds_are_readable_from_the_field() -> None:
    bounds = Overlay.model_fields["instructions"].json_schema_extra

    assert isinstance(bounds, Bounds)
    assert bounds.keywords() == {"maxLength": MAX_INSTRUCTIONS_BYTES}


@pytest.mark.parametrize("model", [Overlay, Profile, ProfileMap, Binding])
def test_every_field_and_model_is_documented(model: type[BaseModel]) -> None:
    undocumented = [name for name, field in model.model_fields.items() if not field.description]

    assert undocumented == []
    assert model.__doc__
