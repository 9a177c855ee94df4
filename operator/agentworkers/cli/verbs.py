"""The verbs of the CLI over `agentworkers.client`: one handler each (its parser is in
`agentworkers.cli.verb_parsers`).

A handler takes the client, the parsed arguments and an `Output`
(`agentworkers.cli.output`), prints its result (a table or description for people,
`-o json|yaml` for scripts) and returns the exit code; errors are raised and mapped to exit
codes by `agentworkers.cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import ValidationError

from agentworkers.api import WorkerSpec
from agentworkers.api.worker import MAX_INPUT_BYTES, TERMINAL_PHASES
from agentworkers.cli.output import Output
from agentworkers.cli.parsers import EVENT_COLUMNS, TABLES, WATCH_COLUMNS, UsageError
from agentworkers.cli.render import (
    collect_line,
    collect_text,
    count,
    describe,
    diff_text,
    event_row,
    explanation_text,
    indented,
    inspection_text,
    kill_lines,
    profiles_text,
    quotas_text,
    revisions_text,
    stream_header,
    tree_text,
    watch_row,
    worker_rows,
)
from agentworkers.client import Client, NotFoundError, WorkerFilter, kill_outcome
from agentworkers.client.selection import kill_result, nothing_to_kill
from agentworkers.core.inputs import encode as encode_input
from agentworkers.errors import InvalidInputError
from agentworkers.errors import describe as describe_invalid

Handler = Callable[[Client, argparse.Namespace, Output], int]


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


def worker_filter(args: argparse.Namespace) -> WorkerFilter:
    """-l, --agent, --phase and --parent, as one filter."""
    return WorkerFilter(args.selector, args.agent, args.phase, args.parent)


def selection(args: argparse.Namespace, verb: str) -> WorkerFilter | None:
    """What kill or collect acts on, as kubectl delete takes it: None for the NAMEs
    given, else the filter that -l, the filters or --all make."""
    where = worker_filter(args)
    if args.names:
        if args.all or not where.everything:
            raise UsageError("NAME cannot be given with -l, --all or a filter")
        if args.all_namespaces:
            raise UsageError("a worker is named in its namespace: drop -A (or select: -l, --all)")
        return None
    if args.all and where.labels:
        raise UsageError("cannot set --all and --selector at the same time")
    if not args.all and where.everything:
        raise UsageError(f"{verb} needs NAME..., -l SELECTOR, a filter or --all")
    return where


def nothing_found(client: Client, all_namespaces: bool) -> str:
    """What kubectl says when nothing matched (on stderr; not an error)."""
    where = "" if all_namespaces else f" in namespace {client.namespace}"
    return f"No workers found{where}."


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


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
    "idle_timeout": "idleTimeoutSeconds",
    "ttl": "ttlSecondsAfterFinished",
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
    if args.input:
        base["inputs"] = [_input(path) for path in args.input]
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


def _input(path: str) -> dict[str, Any]:
    """The spec entry for a local file: its base name, digest and content."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise UsageError(f"--input {path}: {e.strerror}") from e
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"--input {path}: larger than {MAX_INPUT_BYTES} bytes")
    try:
        return encode_input(os.path.basename(path), data).wire()
    except InvalidInputError as e:
        raise UsageError(f"--input {path}: {e.rule}") from e


def spawn(client: Client, args: argparse.Namespace, out: Output) -> int:
    name, fields, labels = spawn_request(args)
    if "agent" not in fields:
        fields["agent"] = agent_of(client, args)
    elif not args.any_agent:
        known = client.agents()
        if fields["agent"] not in known:
            # A typo would otherwise leave a Worker Pending until its AgentConfig appears.
            raise NotFoundError(
                f"unknown agent {fields['agent']!r} in namespace {client.namespace} "
                f"(known: {', '.join(known) or 'none'}); --any-agent spawns it all the same, "
                "to wait for that AgentConfig"
            )
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


# --- query, list, inspect, kill --------------------------------------------------------


