"""The command line: global flags anywhere, the operator's flags as they were, spawn's spec."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from agentworkers.api.provider import Provider
from agentworkers.api.worker import Phase
from agentworkers.cli import main as cli
from agentworkers.cli.parsers import (
    PHASES,
    PROVIDERS,
    UsageError,
    parsed_defaults,
    phases_from,
)
from agentworkers.cli.verbs import spawn_request

VERBS = ("spawn", "query", "list", "inspect", "collect", "kill", "events", "explain")


def parse(*argv: str) -> argparse.Namespace:
    return parsed_defaults(cli.build_parser().parse_args(argv))


def test_global_flags_go_before_or_after_the_verb() -> None:
    before = parse("-n", "team-a", "-o", "json", "--kubeconfig", "k", "list")
    after = parse("list", "-n", "team-a", "-o", "json", "--kubeconfig", "k")
    for args in (before, after):
        assert (args.g_namespace, args.output, args.g_kubeconfig) == ("team-a", "json", "k")
    plain = parse("list")
    assert (plain.g_namespace, plain.output, plain.quiet) == (None, "table", False)
    # Given before the verb and not after it: the verb's parser keeps it.
    assert parse("-q", "collect", "w1").quiet is True


def test_the_operator_subcommand_keeps_its_flags() -> None:
    args = parse(
        "operator", "-n", "team-*", "-n", "ops", "--kubeconfig", "k", "--no-webhook",
        "--webhook-port", "1", "--webhook-name", "x.io", "--webhook-addr", "0.0.0.0",
        "--webhook-host", "h", "--tls-dir", "/t", "--metrics-port", "0", "--liveness", "",
        "--leader-elect", "--lease-name", "rel", "-v",
    )  # fmt: skip
    assert args.namespace == ["team-*", "ops"]
    assert args.kubeconfig == "k" and args.no_webhook and args.verbose
    assert (args.webhook_port, args.webhook_name, args.webhook_addr) == (1, "x.io", "0.0.0.0")
    assert (args.webhook_host, args.tls_dir, args.metrics_port) == ("h", Path("/t"), 0)
    assert (args.liveness, args.leader_elect, args.lease_name) == ("", True, "rel")
    assert args.func is cli._operator
    defaults = parse("operator")
    assert defaults.namespace == [] and defaults.webhook_port == 9443
    assert defaults.tls_dir == Path("/tmp/agentworkers-webhook")
    assert defaults.role == "all" and parse("operator", "--role", "admission").role == "admission"


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--no-webhook"], "--role=admission serves the webhook: drop --no-webhook"),
        # Admission replicas are all active: a Lease flag there would do nothing.
        (["--leader-elect"], "--role=admission: every replica is active; --leader-elect"),
        (["--shards=2"], "--role=admission: every replica is active"),
        (["--shard-index=0"], "--role=admission: every replica is active"),
    ],
)
def test_an_admission_role_refuses_what_it_would_not_do(
    flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["operator", "--role=admission", *flags]) == cli.EXIT_USAGE
    assert f"error: {error}" in capsys.readouterr().err


def test_kopf_peering_is_gone(capsys: pytest.CaptureFixture[str]) -> None:
    """Replicas take turns on the operator's own Leases now (--leader-elect)."""
    assert cli.main(["operator", "--peering=p"]) == cli.EXIT_USAGE
    assert "unrecognized arguments: --peering" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--shards=0"], "--shards 0: at least 1"),
        (["--shards=2", "--shard-index=2"], "--shard-index 2 is not a shard of --shards 2"),
        (["--shard-index=1"], "--shard-index 1 is not a shard of --shards 1"),
    ],
)
def test_a_shard_index_outside_the_shards_is_a_usage_error(
    flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["operator", *flags]) == cli.EXIT_USAGE
    assert error in capsys.readouterr().err


def test_one_shard_is_index_0_whatever_the_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Deployment's pod name ends in a random suffix, at times all digits."""
    monkeypatch.setenv("HOSTNAME", "agentworkers-7c9d8-24567")
    assert cli._shard_index(None, 1) == 0
    monkeypatch.setenv("HOSTNAME", "agentworkers-2")
    assert cli._shard_index(None, 3) == 2


def test_bad_worker_defaults_stop_the_operator_naming_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    defaults = tmp_path / "worker-defaults.yaml"
    defaults.write_text("tolerations: [{operator: Sometimes}]\n")
    assert cli.main(["operator", f"--worker-defaults={defaults}"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "workerDefaults.tolerations[0].operator" in err and "'Exists' or 'Equal'" in err


def test_global_flags_before_operator_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-n", "x", "operator"]) == cli.EXIT_USAGE
    assert "operator" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [*VERBS, "profiles", "profiles show", "revisions"])
def test_every_verb_has_help_with_examples(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*verb.split(), "--help"]) == 0
    text = capsys.readouterr().out
    assert f"agentworkers {verb} " in text.split("examples:")[1]


