"""The verbs of the CLI over `agentworkers.client`: one parser and one handler each.

A handler takes the client, the parsed arguments and an `Output`, prints its result (a
table or description for people, `-o json|yaml` for scripts) and returns the exit code;
errors are raised and mapped to exit codes by `agentworkers.cli`.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, get_args

import yaml
from pydantic import ValidationError

from agentworkers.api import WorkerSpec
from agentworkers.api.worker import TERMINAL_PHASES, Phase
from agentworkers.cli_format import (
    FORMATS,
    age,
    cell,
    describe,
    dump,
    json_line,
    short,
    table,
)
from agentworkers.client import (
    DEFAULT_COLLECT_TIMEOUT,
    Client,
    CollectResult,
    EventRecord,
    Explanation,
    Inspection,
    NotFoundError,
    ProfileDiff,
    ProfileSet,
    RevisionInfo,
    WorkerInfo,
    revision_ref,
)
from agentworkers.errors import describe as describe_invalid

Handler = Callable[[Client, argparse.Namespace, "Output"], int]
# How far a run has come: waiting for one phase is satisfied by any later one too (a run
# that is already Idle has been Running). Failed and Killed end every wait on their own.
PHASE_ORDER = ("Pending", "Running", "Idle", "Done")
PHASES: tuple[str, ...] = get_args(Phase)
EVENT_COLUMNS = ("WORKER", 24), ("INDEX", 6), ("KIND", 18), ("TIME", 21), ("SUMMARY", 0)


class UsageError(Exception):
    """The command line asks for something that cannot be done as asked (exit code 2)."""


# --- output ----------------------------------------------------------------------------


@dataclass
class Output:
    fmt: str
    quiet: bool = False
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    def show(self, value: Any, text: Callable[[], str], empty: str = "") -> None:
        """`text()` for people, or `value` as one JSON/YAML document.

        `empty` says there is nothing to show: like kubectl, on stderr, so stdout stays empty.
        """
        if self.fmt != "table":
            self.stdout.write(dump(value, self.fmt))
        elif empty:
            self.note(empty)
        else:
            self.stdout.write(text())

    def note(self, message: str) -> None:
        """A remark for people (not an error: --quiet silences it)."""
        if not self.quiet:
            self.stderr.write(message + "\n")

    def waiting(self, verb: str) -> Waiting | None:
        return None if self.quiet else Waiting(verb, self.stderr)


class Waiting:
    """Progress on stderr while a command waits: on a terminal one line kept up to date,
    elsewhere (a CI log) one line per change."""

    def __init__(self, verb: str, stream: TextIO) -> None:
        self.verb = verb
        self.stream = stream
        self.live = stream.isatty()
        self.started = time.monotonic()
        self.last: str | None = None

    def __call__(self, info: WorkerInfo) -> None:
        state = info.phase + (f" ({info.status.last_event})" if info.status.last_event else "")
        line = f"{self.verb} {info.name}: {state}, {time.monotonic() - self.started:.0f}s"
        if self.live:
            self.stream.write("\r\x1b[K" + line)
        elif state != self.last:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.last = state

    def done(self) -> None:
        if self.live and self.last is not None:
            self.stream.write("\n")


# --- shared bits -----------------------------------------------------------------------


def agent_of(client: Client, args: argparse.Namespace) -> str:
    """--agent, or the namespace's only agent."""
    if args.agent:
        return str(args.agent)
    agents = client.agents()
    if len(agents) == 1:
        return agents[0]
    if not agents:
        raise NotFoundError(f"no AgentConfig in namespace {client.namespace}")
    raise UsageError(
        f"namespace {client.namespace} has several agents ({', '.join(agents)}): "
        "pick one with --agent"
    )


def phases_from(text: str) -> frozenset[str]:
    """--wait's phases, each with the phases that come after it."""
    wanted: set[str] = set()
    for word in filter(None, (w.strip() for w in text.split(","))):
        phase = word.capitalize()
        if phase not in PHASES:
            raise argparse.ArgumentTypeError(
                f"unknown phase {word!r} (choose from {', '.join(PHASES)})"
            )
        wanted.add(phase)
        if phase in PHASE_ORDER:
            wanted.update(PHASE_ORDER[PHASE_ORDER.index(phase) :])
    return frozenset(wanted)


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


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _worker_rows(workers: Sequence[WorkerInfo]) -> str:
    return table(
        ("NAME", "PHASE", "AGENT", "PROFILE", "PARENT", "LAST EVENT", "AGE"),
        (
            (
                w.name,
                w.phase,
                w.spec.agent,
                w.spec.profile,
                w.spec.parent,
                w.status.last_event,
                age(w.created),
            )
            for w in workers
        ),
    )


