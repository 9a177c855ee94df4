"""Set operations and clamps: an overlay can only narrow what the parent allows."""

from __future__ import annotations

import pytest

from agentworkers.virtualagent import (
    block_name,
    clamp_max,
    intersect_strings,
    overlay_clamp_max_steps,
    overlay_clamp_max_tokens,
    overlay_clamp_token_budget,
    union_strings,
)


def test_intersect_keeps_the_sorted_common_names() -> None:
    assert intersect_strings(["c", "a", "b"], ["d", "c", "b"]) == ("b", "c")
    assert intersect_strings(["a", "a", "b"], ["a"]) == ("a",)
    assert intersect_strings(["a"], ["b"]) == ()
    assert intersect_strings([], ["b"]) == ()


@pytest.mark.parametrize("keep", [None, [], ()])
def test_intersect_with_nothing_to_keep_means_no_narrowing(keep: list[str] | None) -> None:
    assert intersect_strings(["a", "b"], keep) is None


def test_union_is_the_sorted_set_of_both() -> None:
    assert union_strings(["x", "y"], ["z", "y"]) == ("x", "y", "z")
    assert union_strings(["b"], None) == ("b",)
    assert union_strings(None, [" a ", "a", ""]) == ("a",)
    assert union_strings([], []) is None
    assert union_strings(None, None) is None


@pytest.mark.parametrize(
    ("value", "parent", "expected"),
    [(100, 50, 50), (30, 50, 30), (50, 50, 50), (30, None, 30), (-1, 0, -1)],
)
def test_clamp_max(value: int, parent: int | None, expected: int) -> None:
    assert clamp_max(value, parent) == expected


@pytest.mark.parametrize(
    ("parent", "overlay", "expected"),
    [
        (4000, 8000, 4000),
        (4000, 3000, 3000),
        (4000, None, 4000),
        (None, 3000, 3000),
        (None, None, None),
        (4000, 0, 4000),
        (4000, -5, 4000),
        (None, 0, None),
    ],
)
def test_overlay_clamp_max_tokens(
    parent: int | None, overlay: int | None, expected: int | None
) -> None:
    assert overlay_clamp_max_tokens(parent, overlay) == expected


@pytest.mark.parametrize(
    ("parent", "overlay", "expected"),
    [
        (100, 200, 100),
        (100, 50, 50),
        (100, 100, 100),
        (100, None, 100),
        (100, 0, 100),
        (100, -1, 100),
    ],
)
def test_overlay_clamp_max_steps(parent: int, overlay: int | None, expected: int) -> None:
    assert overlay_clamp_max_steps(parent, overlay) == expected


@pytest.mark.parametrize(
    ("parent", "overlay", "expected"),
    [
        (0, 5000, 5000),  # no parent budget: the overlay introduces one
        (-1, 5000, 5000),
        (2000, 5000, 2000),
        (2000, 1000, 1000),
        (2000, None, 2000),
        (2000, 0, 2000),
        (0, None, 0),
        (0, -3, 0),
    ],
)
def test_overlay_clamp_token_budget(parent: int, overlay: int | None, expected: int) -> None:
    assert overlay_clamp_token_budget(parent, overlay) == expected


def test_block_name() -> None:
    assert block_name("reviewer") == "virtual_agent.reviewer"
