"""The CLI's parsing parts: kubectl's way with a wrong command line (`Parser`,
`UsageError`), the argument types, the global flags and the flags several verbs share.
Each verb's subparser is in `agentworkers.cli.verb_parsers`."""

from __future__ import annotations

import argparse
import difflib
from typing import Any, NoReturn

# Light on purpose: `--help` and a usage error load this module, `verb_parsers` and
# argparse only (the client and the models load when a verb runs, `agentworkers.cli.main.run`).

# wide: the table with more columns where a verb has them (list), as kubectl -o wide.
FORMATS = ("table", "wide", "json", "yaml")
TABLES = ("table", "wide")
EVENT_COLUMNS = ("WORKER", 24), ("INDEX", 6), ("KIND", 18), ("TIME", 21), ("SUMMARY", 0)
# A streamed table (events -A, list -w) across namespaces leads with this column.
NAMESPACE_COLUMN = ("NAMESPACE", 20)
WATCH_COLUMNS = (
    ("NAME", 24), ("PHASE", 8), ("KIND", 8), ("AGENT", 16), ("PROFILE", 12), ("PARENT", 16),
    ("LAST EVENT", 24), ("AGE", 0),
)  # fmt: skip
# The CLI's own default for waits (the Python client has its own for its callers).
DEFAULT_TIMEOUT = 300.0
# How far a run has come: waiting for one phase is satisfied by any later one too (a run
# that is already Idle has been Running). Failed and Killed end every wait on their own.
PHASE_ORDER = ("Pending", "Running", "Idle", "Done")
ENDINGS = ("Failed", "Killed")
PHASES = (*PHASE_ORDER, *ENDINGS)
# The api's Provider, spelled out: --help loads no pydantic (a test keeps them equal).
PROVIDERS = ("openai", "anthropic", "scripted")


class UsageError(Exception):
    """The command line asks for something that cannot be done as asked (exit code 2)."""


class Parser(argparse.ArgumentParser):
    """argparse, with kubectl's way of saying a command line is wrong: one error line, a
    pointer to --help, exit code 2; a mistyped verb gets a suggestion."""

    def error(self, message: str) -> NoReturn:
        if "invalid choice" in message:
            typed = message.split("'")[1] if "'" in message else ""
            verbs = [
                name
                for action in self._actions
                if isinstance(action, argparse._SubParsersAction)
                for name in action.choices
            ]
            close = difflib.get_close_matches(typed, verbs, n=1)
            message = f"unknown command {typed!r}" + (
                f"; did you mean {close[0]!r}?" if close else ""
            )
        self.exit(2, f"error: {message}\nSee '{self.prog} --help' for usage.\n")


def _phases(text: str) -> list[str]:
    """The phases a comma-separated list names, in any case."""
    found = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        phase = word.capitalize()
        if phase not in PHASES:
            raise argparse.ArgumentTypeError(
                f"unknown phase {word!r} (choose from {', '.join(PHASES)})"
            )
        found.append(phase)
    return found


def phases_from(text: str) -> frozenset[str]:
    """--wait's phases, each with the phases that come after it."""
    wanted: set[str] = set()
    for phase in _phases(text):
        wanted.add(phase)
        if phase in PHASE_ORDER:
            wanted.update(PHASE_ORDER[PHASE_ORDER.index(phase) :])
    return frozenset(wanted)


def phase_set(text: str) -> frozenset[str]:
    """--phase: these phases exactly (comma-separated, any case)."""
    found = frozenset(_phases(text))
    if not found:
        raise argparse.ArgumentTypeError("expected a phase, e.g. Running or Done,Failed")
    return found


def all_namespaces_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=argparse.SUPPRESS,  # a verb's and its subcommand's (profiles list)
        help="in every namespace (a NAMESPACE column leads); -n is ignored",
    )


def filter_flags(p: argparse.ArgumentParser, agent: bool = True) -> None:
    """-l and the filters that narrow which workers a verb reads or acts on."""
    p.add_argument(
        "-l",
        "--selector",
        default="",
        metavar="SELECTOR",
        help="label selector, as kubectl takes it (team=a, tier!=batch, 'env in (a,b)')",
    )
    if agent:
        p.add_argument("--agent", help="only workers of this agent (spec.agent)")
    p.add_argument(
        "--phase",
        type=phase_set,
        default=frozenset(),
        metavar="PHASE[,PHASE]",
        help="only workers in these phases (Pending: none yet)",
    )
    p.add_argument("--parent", help="only workers this worker spawned (spec.parent)")


def bulk_flags(p: argparse.ArgumentParser, verb: str) -> None:
    """NAME..., or a selection (-l, filters, --all), in one namespace or (-A) every one."""
    p.add_argument("names", nargs="*", metavar="NAME", help="the workers (or select them)")
    all_namespaces_flag(p)
    filter_flags(p)
    p.add_argument(
        "--all",
        action="store_true",
        help=f"{verb} every worker in the namespace (with -A: in every namespace)",
    )
    p.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        choices=("client",),
        help=f"print what would be {verb}ed and how many; send nothing",
    )


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def seconds(text: str) -> float:
    value = float(text.removesuffix("s"))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: a timeout must be positive")
    return value


def event_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--follow", action="store_true", help="stream new events")
    p.add_argument(
        "--since",
        type=non_negative,
        default=0,
        metavar="N",
        help="only events with a greater index (a cursor from an earlier run)",
    )
    p.add_argument("--timeout", type=seconds, metavar="SECONDS", help="stop following then")


def add_globals(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """-n, --kubeconfig, -o, -q: before the verb, or (kubectl-style) after it.

    After the verb their defaults are suppressed, so they do not undo the same flag given
    before it.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("global flags") if suppress else parser
    group.add_argument(
        "-n",
        "--namespace",
        dest="g_namespace",
        metavar="NAMESPACE",
        default=default(None),
        help="namespace (default: the kubeconfig context's)",
    )
    group.add_argument(
        "--kubeconfig",
        dest="g_kubeconfig",
        metavar="FILE",
        default=default(None),
        help="kubeconfig file (default: KUBECONFIG, then in-cluster, then ~/.kube/config)",
    )
    group.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        metavar="FORMAT",
        default=default("table"),
        help="table (default), wide (list: more columns), json or yaml (a stream, events, "
        "prints JSON Lines)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="no progress on stderr",
    )


def agent_flags(parser: argparse.ArgumentParser, revision: bool = True) -> None:
    parser.add_argument(
        "-a",
        "--agent",
        default=argparse.SUPPRESS,
        help="the AgentConfig (default: the namespace's only one)",
    )
    if revision:
        parser.add_argument(
            "-r",
            "--revision",
            default=argparse.SUPPRESS,
            metavar="REV",
            help="id or name (default: the active one)",
        )


def parsed_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill what suppressed defaults left out (flags shared by a verb and its subcommands)."""
    defaults: tuple[tuple[str, object], ...] = (
        ("agent", None),
        ("revision", None),
        ("all_namespaces", False),
        ("selector", ""),
        ("phase", frozenset()),
        ("parent", None),
    )
    for name, value in defaults:
        if not hasattr(args, name):
            setattr(args, name, value)
    return args
