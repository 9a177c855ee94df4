"""Python's canonical JSON and hash match the Go seed's byte for byte.

The vectors come from hack/golden, a Go program declaring the seed's shapes and
hashing as the seed does; see its doc comment to regenerate them.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from agentworkers.virtualagent import Profile, normalize_profile, profile_hash
from agentworkers.virtualagent.canonical import canonical_json, format_float
from agentworkers.virtualagent.normalization import profile_canonical_json
from agentworkers.virtualagent.text import trim_space

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "golden_vectors.json").read_text(encoding="utf-8")
)


def _name(vector: dict[str, Any]) -> str:
    return str(vector["name"])


@pytest.mark.parametrize("vector", VECTORS["profiles"], ids=_name)
def test_profile_canonical_json_and_hash_match_go(vector: dict[str, Any]) -> None:
    profile = Profile.model_validate(vector["input"])

    assert normalize_profile(profile) == profile, "vectors are of normalised profiles"
    assert profile_canonical_json(profile) == vector["canonical"].encode("utf-8")
    assert profile_hash(profile) == vector["hash"]


def test_vectors_cover_the_cases_the_port_can_get_wrong() -> None:
    canonical = {v["name"]: v["canonical"] for v in VECTORS["profiles"]}

    assert canonical["empty"] == '{"key":"","overlay":{}}'
    assert '"skills":[]' in canonical["explicit-empty-skills"]
    assert "skills" not in canonical["minimal"]
    assert "\\u003cb\\u003e\\u0026" in canonical["html-and-controls"]
    assert "\\u2028" in canonical["html-and-controls"]
    assert "日本" in canonical["non-ascii"]
    assert '"temperature":1e-7' in canonical["temperature-1e-7"]
    assert '"temperature":1e+21' in canonical["temperature-large-out-of-bounds"]
    assert '"input_count":9007199254740992' in canonical["input-count-beyond-2-53"]
    assert '"output_schema":{}' in canonical["output-schema-empty-object"]


def test_float_formatting_matches_go() -> None:
    mismatches = []
    for vector in VECTORS["floats"]:
        (value,) = struct.unpack(">d", bytes.fromhex(vector["bits"]))
        # Directly, and through the encoder, which prints most floats via json.dumps.
        printed = (
            format_float(value),
            canonical_json(value).decode(),
            canonical_json([value]).decode(),
        )
        if printed != (vector["json"], vector["json"], f"[{vector['json']}]"):
            mismatches.append((vector["json"], printed))

    assert len(VECTORS["floats"]) > 500
    assert mismatches == []


def test_string_escaping_matches_go() -> None:
    mismatches = []
    for vector in VECTORS["strings"]:
        text = bytes.fromhex(vector["utf8_hex"]).decode("utf-8")
        if canonical_json(text) != vector["json"].encode("utf-8"):
            mismatches.append((vector["json"], canonical_json(text)))

    assert len(VECTORS["strings"]) > 128
    assert mismatches == []


def test_trim_matches_go_strings_trim_space() -> None:
    mismatches = []
    for vector in VECTORS["trim"]:
        text = bytes.fromhex(vector["utf8_hex"]).decode("utf-8")
        expected = bytes.fromhex(vector["trimmed_hex"]).decode("utf-8")
        if trim_space(text) != expected:
            mismatches.append((text, expected, trim_space(text)))

    assert mismatches == []