def test_the_kubectl_plugin_names_itself(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/kubectl-workers", "spawn", "--help"])
    assert cli.main() == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: kubectl workers spawn")
    assert "  kubectl workers spawn w1 " in text


def test_spawn_flags_become_spec_fields() -> None:
    args = parse(
        "spawn", "w1", "-a", "planner", "-m", "hi", "--model", "m", "--skill", "a",
        "--skill", "b", "--reasoning-api", "adaptive", "--secret", "key", "--deadline", "60",
        "--suspend", "-l", "team=a", "--parent", "p", "--profile", "reviewer",
        "--idle-timeout", "300", "--ttl", "3600",
    )  # fmt: skip
    name, fields, labels = spawn_request(args)
    assert name == "w1" and labels == {"team": "a"}
    assert fields == {
        "agent": "planner",
        "initialMessage": "hi",
        "model": "m",
        "skills": ["a", "b"],
        "reasoningAPI": "adaptive",
        "allowedSecrets": ["key"],
        "deadlineSeconds": 60,
        "idleTimeoutSeconds": 300,
        "ttlSecondsAfterFinished": 3600,
        "suspend": True,
        "parent": "p",
        "profile": "reviewer",
    }
    assert args.wait is None


def test_spawn_inputs_are_local_files(tmp_path: Path) -> None:
    (tmp_path / "plan.md").write_text("# plan\n")
    _, fields, _ = spawn_request(parse("spawn", "w1", "--input", str(tmp_path / "plan.md")))
    [entry] = fields["inputs"]
    assert entry["name"] == "plan.md" and entry["content"] == "IyBwbGFuCg=="
    (tmp_path / "a b.md").write_text("x")
    for path, why in [("a b.md", "not a canonical filename"), ("none.md", "No such file")]:
        with pytest.raises(UsageError, match=why):
            spawn_request(parse("spawn", "w1", "--input", str(tmp_path / path)))


def test_spawn_from_a_manifest_with_flags_over_it(tmp_path: Path) -> None:
    manifest = tmp_path / "worker.yaml"
    manifest.write_text(
        "kind: Worker\nmetadata: {name: from-file, labels: {a: b}}\n"
        "spec: {agent: planner, initialMessage: from file, model: m1}\n"
    )
    name, fields, labels = spawn_request(parse("spawn", "-f", str(manifest), "--model", "m2"))
    assert (name, labels) == ("from-file", {"a": "b"})
    assert fields == {"agent": "planner", "initialMessage": "from file", "model": "m2"}
    bare = tmp_path / "spec.json"
    bare.write_text('{"agent": "planner"}')
    assert spawn_request(parse("spawn", "w9", "-f", str(bare)))[:2] == ("w9", {"agent": "planner"})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("spawn",), "needs a NAME"),
        (("spawn", "w1", "-l", "novalue"), "KEY=VALUE"),
    ],
)
def test_spawn_usage_errors(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        spawn_request(parse(*argv))


def test_wait_phases_include_the_later_ones() -> None:
    assert parse("spawn", "w1", "--wait").wait == {"Running", "Idle", "Done"}
    assert phases_from("idle") == {"Idle", "Done"}
    assert phases_from("Pending") == {"Pending", "Running", "Idle", "Done"}
    assert phases_from("Killed,Done") == {"Killed", "Done"}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown phase 'asleep'"):
        phases_from("asleep")


def test_profiles_flags_before_or_after_the_subcommand() -> None:
    assert (parse("profiles").agent, parse("profiles").revision) == (None, None)
    assert parse("profiles", "-a", "planner", "show", "k").agent == "planner"
    shown = parse("profiles", "show", "k", "--agent", "planner", "-r", "2")
    assert (shown.key, shown.agent, shown.revision) == ("k", "planner", "2")
    diff = parse("profiles", "diff", "1", "planner-r2")
    assert (diff.before, diff.after) == ("1", "planner-r2")
    assert parse("profiles", "list", "-r", "1").revision == "1"


@pytest.mark.parametrize(
    "argv",
    [
        ("inspect", "w1", "--since", "-1"),
        ("collect", "w1", "--timeout", "0"),
        ("list", "-o", "xml"),
        ("spawn", "w1", "--wait", "later"),
        ("nosuchverb",),
        (),
    ],
)
def test_bad_arguments_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(list(argv)) == cli.EXIT_USAGE
    assert "--help' for usage" in capsys.readouterr().err


def test_the_cli_knows_every_phase_and_provider() -> None:
    assert set(PHASES) == set(get_args(Phase))
    assert get_args(Provider) == PROVIDERS


def test_help_loads_neither_the_client_nor_the_models() -> None:
    """`--help` starts fast: argparse and the parsers only (the client loads for a verb)."""
    probe = (
        "import sys\n"
        "from agentworkers.cli.main import main\n"
        "main(['spawn', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'pydantic', 'kopf') or m.startswith('agentworkers.client')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _parsers(sub)
    return found


def test_every_flag_says_what_it_does() -> None:
    missing = [
        f"{parser.prog} {'/'.join(action.option_strings)}"
        for parser in _parsers(cli.build_parser())
        for action in parser._actions
        if action.option_strings and not action.help and parser.prog != "agentworkers run"
    ]
    assert not missing, missing


def test_the_operator_logs_a_thread_s_fault_rather_than_printing_it_raw(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    import threading  # noqa: PLC0415

    from agentworkers.cli.main import _log_uncaught  # noqa: PLC0415

    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    _log_uncaught()

    def fail() -> None:
        raise RuntimeError("boom")

    thread = threading.Thread(target=fail, name="faulty")
    thread.start()
    thread.join()
    assert "Traceback" not in capfd.readouterr().err
    [record] = [r for r in caplog.records if r.name == "agentworkers"]
    assert record.getMessage() == "thread faulty failed"
    assert record.exc_info and record.exc_info[1] is not None