def query(client: Client, args: argparse.Namespace, out: Output) -> int:
    message = _read("-") if args.message == "-" else args.message
    info = client.query(args.name, message)
    out.show(info, lambda: f"worker/{info.name} queried (query {len(info.spec.queries)})\n")
    return 0


def list_workers(client: Client, args: argparse.Namespace, out: Output) -> int:
    where, everywhere = worker_filter(args), args.all_namespaces
    if args.watch:
        return _watch(client, args, out, where)
    workers = client.list(where, all_namespaces=everywhere)
    empty = "" if workers else nothing_found(client, everywhere)
    wide = out.fmt == "wide"
    out.show(workers, lambda: worker_rows(workers, wide=wide, namespaces=everywhere), empty)
    return 0


def _watch(client: Client, args: argparse.Namespace, out: Output, where: WorkerFilter) -> int:
    """list -w: the workers, then a row per change, as kubectl get -w prints them; JSON
    Lines of {type, object}, as kubectl's --output-watch-events."""
    everywhere = args.all_namespaces
    if out.fmt in TABLES:
        out.stdout.write(stream_header(WATCH_COLUMNS, everywhere))
        out.stdout.flush()
    for kind, info in client.watch(where, all_namespaces=everywhere, timeout=args.timeout):
        out.item({"type": kind, "object": info}, watch_row(info, everywhere))
    return 0


