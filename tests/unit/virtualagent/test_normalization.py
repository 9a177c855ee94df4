"""Canonical forms: trimmed, sorted, de-duplicated, omission byte-compatible."""

from __future__ import annotations

import hashlib

from agentworkers.virtualagent import (
    Overlay,
    Profile,
    ProfileMap,
    normalize_map,
    normalize_overlay,
    normalize_profile,
)
from tests.unit.virtualagent.factories import make_profile


def test_overlay_lists_are_trimmed_sorted_and_deduplicated() -> None:
    overlay = normalize_overlay(
        Overlay(
            skills=[" b", "a ", "b", "\tc\n"],
            disabled_tools=["z", " y ", "z", ""],
            paused_servers=["s2", "s1", "s1"],
        )
    )

    assert overlay.skills == ("a", "b", "c")
    assert overlay.disabled_tools == ("y", "z")
    assert overlay.paused_servers == ("s1", "s2")


def test_empty_exclusion_lists_become_omitted() -> None:
    overlay = normalize_overlay(Overlay(disabled_tools=[], paused_servers=[" ", ""]))

    assert overlay.disabled_tools is None
    assert overlay.paused_servers is None
    assert overlay == Overlay()


def test_explicit_empty_skills_stays_present() -> None:
    assert normalize_overlay(Overlay(skills=[])).skills == ()
    assert normalize_overlay(Overlay(skills=[" ", "\n"])).skills == ()
    assert normalize_overlay(Overlay()).skills is None


def test_instructions_are_trimmed_as_go_trims() -> None:
    overlay = normalize_overlay(Overlay(instructions="\u3000\n  Be terse.\t\u2028 "))

    assert overlay.instructions == "Be terse."
    # U+001F is whitespace to Python but not to Go, so it stays.
    assert normalize_overlay(Overlay(instructions="\x1fx\x1f")).instructions == "\x1fx\x1f"


def test_scalars_are_kept_as_given() -> None:
    overlay = Overlay(
        model=" spaced ",
        temperature=0.25,
        max_tokens=7,
        reasoning_effort="low",
        max_steps=3,
        token_budget=9,
    )

    assert normalize_overlay(overlay) == overlay


def test_profile_envelope_is_trimmed() -> None:
    profile = normalize_profile(
        Profile(
            key=" reviewer\n",
            label="  Reviewer ",
            parent="\ttop ",
            input_patterns=["b/*", " a/* ", "b/*", ""],
            input_count=2,
            input_disposition=" attach ",
        )
    )

    assert (profile.key, profile.label, profile.parent) == ("reviewer", "Reviewer", "top")
    assert profile.input_patterns == ("a/*", "b/*")
    assert profile.input_count == 2
    assert profile.input_disposition == "attach"
    assert normalize_profile(Profile(key="k", input_patterns=[])).input_patterns is None


def test_output_schema_hash_is_the_canonical_json_digest() -> None:
    schema = {"type": "object", "properties": {"b": {"maximum": 1.0}, "a": {}}}
    canonical = b'{"properties":{"a":{},"b":{"maximum":1}},"type":"object"}'

    profile = normalize_profile(Profile(key="k", output_schema=schema, output_schema_hash="stale"))

    assert profile.output_schema_hash == hashlib.sha256(canonical).hexdigest()
    assert profile.output_schema == schema
    assert normalize_profile(Profile(key="k", output_schema_hash="stale")).output_schema_hash == ""


def test_normalised_profile_shares_no_mutable_value() -> None:
    schema = {"properties": {"a": {"type": "string"}}}
    original = Profile(key="k", output_schema=schema)
    normal = normalize_profile(original)

    schema["properties"]["a"]["type"] = "number"

    assert normal.output_schema == {"properties": {"a": {"type": "string"}}}


def test_map_is_sorted_by_key_and_the_last_duplicate_wins() -> None:
    profile_map = normalize_map(
        ProfileMap(
            owner="  top-agent ",
            max_profiles=5,
            profiles=(
                make_profile("b"),
                make_profile("a", label="first"),
                make_profile(" ", label="blank key"),
                make_profile("a ", label="second"),
            ),
        )
    )

    assert profile_map.owner == "top-agent"
    assert profile_map.max_profiles == 5
    assert [p.key for p in profile_map.profiles] == ["a", "b"]
    assert profile_map.profiles[0].label == "second"


def test_map_profiles_are_normalised() -> None:
    profile_map = normalize_map(ProfileMap(owner="o", profiles=(make_profile(label=" x "),)))

    assert profile_map.profiles[0].label == "x"
