"""Each verb's subparser: its summary, examples, description and flags, as `--help` shows
them. The handler a verb runs is named here and lives in `agentworkers.cli.verbs`; the flags
several verbs share, and the argument types, are in `agentworkers.cli.parsers`."""

from __future__ import annotations

import argparse
import getpass
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from agentworkers.cli.parsers import (
    DEFAULT_TIMEOUT,
    PROVIDERS,
    add_globals,
    agent_flags,
    all_namespaces_flag,
    bulk_flags,
    event_flags,
    filter_flags,
    non_negative,
    phases_from,
    seconds,
)

# Light on purpose, like the parsers: `--help` loads argparse and these two modules only.


def add_verbs(sub: Any, root: str) -> None:
    """Every worker and config verb, on the subparsers `sub`; `root` is how --help examples
    call the command (agentworkers, or kubectl workers)."""
    common = argparse.ArgumentParser(add_help=False)
    add_globals(common, suppress=True)

    def verb(
        name: str,
        handler: str,
        summary: str,
        examples: Sequence[str],
        description: str = "",
        parent: Any = sub,
        aliases: Sequence[str] = (),
    ) -> argparse.ArgumentParser:
        command = f"{root} {'profiles ' if parent is not sub else ''}{name}"
        parser: argparse.ArgumentParser = parent.add_parser(
            name,
            aliases=list(aliases),
            help=summary,
            description=textwrap.fill(f"{summary[0].upper()}{summary[1:]}. {description}", 88),
            epilog="examples:\n" + "".join(f"  {command} {e}\n" for e in examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common],
        )
        parser.set_defaults(run=handler)  # a function of agentworkers.cli.verbs
        return parser

    add_spawn(verb)

    p = verb(
        "query",
        "query",
        "send a message to a worker",
        ["w1 'now write the tests'", "w1 - < question.txt"],
        "Appends the message to the worker's queries; the run takes it when idle. A worker "
        "that has ended takes no query (WorkerFinished, exit 1).",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("message", metavar="MESSAGE", help="the message; - reads it from stdin")

    p = verb(
        "list",
        "list_workers",
        "list workers, oldest first",
        [
            "",
            "-A",
            "-l team=a --phase Running,Idle",
            "-A --agent planner -w",
            "-n team-a -o json | jq -r '.items[].name'",
        ],
        "Sorted by start time, then name (by namespace first with -A): a stable order. "
        "-l selects on the API server; --agent, --phase and --parent filter what it "
        "returns. -w prints the list, then a row per change, from one watch (with -A: one "
        "for the whole cluster).",
        aliases=("ls",),
    )
    all_namespaces_flag(p)
    filter_flags(p)
    p.add_argument(
        "-w", "--watch", action="store_true", help="after the list, print a row per change"
    )
    p.add_argument("--timeout", type=seconds, metavar="SECONDS", help="stop watching then")

    p = verb(
        "inspect",
        "inspect",
        "show a worker's status and recent events",
        ["w1", "w1 --since 12 -o json"],
        "Shows the events with an index above --since; pass the printed cursor as the next "
        "--since to see only what is new.",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--since", type=non_negative, default=0, metavar="N", help="event cursor")

    p = verb(
        "collect",
        "collect",
        "wait for workers to settle, print their output, remove them",
        [
            "w1",
            "w1 --timeout 60 -o json | jq -r .output",
            "--all --dry-run",
            "-l team=a --timeout 600 -o json",
        ],
        "Waits (on a watch) until each worker is Idle, Done, Failed or Killed, prints its "
        "phase, output and error (a killed worker's error is the kill reason), then deletes "
        "it (its pod and children go with it; --keep leaves them, for kubectl logs). A "
        "timeout exits 5 and removes nothing of what has not settled. By selector (-l, "
        "filters) or --all: the workers matched now, each collected as it settles, a "
        "parent after its selected children; nothing matched says so and exits 0.",
    )
    bulk_flags(p, "collect")
    p.add_argument("--keep", action="store_true", help="do not delete the worker")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait (default %(default)gs)",
    )

    p = verb(
        "kill",
        "kill",
        "stop workers' runs",
        [
            "w1 --reason 'over budget'",
            "w1 --reason 'superseded by w2' --by planner",
            "-l team=a --dry-run",
            "--all --phase Pending --reason 'queue flushed'",
        ],
        "The operator deletes the pod, marks the worker Killed and posts an Event "
        "'killed by WHO: REASON'; collect returns the reason as the error. By selector "
        "(-l, filters) or --all, as kubectl delete: a line per matched worker and the "
        "count on stderr; runs that ended on their own are left alone; nothing matched "
        "says so and exits 0.",
    )
    bulk_flags(p, "kill")
    p.add_argument("--reason", default="", help="why (default: killed)")
    p.add_argument("--by", default=_user(), help="who asks (default: your user name)")

    p = verb(
        "events",
        "events",
        "print the events of a worker, or of all",
        ["w1", "-f", "w1 --follow --since 40 -o json", "-f -A -l team=a"],
        "Events come from the workers' status (a bounded ring of recent events), each "
        "(worker, index) once, in index order per worker. --follow streams new ones until "
        "interrupted, the timeout, or (for one worker) its deletion; -A follows the whole "
        "cluster on one watch.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="one worker (default: all)")
    event_flags(p)
    all_namespaces_flag(p)
    filter_flags(p)

    p = verb(
        "logs",
        "events",
        "print one worker's events, as kubectl logs prints a pod's",
        ["w1", "w1 -f"],
        "The same stream as `events NAME`: the run's events from its status, in order; "
        "-f follows until the worker is deleted. (`kubectl logs` of its pod shows the "
        "runtime's own output.)",
    )
    p.add_argument("name", metavar="NAME")
    event_flags(p)

    p = verb(
        "tree",
        "tree",
        "draw a worker's spawn tree: every worker below it, with phase, profile and reason",
        ["lead", "lead -o json", "", "-A"],
        "Children are the workers whose spec.parent names their parent, oldest first; "
        "a failed or killed one shows why, a waiting one what it waits for. Without NAME: "
        "every tree in the namespace (-A: in every namespace).",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the root (default: every root)")
    all_namespaces_flag(p)

    p = verb(
        "explain",
        "explain",
        "show a worker's effective config and the layer behind each field",
        ["child", "child -o json | jq '.fields[] | select(.layer == \"clamp\")'"],
        "Layers: agent (the AgentConfig, at the revision the run pinned or froze), worker "
        "(the Worker's own selections), profile (a virtual profile's overlay, from the "
        "child's sealed binding) and clamp (a profile value the agent's limit cut down).",
    )
    p.add_argument("name", metavar="NAME")

    add_config_verbs(verb)

    p = verb(
        "quota",
        "quota",
        "show the namespace's token quotas and what is used of them this window",
        ["", "team-a -o json", "-A"],
        "TokenQuotas cap the tokens a namespace, or one agent in it, may use per calendar "
        "window (UTC). USED: tokens runs reported this window; RESERVED: what live runs may "
        "still use; a spawn whose budget exceeds REMAINING is refused (TokenQuotaExceeded). "
        "As the operator last summed them (every few seconds).",
        aliases=("quotas",),
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="one quota (default: all)")
    all_namespaces_flag(p)


def add_config_verbs(verb: Callable[..., argparse.ArgumentParser]) -> None:
    """profiles (list, show, diff) and revisions."""
    profiles = verb(
        "profiles",
        "profiles",
        "list, show and diff an agent's virtual-agent profiles",
        ["", "--agent planner --revision 2", "-A", "show reviewer -o yaml", "diff 1 2"],
        "Without a subcommand: the profiles of the active revision with hash and source. "
        "-A: of every agent's active revision in every namespace.",
    )
    agent_flags(profiles)
    all_namespaces_flag(profiles)
    nested = profiles.add_subparsers(dest="profiles_command", metavar="{list,show,diff}")
    p = verb("list", "profiles", "list profiles", ["", "-r 1", "-A"], parent=nested)
    agent_flags(p)
    all_namespaces_flag(p)
    p = verb(
        "show",
        "profile_show",
        "show one profile in full",
        ["reviewer", "reviewer --revision 1 -o json"],
        parent=nested,
    )
    p.add_argument("key", metavar="KEY")
    agent_flags(p)
    p = verb(
        "diff",
        "profile_diff",
        "compare the profiles of two revisions",
        ["1 2", "planner-r1 planner-r3 -o json"],
        "Revisions by id (3, r3) or name (planner-r3). Per key: added, removed, changed "
        "(with the changed fields) or unchanged.",
        parent=nested,
    )
    p.add_argument("before", metavar="REV1")
    p.add_argument("after", metavar="REV2")
    agent_flags(p, revision=False)

    p = verb(
        "revisions",
        "revisions",
        "list an agent's config revisions",
        ["", "--agent planner -o json", "-A"],
        "Oldest first, with id, digest, profile count and age; ACTIVE marks the one new "
        "workers freeze. -A: every agent's, in every namespace.",
    )
    agent_flags(p, revision=False)
    all_namespaces_flag(p)


def add_spawn(verb: Callable[..., argparse.ArgumentParser]) -> None:
    p = verb(
        "spawn",
        "spawn",
        "start a worker",
        [
            "w1 -m 'summarise README.md' --wait",
            "w1 --agent planner --model demo-small --skill research --skill summarise",
            "child --parent w1 --profile reviewer -m 'review the diff' --wait Running",
            "-f worker.yaml --wait --timeout 120 -o json",
        ],
        "It creates a Worker. With --wait it returns once the run has reached the phase "
        "(default Running; any later phase counts too) and shows progress on stderr; a run "
        "that fails or is killed first exits 1. The agent defaults to the namespace's only "
        "AgentConfig.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="worker name (unique in the namespace)")
    p.add_argument("-f", "--file", help="a Worker manifest or a Worker spec (YAML/JSON; - stdin)")
    p.add_argument("-a", "--agent", help="the AgentConfig (top-level agent) to run")
    p.add_argument("-m", "--message", help="the first message, delivered when the run starts")
    p.add_argument(
        "--kind",
        choices=("static", "dynamic"),
        help="static: a top-level run; dynamic: a child of --parent. Follows from --parent "
        "when omitted; one that disagrees with it is refused",
    )
    p.add_argument("--description", help="one line on what the worker is for")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="FILE",
        help="a local file the run starts with, as inputs/<its name> in its sandbox "
        "(repeatable; under a profile, within its inputCount and inputPatterns)",
    )
    p.add_argument("--prompt", help="extra system prompt, added to the agent's")
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        help="driver override (docs/agents.md#providers)",
    )
    p.add_argument("--model", help="model override")
    p.add_argument("--skill", action="append", default=[], help="keep this skill (repeatable)")
    p.add_argument("--mcp", action="append", default=[], help="keep this MCP server (repeatable)")
    p.add_argument(
        "--reasoning",
        choices=("off", "low", "medium", "high"),
        help="reasoning effort override (never above the agent's)",
    )
    p.add_argument(
        "--reasoning-api",
        choices=("enabled", "adaptive"),
        help="Anthropic's thinking (provider anthropic only): enabled, with a budget from "
        "the reasoning effort, or adaptive, as the model decides",
    )
    p.add_argument("--secret", action="append", default=[], help="allow this secret (repeatable)")
    p.add_argument("--parent", help="the spawning worker (needed with --profile)")
    p.add_argument("--profile", help="a virtual-agent profile key from the parent's frozen map")
    p.add_argument("--deadline", type=int, metavar="SECONDS", help="longest the run may take")
    p.add_argument(
        "--idle-timeout",
        type=int,
        metavar="SECONDS",
        help="an interactive run Idle this long ends (Done) and frees its pod",
    )
    p.add_argument(
        "--ttl",
        type=int,
        metavar="SECONDS",
        help="delete the run this long after it finished (unless a parent collects it)",
    )
    p.add_argument("--suspend", action="store_true", help="bind now, start the run later")
    p.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="stay Idle after answering, for queries (otherwise Done after the first answer)",
    )
    p.add_argument(
        "-l", "--label", action="append", default=[], metavar="KEY=VALUE", help="label the Worker"
    )
    p.add_argument(
        "--any-agent",
        action="store_true",
        help="spawn even if the agent's AgentConfig does not exist (yet); the run waits for it",
    )
    p.add_argument(
        "--wait",
        nargs="?",
        const=phases_from("Running"),
        type=phases_from,
        metavar="PHASE[,PHASE]",
        help="wait until the run reaches PHASE (default Running)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long --wait waits (default %(default)gs)",
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name (a container with an arbitrary uid)
        return ""
