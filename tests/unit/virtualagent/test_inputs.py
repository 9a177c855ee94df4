"""A profile's input bounds: the canonical MIME type of a filename, and which patterns an
input matches (its filename's, or its MIME type's)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentworkers.virtualagent import (
    INPUT_DISPOSITIONS,
    INPUT_NAME_PATTERN,
    InvalidProfileError,
    Profile,
    is_canonical_name,
    matching_pattern,
    media_type,
    validate_profile,
)

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", fullmatch=True)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("notes.md", "text/markdown"),
        ("NOTES.MD", "text/markdown"),
        ("data.csv", "text/csv"),
        ("config.yaml", "application/yaml"),
        ("report.pdf", "application/pdf"),
        ("run.sh", "application/x-sh"),
        ("logs.tar.gz", "application/gzip"),
        ("README", "application/octet-stream"),
        ("blob.unknownext", "application/octet-stream"),
    ],
)
def test_the_media_type_follows_from_the_name(name: str, kind: str) -> None:
    assert media_type(name) == kind


def test_canonical_names() -> None:
    assert is_canonical_name("a.md") and is_canonical_name("x" * 255)
    for bad in ("", ".hidden", "..", "a/b", "a b", "é.md", "x" * 256, "-rf"):
        assert not is_canonical_name(bad), bad


@given(names)
def test_a_star_matches_every_input_and_no_pattern_none(name: str) -> None:
    assert matching_pattern(["*"], name) == "*"
    assert matching_pattern([], name) is None


@given(names)
def test_a_name_matches_itself_and_its_type_family(name: str) -> None:
    # The charset has no fnmatch special character: a name is its own literal pattern.
    assert re.fullmatch(INPUT_NAME_PATTERN, name)
    assert matching_pattern(["nothing-like-it/x", name], name) == name
    family = media_type(name).split("/")[0] + "/*"
    assert matching_pattern([family], name) == family


@given(names, st.sampled_from(["md", "csv", "txt", "json"]))
def test_an_extension_pattern_matches_exactly_that_extension(stem: str, extension: str) -> None:
    assert matching_pattern([f"*.{extension}"], f"{stem}.{extension}") is not None
    assert matching_pattern([f"*.{extension}"], f"{stem}.{extension}.sh") is None


def test_filenames_match_case_sensitively_and_types_case_insensitively() -> None:
    assert matching_pattern(["*.MD"], "notes.md") is None
    assert matching_pattern(["TEXT/*"], "notes.md") == "TEXT/*"
    assert matching_pattern(["text/markdown"], "run.sh") is None


def test_only_the_known_dispositions_validate() -> None:
    for disposition in INPUT_DISPOSITIONS:
        validate_profile(Profile(key="k", parent="top", input_disposition=disposition))
    with pytest.raises(InvalidProfileError) as refused:
        validate_profile(Profile(key="k", parent="top", input_disposition="attach"))
    assert refused.value.field == "input_disposition"
    assert "'attach' is not one of '', 'attachment', 'inline'" in str(refused.value)