# --- spawn -----------------------------------------------------------------------------

_SPEC_FLAGS = {  # flag dest -> WorkerSpec field, as the API spells it
    "agent": "agent",
    "kind": "kind",
    "description": "description",
    "prompt": "prompt",
    "provider": "provider",
    "model": "model",
    "skill": "skills",
    "mcp": "mcps",
    "reasoning": "reasoning",
    "reasoning_api": "reasoningAPI",
    "secret": "allowedSecrets",
    "message": "initialMessage",
    "parent": "parent",
    "profile": "profile",
    "deadline": "deadlineSeconds",
}


def spawn_request(args: argparse.Namespace) -> tuple[str, dict[str, Any], dict[str, str]]:
    """Name, spec fields and labels from -f FILE (a Worker or its spec) overlaid by flags."""
    base: dict[str, Any] = {}
    name = args.name
    labels: dict[str, str] = {}
    if args.file:
        loaded = yaml.safe_load(_read(args.file)) or {}
        if not isinstance(loaded, dict):
            raise UsageError(f"{args.file}: expected a Worker or a Worker spec (a mapping)")
        if loaded.get("kind") == "Worker":
            metadata = loaded.get("metadata") or {}
            name = name or metadata.get("name")
            labels.update(metadata.get("labels") or {})
            loaded = loaded.get("spec") or {}
        base = dict(loaded)
    if not name:
        raise UsageError("spawn needs a NAME (or -f with a Worker that has metadata.name)")
    for dest, wire in _SPEC_FLAGS.items():
        value = getattr(args, dest)
        if value is not None and value != []:
            base[wire] = value
    if args.suspend:
        base["suspend"] = True
    if args.interactive:
        base["interactive"] = True
    for label in args.label:
        key, sep, value = label.partition("=")
        if not sep:
            raise UsageError(f"--label {label!r}: expected KEY=VALUE")
        labels[key] = value
    return name, base, labels


def _spawn(client: Client, args: argparse.Namespace, out: Output) -> int:
    name, fields, labels = spawn_request(args)
    if "agent" not in fields:
        fields["agent"] = agent_of(client, args)
    try:
        spec = WorkerSpec.model_validate(fields)
    except ValidationError as e:
        raise UsageError(str(describe_invalid(e))) from e
    waiting = out.waiting("spawn") if args.wait else None
    try:
        info = client.spawn(
            name, spec, labels, wait=args.wait, timeout=args.timeout, progress=waiting
        )
    finally:
        if waiting:
            waiting.done()
    out.show(info, lambda: f"worker/{name} spawned{f' ({info.phase})' if args.wait else ''}\n")
    if args.wait and info.phase in TERMINAL_PHASES and info.phase not in args.wait:
        out.stderr.write(f"error: worker {name!r} is {info.phase}: {info.status.error or '-'}\n")
        return 1
    return 0


def _add_spawn(verb: Callable[..., argparse.ArgumentParser]) -> None:
    p = verb(
        "spawn",
        _spawn,
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
    p.add_argument("--kind", choices=("static", "dynamic"))
    p.add_argument("--description", help="one line on what the worker is for")
    p.add_argument("--prompt", help="extra system prompt (dynamic workers)")
    p.add_argument("--provider", help="driver override: openai or scripted")
    p.add_argument("--model", help="model override")
    p.add_argument("--skill", action="append", default=[], help="keep this skill (repeatable)")
    p.add_argument("--mcp", action="append", default=[], help="keep this MCP server (repeatable)")
    p.add_argument("--reasoning", choices=("off", "low", "medium", "high"))
    p.add_argument("--reasoning-api", choices=("enabled", "adaptive"))
    p.add_argument("--secret", action="append", default=[], help="allow this secret (repeatable)")
    p.add_argument("--parent", help="the spawning worker (needed with --profile)")
    p.add_argument("--profile", help="a virtual-agent profile key from the parent's frozen map")
    p.add_argument("--deadline", type=int, metavar="SECONDS", help="longest the run may take")
    p.add_argument("--suspend", action="store_true", help="bind now, start the run later")
    p.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="stay Idle after answering, for queries (otherwise Done after the first answer)",
    )
    p.add_argument("-l", "--label", action="append", default=[], metavar="KEY=VALUE")
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
        default=DEFAULT_COLLECT_TIMEOUT,
        metavar="SECONDS",
        help="how long --wait waits (default %(default)gs)",
    )


