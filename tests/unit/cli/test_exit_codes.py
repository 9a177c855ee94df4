"""Exit codes scripts can rely on: each error maps to one code, with a line and no traceback."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from agentworkers.cli import main as cli
from agentworkers.cli.output import Output
from agentworkers.cli.parsers import UsageError
from agentworkers.client import (
    ApiError,
    ClientError,
    CollectTimeoutError,
    ConfigError,
    NotFoundError,
    UnknownWorkerError,
    WaitTimeoutError,
    WorkerFinishedError,
    WorkerNameConflictError,
)
from agentworkers.client.errors import translate
from agentworkers.kube.api import refusal


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UnknownWorkerError("unknown worker 'x'"), 3),
        (NotFoundError("unknown agent 'x'"), 3),
        (WorkerNameConflictError("worker name 'x' already in use"), 4),
        (CollectTimeoutError("worker 'x' still Running after 2s"), 5),
        (WaitTimeoutError("worker 'x' still Pending after 2s"), 5),
        (UsageError("pick one with --agent"), 2),
        (WorkerFinishedError("the run is Killed"), 6),
        (ApiError("422 Unprocessable Entity: spec.kill cannot be changed", 422), 1),
        (ConfigError("no usable kubeconfig"), 1),
        (ClientError("anything else"), 1),
    ],
)
def test_each_error_has_its_exit_code(error: Exception, code: int) -> None:
    assert cli.exit_code(error) == code


class Failing:
    """A client whose every call raises `error` (what the CLI does with it is under test)."""

    namespace = "ns"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __enter__(self) -> Failing:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        def fail(*_: object, **__: object) -> None:
            raise self.error

        return fail


def run(monkeypatch: pytest.MonkeyPatch, error: BaseException, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(cli, "connect", lambda args: Failing(error))
    args = cli.build_parser().parse_args(list(argv))
    stderr = io.StringIO()
    code = cli.run(args, Output(args.output, stdout=io.StringIO(), stderr=stderr))
    return code, stderr.getvalue()


def test_an_error_is_one_line_led_by_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = run(
        monkeypatch, UnknownWorkerError("unknown worker 'x' in namespace ns"), "inspect", "x"
    )
    assert (code, err) == (3, "error: UnknownWorker: unknown worker 'x' in namespace ns\n")
    code, err = run(
        monkeypatch, CollectTimeoutError("worker 'x' still Running after 2s"), "collect", "x"
    )
    assert (code, err) == (5, "error: CollectTimeout: worker 'x' still Running after 2s\n")
    code, err = run(monkeypatch, ApiError("403 Forbidden: no", 403), "list")
    assert (code, err) == (1, "error: 403 Forbidden: no\n")


def test_an_interrupt_exits_130_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(monkeypatch, KeyboardInterrupt(), "events", "-f") == (130, "")


def test_an_ambiguous_agent_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class TwoAgents(Failing):
        def agents(self) -> list[str]:
            return ["a", "b"]

    monkeypatch.setattr(cli, "connect", lambda args: TwoAgents(AssertionError()))
    args = cli.build_parser().parse_args(["revisions"])
    stderr = io.StringIO()
    assert cli.run(args, Output("table", stdout=io.StringIO(), stderr=stderr)) == 2
    assert "several agents (a, b): pick one with --agent" in stderr.getvalue()


def test_a_config_error_is_not_a_crash(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    missing = str(tmp_path / "nope")
    stderr = io.StringIO()
    args = cli.build_parser().parse_args(["--kubeconfig", missing, "list"])
    assert cli.run(args, Output("table", stdout=io.StringIO(), stderr=stderr)) == 1
    assert stderr.getvalue().startswith("error: ConfigError: no usable kubeconfig")


def test_a_refusal_prints_as_its_reason_not_as_the_http_wrapping() -> None:
    refused = refusal(
        422,
        "Unprocessable Entity",
        json.dumps(
            {
                "message": 'admission webhook "worker.agentworkers.io" denied the request: ...',
                "details": {
                    "causes": [
                        {
                            "reason": "UnknownProfile",
                            "field": "spec.profile",
                            "message": "no profile 'nosuch' in the frozen map",
                        }
                    ]
                },
            }
        ),
    )
    assert (
        cli.message(refused)
        == "UnknownProfile: spec.profile: no profile 'nosuch' in the frozen map"
    )
    # An unknown parent is UnknownWorker: not found, exit code 3.
    missing = translate(
        refusal(
            422,
            "Unprocessable Entity",
            json.dumps(
                {
                    "message": "...",
                    "details": {
                        "causes": [
                            {
                                "reason": "UnknownWorker",
                                "field": "spec.parent",
                                "message": "no worker named 'ghost'",
                            }
                        ]
                    },
                }
            ),
        )
    )
    assert isinstance(missing, UnknownWorkerError)
    assert cli.exit_code(missing) == cli.EXIT_NOT_FOUND
