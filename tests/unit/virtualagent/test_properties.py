"""Properties over generated profiles: canonical forms are stable, and the hash sees
content, never order."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentworkers.virtualagent import (
    INPUT_DISPOSITIONS,
    KEY_PATTERN,
    MAX_MAX_STEPS,
    MAX_MAX_TOKEN_BUDGET,
    MAX_MAX_TOKENS,
    REASONING_EFFORTS,
    Overlay,
    Profile,
    ProfileMap,
    VirtualAgentError,
    normalize_map,
    normalize_profile,
    profile_hash,
    validate_profile,
)
from agentworkers.virtualagent.canonical import canonical_json

settings.register_profile("virtualagent", max_examples=40, deadline=None)
settings.load_profile("virtualagent")

# Surrogates are not text; everything else is fair game, whitespace Go trims included.
chars = st.characters(exclude_categories=["Cs"])
padding = st.text(alphabet=" \t\n\u3000\x85\x1f", max_size=2)
padded = st.builds(lambda a, b, c: a + b + c, padding, st.text(chars, max_size=8), padding)
name_lists = st.lists(padded, max_size=5)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(chars, max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(chars, max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
schemas = st.none() | st.dictionaries(st.text(chars, max_size=4), json_values, max_size=4)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


overlays = st.builds(
    Overlay,
    model=optional(padded),
    temperature=optional(st.floats(-1, 3)),
    max_tokens=optional(st.integers(-1, MAX_MAX_TOKENS + 1)),
    reasoning_effort=optional(st.sampled_from([*REASONING_EFFORTS, "turbo"])),
    skills=optional(name_lists),
    disabled_tools=optional(name_lists),
    paused_servers=optional(name_lists),
    max_steps=optional(st.integers(-1, MAX_MAX_STEPS + 1)),
    token_budget=optional(st.integers(-1, MAX_MAX_TOKEN_BUDGET + 1)),
    instructions=padded,
)
profiles = st.builds(
    Profile,
    key=padded,
    label=padded,
    parent=padded,
    overlay=overlays,
    input_patterns=optional(name_lists),
    # Below 2**53: past it Go's float64 round trip (and so the hash) cannot tell n from n+1.
    input_count=st.integers(-1, 2**53 - 1),
    input_disposition=padded,
    output_schema=schemas,
)

entries = st.text(chars, min_size=1, max_size=40).filter(str.strip)
valid_profiles = st.builds(
    Profile,
    key=st.from_regex(KEY_PATTERN.replace("*", "{0,30}"), fullmatch=True),
    label=st.text(chars, max_size=50),
    parent=entries,
    overlay=st.builds(
        Overlay,
        model=optional(entries),
        temperature=optional(st.floats(0, 2)),
        max_tokens=optional(st.integers(1, MAX_MAX_TOKENS)),
        reasoning_effort=optional(st.sampled_from(REASONING_EFFORTS)),
        skills=optional(st.lists(entries, max_size=5)),
        disabled_tools=optional(st.lists(entries, max_size=5)),
        paused_servers=optional(st.lists(entries, max_size=5)),
        max_steps=optional(st.integers(1, MAX_MAX_STEPS)),
        token_budget=optional(st.integers(1, MAX_MAX_TOKEN_BUDGET)),
        instructions=st.text(chars, max_size=200),
    ),
    input_patterns=optional(st.lists(entries, max_size=5)),
    input_count=st.integers(0, 1000),
    input_disposition=st.sampled_from(INPUT_DISPOSITIONS),
    output_schema=schemas,
)


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's keys inserted in reverse order."""
    if isinstance(value, dict):
        return {key: _reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(item) for item in value]
    return value


def _shuffled(names: tuple[str, ...] | None) -> tuple[str, ...] | None:
    # Reversed, with every name repeated: a set does not see either.
    return None if names is None else tuple(reversed(names)) + names


def _same_content(profile: Profile) -> Profile:
    overlay = profile.overlay
    return profile.model_copy(
        update={
            "overlay": overlay.model_copy(
                update={
                    name: _shuffled(getattr(overlay, name))
                    for name in ("skills", "disabled_tools", "paused_servers")
                }
            ),
            "input_patterns": _shuffled(profile.input_patterns),
            "output_schema": _reordered(profile.output_schema),
        }
    )


@given(profiles)
def test_normalisation_is_idempotent(profile: Profile) -> None:
    once = normalize_profile(profile)

    assert normalize_profile(once) == once
    assert profile_hash(once) == profile_hash(profile)


@given(st.lists(profiles, max_size=4), padded)
def test_map_normalisation_is_idempotent(members: list[Profile], owner: str) -> None:
    once = normalize_map(ProfileMap(owner=owner, profiles=tuple(members)))

    assert normalize_map(once) == once


@given(profiles)
def test_hash_ignores_list_and_key_order(profile: Profile) -> None:
    assert profile_hash(_same_content(profile)) == profile_hash(profile)


def _mutations(profile: Profile) -> dict[str, Profile]:
    normal = normalize_profile(profile)
    overlay = normal.overlay
    return {
        "key": profile.model_copy(update={"key": normal.key + "x"}),
        "label": profile.model_copy(update={"label": normal.label + "!"}),
        "input_count": profile.model_copy(update={"input_count": profile.input_count + 1}),
        "max_tokens": profile.model_copy(
            update={
                "overlay": overlay.model_copy(update={"max_tokens": (overlay.max_tokens or 0) + 1})
            }
        ),
        "skills": profile.model_copy(
            update={
                "overlay": overlay.model_copy(
                    update={"skills": (*(overlay.skills or ()), "\x00new")}
                )
            }
        ),
        "output_schema": profile.model_copy(
            update={"output_schema": {**(profile.output_schema or {}), "\x00new": 1}}
        ),
    }


@given(
    profiles,
    st.sampled_from(["key", "label", "input_count", "max_tokens", "skills", "output_schema"]),
)
def test_hash_changes_with_content(profile: Profile, field: str) -> None:
    assert profile_hash(_mutations(profile)[field]) != profile_hash(profile)


@given(valid_profiles)
def test_a_normalised_valid_profile_revalidates(profile: Profile) -> None:
    try:
        validate_profile(profile)
    except VirtualAgentError:
        assume(False)

    validate_profile(normalize_profile(profile))


@given(json_values)
def test_canonical_json_is_json_of_the_same_value(value: Any) -> None:
    # Every number is a float64 in the canonical form, so compare as floats.
    assert json.loads(canonical_json(value), parse_int=float) == value