# --- query, list, inspect, kill --------------------------------------------------------


def _query(client: Client, args: argparse.Namespace, out: Output) -> int:
    message = _read("-") if args.message == "-" else args.message
    info = client.query(args.name, message)
    out.show(info, lambda: f"worker/{info.name} queried (query {len(info.spec.queries)})\n")
    return 0


def _list(client: Client, args: argparse.Namespace, out: Output) -> int:
    workers = client.list()
    empty = "" if workers else f"No workers found in namespace {client.namespace}."
    out.show(workers, lambda: _worker_rows(workers), empty)
    return 0


def inspection_text(found: Inspection, since: int) -> str:
    w, status = found.worker, found.worker.status
    queries = f"{len(w.spec.queries)} ({status.queries_delivered or 0} delivered)"
    frozen = status.frozen_revision.name if status.frozen_revision else None
    revision = revision_ref(w.spec.agent, status.binding.revision) if status.binding else frozen
    text = describe(
        [
            ("Name", w.name),
            ("Agent", w.spec.agent),
            ("Profile", w.spec.profile),
            ("Parent", w.spec.parent),
            ("Phase", w.phase),
            ("Started", status.started_at),
            ("Updated", status.updated_at),
            ("Pod", status.pod),
            ("Revision", revision),
            ("Queries", queries),
            ("Last Event", status.last_event),
            ("Error", status.error),
            ("Output", status.output),
        ]
    )
    text += f"Events (after {since}, next --since {found.cursor}"
    text += f", {found.missed} no longer kept):\n" if found.missed else "):\n"
    if not found.events:
        return text + f"  {cell(None)}\n"
    rows = table(
        ("INDEX", "KIND", "AGE", "SUMMARY"),
        ((e.index, e.kind, age(e.time), e.summary) for e in found.events),
    )
    return text + "".join(f"  {line}\n" for line in rows.splitlines())


