"""The suite as the Makefile runs it: `make test` runs every test once (the slow ones too),
`make unit` the fast ones; no marker selects nothing (pytest's exit code 5)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).parents[2]


def recipe(target: str) -> list[str]:
    """The commands of a Makefile target."""
    text = (REPO / "Makefile").read_text()
    found = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
    assert found, target
    return [line.strip() for line in found.group(1).splitlines()]


def test_make_test_runs_every_test_once_and_make_unit_leaves_the_slow_ones_out() -> None:
    assert recipe("test") == ["$(BIN)/pytest"]  # unit, slow ones included, then e2e
    assert recipe("unit") == ['$(BIN)/pytest tests/unit -m "not slow"']
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]
    assert "-m" not in options["ini_options"]["addopts"].split()
    marked = [
        path.name
        for path in (REPO / "tests" / "unit").rglob("test_*.py")
        if path != Path(__file__) and "pytest.mark.slow" in path.read_text()
    ]
    assert marked, "no slow test: `pytest -m slow` would select nothing"
