"""The Go-compatible JSON encoder on the cases the golden vectors cannot carry."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentworkers.virtualagent import InvalidProfileError, Overlay, Profile, profile_hash
from agentworkers.virtualagent.canonical import canonical_json, format_float


def test_generic_values() -> None:
    value = {"z": [1, 2.5, True, False, None], "a": ("t",), "é": {}, "Z": "<&>"}

    assert (
        canonical_json(value)
        == ('{"Z":"\\u003c\\u0026\\u003e","a":["t"],"z":[1,2.5,true,false,null],"é":{}}').encode()
    )


def test_keys_sort_bytewise() -> None:
    assert canonical_json({"é": 1, "z": 2, "Z": 3, "😀": 4, "\uffff": 5}) == (
        '{"Z":3,"z":2,"é":1,"\uffff":5,"😀":4}'.encode()
    )


def test_integers_print_as_go_prints_their_float64() -> None:
    assert canonical_json([2**53, 2**53 + 1, -(2**53) - 1, 10**21, 10**20]) == (
        b"[9007199254740992,9007199254740992,-9007199254740992,1e+21,100000000000000000000]"
    )


def test_a_lone_surrogate_is_the_replacement_character() -> None:
    assert canonical_json({"\ud800": "a\udfffb"}) == '{"\ufffd":"a\ufffdb"}'.encode()


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, 10**400, {1: "x"}, {"a": object()}, {"a": {1, 2}}, b"raw"],
)
def test_values_json_cannot_carry_are_refused(value: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


def test_negative_zero_keeps_its_sign() -> None:
    assert format_float(-0.0) == "-0"
    assert format_float(0.0) == "0"


def test_profile_hash_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(InvalidProfileError) as caught:
        profile_hash(Profile(key="k", overlay=Overlay(temperature=math.nan)))
    assert "cannot be hashed" in str(caught.value)

    with pytest.raises(InvalidProfileError) as caught:
        profile_hash(Profile(key="k", output_schema={"a": math.inf}))
    assert caught.value.field == "output_schema"