def tree(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.name:
        if args.all_namespaces:
            raise UsageError("a worker is named in its namespace: drop -A (or drop NAME)")
        found = client.tree(args.name)
        out.show(found, lambda: tree_text(found))
        return 0
    roots = client.forest(all_namespaces=args.all_namespaces)
    empty = "" if roots else nothing_found(client, args.all_namespaces)
    out.show(list(roots), lambda: tree_text(roots, args.all_namespaces), empty)
    return 0


def inspect(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.inspect(args.name, since=args.since)
    out.show(found, lambda: inspection_text(found, args.since))
    return 0


def kill(client: Client, args: argparse.Namespace, out: Output) -> int:
    dry = args.dry_run is not None
    where = selection(args, "kill")
    if where is None:
        return _kill_names(client, args, out, dry)
    found = client.kill_selected(
        where, args.reason, args.by, all_namespaces=args.all_namespaces, dry_run=dry
    )
    if not found:
        out.show(found, str, nothing_found(client, args.all_namespaces))
        return 0
    out.show(found, lambda: kill_lines(found, args.all_namespaces))
    out.note(count(found))
    return 0


def _kill_names(client: Client, args: argparse.Namespace, out: Output, dry: bool) -> int:
    """kill NAME...: each in turn; a run that ended on its own stops it (exit 6)."""
    for name in args.names:
        info = client.get(name)
        outcome = kill_outcome(info)
        if outcome == "finished":
            raise nothing_to_kill(info)
        if not dry:
            info = client.kill(name, reason=args.reason, by=args.by)
        result = kill_result(info, outcome, args.reason, dry)
        text = kill_lines([result])
        out.show(result if dry else info, lambda: text)  # noqa: B023 (called at once)
    return 0


# --- collect ---------------------------------------------------------------------------


def collect(client: Client, args: argparse.Namespace, out: Output) -> int:
    dry = args.dry_run is not None
    where = selection(args, "collect")
    if where is None:
        for name in args.names:
            _collect_one(client, args, out, name, dry)
        return 0
    everywhere = args.all_namespaces
    waiting = None if dry else out.waiting("collect")
    shown = 0
    try:
        for result in client.collect_selected(
            where,
            args.timeout,
            waiting,
            keep=args.keep,
            all_namespaces=everywhere,
            dry_run=dry,
        ):
            out.item(result, collect_line(result, everywhere, dry))
            shown += 1
    finally:
        if waiting:
            waiting.done()
    if not shown:
        out.note(nothing_found(client, everywhere))
    elif dry:
        noun = "worker" if shown == 1 else "workers"
        out.note(f"{shown} {noun} matched (dry run: nothing waited for or removed)")
    return 0


def _collect_one(
    client: Client, args: argparse.Namespace, out: Output, name: str, dry: bool
) -> None:
    if dry:
        info = client.get(name)
        out.stdout.write(f"worker/{name} collected (dry run): {info.phase} now\n")
        return
    waiting = out.waiting("collect")
    try:
        result = client.collect(name, timeout=args.timeout, progress=waiting, keep=args.keep)
    finally:
        if waiting:
            waiting.done()
    out.show(result, lambda: collect_text(result))


# --- events ----------------------------------------------------------------------------


def events(client: Client, args: argparse.Namespace, out: Output) -> int:
    where, everywhere = worker_filter(args), args.all_namespaces
    if args.name and (everywhere or not where.everything):
        raise UsageError("one worker's events are read in its namespace: drop -A, -l and filters")
    header = stream_header(EVENT_COLUMNS, everywhere)
    if out.fmt in TABLES and args.follow:  # at once: a follower sees it is listening
        out.stdout.write(header)
        out.stdout.flush()
    shown = 0
    for record in client.events(
        args.name,
        follow=args.follow,
        since=args.since,
        timeout=args.timeout,
        where=where,
        all_namespaces=everywhere,
    ):
        first = header if not (shown or args.follow) else ""
        out.item(record, first + event_row(record, everywhere))
        shown += 1
    if not shown and out.fmt in TABLES and not args.follow:
        where_ = "" if everywhere else f" in namespace {client.namespace}"
        out.note(
            f"No events found in worker {args.name}." if args.name else f"No events found{where_}."
        )
    return 0


# --- explain ---------------------------------------------------------------------------


def explain(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.explain(args.name)
    out.show(found, lambda: explanation_text(found))
    return 0


# --- profiles, revisions ---------------------------------------------------------------


def profiles(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.all_namespaces:
        if args.revision:
            raise UsageError("--revision names one agent's revision: drop -A")
        sets = client.profile_sets(args.agent, all_namespaces=True)
        empty = "" if any(s.profiles for s in sets) else "No profiles found."
        out.show(sets, lambda: profiles_text(sets, namespaces=True), empty)
        return 0
    found = client.profiles(agent_of(client, args), args.revision)
    empty = "" if found.profiles else f"No profiles in revision {found.revision.name}."
    out.show(found, lambda: profiles_text(found), empty)
    return 0


def profile_show(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.profile(agent_of(client, args), args.key, args.revision)
    profile = found.profile.model_dump(by_alias=True, exclude_none=True, mode="json")
    text = describe([("Key", found.profile.key), ("Hash", found.hash), ("Source", found.source)])
    out.show(
        found, lambda: text + "Profile:\n" + indented(yaml.safe_dump(profile, sort_keys=False))
    )
    return 0


def profile_diff(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.diff_revisions(agent_of(client, args), args.before, args.after)
    out.show(found, lambda: diff_text(found))
    return 0


def revisions(client: Client, args: argparse.Namespace, out: Output) -> int:
    everywhere = args.all_namespaces
    agent = args.agent if everywhere else agent_of(client, args)
    found = client.revisions(agent, all_namespaces=everywhere)
    text = lambda: revisions_text(found, namespaces=everywhere)  # noqa: E731
    out.show(found, text, "" if found else "No revisions found.")
    return 0


# --- quota -----------------------------------------------------------------------------


def quota(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = client.quotas(all_namespaces=args.all_namespaces)
    if args.name:
        found = [q for q in found if q.name == args.name]
        if not found:
            raise NotFoundError(f"no TokenQuota {args.name!r} in namespace {client.namespace}")
    where = "" if args.all_namespaces else f" in namespace {client.namespace}"
    empty = "" if found else f"No TokenQuotas found{where}."
    out.show(found, lambda: quotas_text(found, args.all_namespaces), empty)
    return 0