def _inspect(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.inspect(args.name, since=args.since)
    out.show(found, lambda: inspection_text(found, args.since))
    return 0


def _kill(client: Client, args: argparse.Namespace, out: Output) -> int:
    info = client.kill(args.name, reason=args.reason, by=args.by)
    kill = info.spec.kill
    out.show(info, lambda: f"worker/{info.name} killed{f': {kill.reason}' if kill else ''}\n")
    return 0


# --- collect ---------------------------------------------------------------------------


def collect_text(result: CollectResult) -> str:
    return describe(
        [
            ("Name", result.name),
            ("Phase", result.phase),
            ("Error", result.error),
            ("Output", result.output),
        ]
    )


def _collect(client: Client, args: argparse.Namespace, out: Output) -> int:
    waiting = out.waiting("collect")
    try:
        result = client.collect(args.name, timeout=args.timeout, progress=waiting)
    finally:
        if waiting:
            waiting.done()
    out.show(result, lambda: collect_text(result))
    return 0


# --- events ----------------------------------------------------------------------------


def event_row(record: EventRecord) -> str:
    """One streamed row: fixed widths, since the rows to come are not known yet."""
    values = (record.worker, record.index, record.kind, record.time, record.summary)
    widths = (width for _, width in EVENT_COLUMNS)
    cells = [cell(v, w or 200).ljust(w) for v, w in zip(values, widths, strict=True)]
    return " ".join(cells).rstrip() + "\n"


def _events(client: Client, args: argparse.Namespace, out: Output) -> int:
    header = "".join(h.ljust(w) + " " for h, w in EVENT_COLUMNS).rstrip() + "\n"
    if out.fmt == "table" and args.follow:  # at once: a follower sees it is listening
        out.stdout.write(header)
        out.stdout.flush()
    shown = 0
    for record in client.events(
        args.name, follow=args.follow, since=args.since, timeout=args.timeout
    ):
        if out.fmt == "table":
            out.stdout.write((header if not (shown or args.follow) else "") + event_row(record))
        elif out.fmt == "json":
            out.stdout.write(json_line(record))
        else:
            out.stdout.write("---\n" + dump(record, "yaml"))
        out.stdout.flush()
        shown += 1
    if not shown and out.fmt == "table" and not args.follow:
        where = f"worker {args.name}" if args.name else f"namespace {client.namespace}"
        out.note(f"No events found in {where}.")
    return 0


# --- explain ---------------------------------------------------------------------------


def explanation_text(found: Explanation) -> str:
    head = describe(
        [
            ("Worker", found.worker),
            ("Agent", found.agent),
            ("Profile", found.profile),
            ("Inherits", found.inherits),
            ("Config", found.config),
        ]
    )
    rows = table(("FIELD", "VALUE", "LAYER"), ((f.field, f.value, f.layer) for f in found.fields))
    return head + "\n" + rows


def _explain(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.explain(args.name)
    out.show(found, lambda: explanation_text(found))
    return 0


# --- profiles, revisions ---------------------------------------------------------------


def profiles_text(found: ProfileSet) -> str:
    return table(
        ("KEY", "LABEL", "HASH", "SOURCE", "REVISION"),
        (
            (p.profile.key, p.profile.label, short(p.hash), p.source, found.revision.revision)
            for p in found.profiles
        ),
    )


def diff_text(found: ProfileDiff) -> str:
    def fields(change: Any) -> str:
        return ", ".join(f.path for f in change.fields)

    head = f"{found.agent}: revision {found.before.revision} -> {found.after.revision}\n"
    return head + table(
        ("KEY", "CHANGE", "BEFORE", "AFTER", "FIELDS"),
        (
            (c.key, c.change, short(c.before_hash), short(c.after_hash), fields(c))
            for c in found.changes
        ),
    )


def revisions_text(found: Sequence[RevisionInfo]) -> str:
    return table(
        ("NAME", "REVISION", "DIGEST", "PROFILES", "ACTIVE", "AGE"),
        (
            (r.name, r.revision, short(r.digest), r.profiles, r.active, age(r.created))
            for r in found
        ),
    )


def _profiles(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.profiles(agent_of(client, args), args.revision)
    empty = "" if found.profiles else f"No profiles in revision {found.revision.name}."
    out.show(found, lambda: profiles_text(found), empty)
    return 0


def _profile_show(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.profile(agent_of(client, args), args.key, args.revision)
    profile = found.profile.model_dump(by_alias=True, exclude_none=True, mode="json")
    text = describe([("Key", found.profile.key), ("Hash", found.hash), ("Source", found.source)])
    out.show(found, lambda: text + "Profile:\n" + _indent(yaml.safe_dump(profile, sort_keys=False)))
    return 0


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())


def _profile_diff(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.diff_revisions(agent_of(client, args), args.before, args.after)
    out.show(found, lambda: diff_text(found))
    return 0


def _revisions(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.revisions(agent_of(client, args))
    out.show(found, lambda: revisions_text(found), "" if found else "No revisions found.")
    return 0


# --- the parsers -----------------------------------------------------------------------


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
        help="table (default), json or yaml (a stream, events, prints JSON Lines)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="no progress on stderr",
    )


def add_verbs(sub: Any, root: str) -> None:
    """Every worker and config verb, on the subparsers `sub`; `root` is how --help examples
    call the command (agentworkers, or kubectl workers)."""
    common = argparse.ArgumentParser(add_help=False)
    add_globals(common, suppress=True)

    def verb(
        name: str,
        handler: Handler,
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
        parser.set_defaults(run=handler)
        return parser

    _add_spawn(verb)

    p = verb(
        "query",
        _query,
        "send a message to a worker",
        ["w1 'now write the tests'", "w1 - < question.txt"],
        "Appends the message to the worker's queries; the run takes it when idle. A worker "
        "that has ended takes no query (WorkerFinished, exit 1).",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("message", metavar="MESSAGE", help="the message; - reads it from stdin")

    verb(
        "list",
        _list,
        "list workers, oldest first",
        ["", "-n team-a -o json | jq -r '.[].name'"],
        "Sorted by start time, then name: a stable order.",
        aliases=("ls",),
    )

    p = verb(
        "inspect",
        _inspect,
        "show a worker's status and recent events",
        ["w1", "w1 --since 12 -o json"],
        "Shows the events with an index above --since; pass the printed cursor as the next "
        "--since to see only what is new.",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--since", type=non_negative, default=0, metavar="N", help="event cursor")

    p = verb(
        "collect",
        _collect,
        "wait for a worker to settle, print its output, remove it",
        ["w1", "w1 --timeout 60 -o json | jq -r .output"],
        "Waits (on a watch) until the worker is Idle, Done, Failed or Killed, prints its "
        "phase, output and error (a killed worker's error is the kill reason), then deletes "
        "it. A timeout exits 5 and removes nothing.",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_COLLECT_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait (default %(default)gs)",
    )

    p = verb(
        "kill",
        _kill,
        "stop a worker's run",
        ["w1 --reason 'over budget'", "w1 --reason 'superseded by w2' --by planner"],
        "The operator deletes the pod, marks the worker Killed and posts an Event "
        "'killed by WHO: REASON'; collect returns the reason as the error.",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--reason", default="", help="why (default: killed)")
    p.add_argument("--by", default=_user(), help="who asks (default: your user name)")

    p = verb(
        "events",
        _events,
        "print the events of a worker, or of all",
        ["w1", "-f", "w1 --follow --since 40 -o json"],
        "Events come from the workers' status (a bounded ring of recent events), each "
        "(worker, index) once, in index order per worker. --follow streams new ones until "
        "interrupted, the timeout, or (for one worker) its deletion.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="one worker (default: all)")
    p.add_argument("-f", "--follow", action="store_true", help="stream new events")
    p.add_argument("--since", type=non_negative, default=0, metavar="N")
    p.add_argument("--timeout", type=seconds, metavar="SECONDS", help="stop following then")

    p = verb(
        "explain",
        _explain,
        "show a worker's effective config and the layer behind each field",
        ["child", "child -o json | jq '.fields[] | select(.layer == \"clamp\")'"],
        "Layers: agent (the AgentConfig, at the revision the run pinned or froze), worker "
        "(the Worker's own selections), profile (a virtual profile's overlay, from the "
        "child's sealed binding) and clamp (a profile value the agent's limit cut down).",
    )
    p.add_argument("name", metavar="NAME")

    profiles = verb(
        "profiles",
        _profiles,
        "list, show and diff an agent's virtual-agent profiles",
        ["", "--agent planner --revision 2", "show reviewer -o yaml", "diff 1 2"],
        "Without a subcommand: the profiles of the active revision with hash and source.",
    )
    _agent_flags(profiles)
    nested = profiles.add_subparsers(dest="profiles_command", metavar="{list,show,diff}")
    _agent_flags(verb("list", _profiles, "list profiles", ["", "-r 1"], parent=nested))
    p = verb(
        "show",
        _profile_show,
        "show one profile in full",
        ["reviewer", "reviewer --revision 1 -o json"],
        parent=nested,
    )
    p.add_argument("key", metavar="KEY")
    _agent_flags(p)
    p = verb(
        "diff",
        _profile_diff,
        "compare the profiles of two revisions",
        ["1 2", "planner-r1 planner-r3 -o json"],
        "Revisions by id (3, r3) or name (planner-r3). Per key: added, removed, changed "
        "(with the changed fields) or unchanged.",
        parent=nested,
    )
    p.add_argument("before", metavar="REV1")
    p.add_argument("after", metavar="REV2")
    _agent_flags(p, revision=False)

    p = verb(
        "revisions",
        _revisions,
        "list an agent's config revisions",
        ["", "--agent planner -o json"],
        "Oldest first, with id, digest, profile count and age; ACTIVE marks the one new "
        "workers freeze.",
    )
    _agent_flags(p, revision=False)


def _agent_flags(parser: argparse.ArgumentParser, revision: bool = True) -> None:
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


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name (a container with an arbitrary uid)
        return ""


def parsed_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill what suppressed defaults left out (flags shared by a verb and its subcommands)."""
    for name, value in (("agent", None), ("revision", None)):
        if not hasattr(args, name):
            setattr(args, name, value)
    return args
