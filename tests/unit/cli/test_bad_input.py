"""No command line ends in a traceback: each bad one gets an error line and a non-zero code."""

from __future__ import annotations

import pytest

from agentworkers import __version__
from agentworkers.cli import main as cli

VERBS = [
    ["spawn"],
    ["query"],
    ["list"],
    ["inspect"],
    ["collect"],
    ["kill"],
    ["events"],
    ["explain"],
    ["profiles"],
    ["profiles", "list"],
    ["profiles", "show"],
    ["profiles", "diff"],
    ["revisions"],
    ["logs"],
    ["tree"],
    ["operator"],
    ["run"],
    [],
]


@pytest.mark.parametrize("extra", [["--no-such-flag"], ["a", "b", "c", "d", "e"]])
@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v) or "(none)")
def test_a_bad_command_line_is_one_error_not_a_traceback(
    verb: list[str], extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = cli.main([*verb, *extra])
    except SystemExit as e:  # `run` hands over to the runtime's own parser
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    assert any(line.startswith(("error:", "agentworkers run: error:")) for line in err.splitlines())


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["spwn"], "did you mean 'spawn'?"),
        (["-n", "x", "run"], "`run` is the worker runtime"),
        (["run", "--worker", "w", "--namespace", "x"], "AGENTWORKERS_EFFECTIVE_CONFIG is not set"),
    ],
)
def test_the_error_says_what_to_do(
    argv: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTWORKERS_EFFECTIVE_CONFIG", raising=False)
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    assert code == cli.EXIT_USAGE
    assert expected in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"agentworkers {__version__}"
