"""How the CLI prints: kubectl-like tables and descriptions for people, JSON and YAML for scripts.

Pure: everything takes values (the client's results) and returns text.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from agentworkers.cli.parsers import EVENT_COLUMNS, NAMESPACE_COLUMN, WATCH_COLUMNS
from agentworkers.client import (
    CollectResult,
    EventRecord,
    Explanation,
    Inspection,
    KillResult,
    ProfileDiff,
    ProfileSet,
    QuotaInfo,
    RevisionInfo,
    TreeNode,
    WorkerInfo,
    revision_ref,
)
from agentworkers.core import clocks

NONE = "<none>"
CELL_WIDTH = 60
COLUMN_GAP = "   "


def plain(value: Any) -> Any:
    """JSON-ready data: models as the API spells them (camelCase), dataclasses likewise."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {to_camel(f.name): plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def dump(value: Any, fmt: str) -> str:
    """`value` as one JSON or YAML document, ending in a newline; a sequence as a `List`
    (kubectl's wrapper: `.items[]` for jq, whatever the count)."""
    data = plain(value)
    if isinstance(data, list):
        data = {"apiVersion": "v1", "kind": "List", "items": data}
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def json_line(value: Any) -> str:
    """One compact JSON object a line (JSON Lines), for streams."""
    return json.dumps(plain(value), separators=(",", ":")) + "\n"


def cell(value: Any, width: int = CELL_WIDTH) -> str:
    """One table cell: one line, at most `width` characters."""
    if value is None or value in ("", [], ()):
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        text = ",".join(cell(v, width) for v in value)
    elif isinstance(value, Mapping):
        text = json.dumps(plain(value), separators=(",", ":"))
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], verbatim: Sequence[int] = ()
) -> str:
    """Columns as kubectl lays them out: upper-case headers, left-aligned, three spaces apart.
    Cells are one line each; the `verbatim` columns keep their spacing (a tree's indent)."""
    cells = [
        [h.upper() for h in headers],
        *([str(v) if i in verbatim else cell(v) for i, v in enumerate(row)] for row in rows),
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = (COLUMN_GAP.join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells)
    return "".join(line.rstrip() + "\n" for line in lines)


def describe(pairs: Sequence[tuple[str, Any]]) -> str:
    """`Key:  value` lines, as kubectl describe; a multi-line value is indented below its key."""
    width = max((len(k) for k, _ in pairs), default=0) + 3  # the longest key, two spaces
    out = []
    for key, value in pairs:
        text = value if isinstance(value, str) else cell(value, width=10_000)
        if "\n" in text.rstrip("\n"):
            out.append(f"{key}:\n" + "".join(f"  {line}\n" for line in text.splitlines()))
        else:
            out.append(f"{f'{key}:':<{width}}{text or NONE}\n")
    return "".join(out)


def age(timestamp: str | None, now: dt.datetime | None = None) -> str:
    """How long ago, as kubectl writes it: 45s, 5m30s, 42m, 5h30m, 30h, 3d5h, 120d."""
    if not timestamp:
        return NONE
    now = now or dt.datetime.now(dt.UTC)
    seconds = max(int((now - clocks.parse(timestamp)).total_seconds()), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def short(digest: str | None) -> str:
    """A digest or hash as people compare them: its first 12 hex digits."""
    return digest[:12] if digest else NONE


# --- what each verb shows ------------------------------------------------------------


def led(namespaces: bool, header: Sequence[str]) -> tuple[str, ...]:
    """The header, led by NAMESPACE when a verb reads every namespace (kubectl -A)."""
    return (("NAMESPACE",) if namespaces else ()) + tuple(header)


def _worker_cells(w: WorkerInfo, namespaces: bool) -> tuple[Any, ...]:
    lead = (w.namespace,) if namespaces else ()
    return (
        *lead,
        *(w.name, w.phase, w.spec.kind, w.spec.agent, w.spec.profile, w.spec.parent),
        w.status.last_event,
        age(w.created),
    )


def worker_rows(workers: Sequence[WorkerInfo], wide: bool = False, namespaces: bool = False) -> str:
    """The list table; `wide` adds the pod, the revision the run uses and its start;
    `namespaces` leads with the namespace (list -A)."""
    header = led(
        namespaces, ("NAME", "PHASE", "KIND", "AGENT", "PROFILE", "PARENT", "LAST EVENT", "AGE")
    )
    extra = ("POD", "REVISION", "STARTED") if wide else ()
    return table(
        header + extra,
        (
            (
                *_worker_cells(w, namespaces),
                *((w.status.pod, w.status.revision, when(w.status.started_at)) if wide else ()),
            )
            for w in workers
        ),
    )


def stream_header(columns: Sequence[tuple[str, int]], namespaces: bool) -> str:
    """The header of a streamed table (events, list -w): fixed widths, as its rows."""
    every = ((NAMESPACE_COLUMN,) if namespaces else ()) + tuple(columns)
    return fixed_row([h for h, _ in every], [w for _, w in every])


def fixed_row(values: Sequence[Any], widths: Sequence[int]) -> str:
    """One streamed row: fixed widths, since the rows to come are not known yet (0: the
    rest of the line). A longer value is never cut (a namespace or a name is how a row
    is found again): it pushes the rest of its row to the right."""
    cells = [cell(v, 200).ljust(w) for v, w in zip(values, widths, strict=True)]
    return " ".join(cells).rstrip() + "\n"


def watch_row(info: WorkerInfo, namespaces: bool = False) -> str:
    """One row of list -w."""
    widths = [w for _, w in ((NAMESPACE_COLUMN,) if namespaces else ()) + WATCH_COLUMNS]
    return fixed_row(_worker_cells(info, namespaces), widths)


def tree_text(roots: TreeNode | Sequence[TreeNode], namespaces: bool = False) -> str:
    """Spawn trees, as kubectl tree draws an owner tree: one row a worker, one table for
    them all; `namespaces` leads with the namespace (tree -A)."""
    rows: list[tuple[Any, ...]] = []

    def walk(node: TreeNode, lead: str, branch: str) -> None:
        w = node.worker
        why = w.status.error if w.phase in ("Failed", "Killed") else w.waiting
        used = w.status.tokens_used.total if w.status.tokens_used else None
        name = lead + branch + w.name
        cells = (name, w.phase, w.spec.profile, used, age(w.created), why)
        rows.append(((w.namespace,) if namespaces else ()) + cells)
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1
            below = lead + ("    " if branch in ("", "└── ") else "│   ")
            walk(child, below if branch else "", "└── " if last else "├── ")

    for root in [roots] if isinstance(roots, TreeNode) else roots:
        walk(root, "", "")
    header = led(namespaces, ("NAME", "PHASE", "PROFILE", "TOKENS", "AGE", "REASON"))
    text = table(header, rows, verbatim=(int(namespaces),))
    if isinstance(roots, TreeNode) and roots.trace_id:
        text += f"\nTrace ID: {roots.trace_id}\n"
    return text


def inspection_text(found: Inspection, since: int) -> str:
    w, status = found.worker, found.worker.status
    queries = f"{len(w.spec.queries)} ({status.queries_delivered or 0} delivered)"
    frozen = status.frozen_revision.name if status.frozen_revision else None
    revision = revision_ref(w.spec.agent, status.binding.revision) if status.binding else frozen
    text = describe(
        [
            ("Name", w.name),
            ("Description", w.spec.description or None),
            ("Kind", w.spec.kind),
            ("Agent", w.spec.agent),
            ("Profile", w.spec.profile),
            ("Parent", w.spec.parent),
            ("Inputs", ", ".join(i.name for i in w.spec.inputs) or None),
            ("Phase", w.phase),
            ("Waiting", w.waiting),
            ("Started", when(status.started_at)),
            ("Updated", when(status.updated_at)),
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


def collect_text(result: CollectResult) -> str:
    done = (
        "collected and deleted, with its pod and children"
        if result.deleted
        else "collected and kept (delete it when done: kubectl delete worker)"
    )
    text = describe(
        [
            ("Name", result.name),
            ("Phase", result.phase),
            ("Error", result.error),
            *(
                [("Killed children", ", ".join(result.killed_children))]
                if result.killed_children
                else []
            ),
            ("Output", result.output),
        ]
    )
    return f"{text}worker/{result.name} {done}\n"


def when(stamp: str | None) -> str | None:
    """One time format everywhere: UTC, to the second, `Z` (the API's own)."""
    if not stamp:
        return stamp
    try:
        return clocks.stamp(clocks.parse(stamp))
    except ValueError:
        return stamp


def event_row(record: EventRecord, namespaces: bool = False) -> str:
    """One streamed event; `namespaces` leads with its namespace (events -A)."""
    values = (record.worker, record.index, record.kind, when(record.time), record.summary)
    columns = ((NAMESPACE_COLUMN,) if namespaces else ()) + EVENT_COLUMNS
    lead = (record.namespace,) if namespaces else ()
    return fixed_row((*lead, *values), [w for _, w in columns])


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
    fields = (*found.fields, *found.mcp, *found.pod, *found.tree)
    rows = table(("FIELD", "VALUE", "LAYER"), ((f.field, f.value, f.layer) for f in fields))
    return head + "\n" + rows


def profiles_text(found: ProfileSet | Sequence[ProfileSet], namespaces: bool = False) -> str:
    """One revision's profiles; or several agents' (profiles -A), with NAMESPACE and AGENT."""
    if isinstance(found, ProfileSet):
        return table(
            ("KEY", "LABEL", "HASH", "SOURCE", "REVISION"),
            (
                (p.profile.key, p.profile.label, short(p.hash), p.source, found.revision.revision)
                for p in found.profiles
            ),
        )
    return table(
        led(namespaces, ("AGENT", "KEY", "LABEL", "HASH", "SOURCE", "REVISION")),
        (
            (
                *((s.revision.namespace,) if namespaces else ()),
                *(s.revision.agent, p.profile.key, p.profile.label, short(p.hash), p.source),
                s.revision.revision,
            )
            for s in found
            for p in s.profiles
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


def revisions_text(found: Sequence[RevisionInfo], namespaces: bool = False) -> str:
    return table(
        led(namespaces, ("NAME", "REVISION", "DIGEST", "PROFILES", "ACTIVE", "AGE", "APPLIED BY")),
        (
            (
                *((r.namespace,) if namespaces else ()),
                *(r.name, r.revision, short(r.digest), r.profiles, r.active, age(r.created)),
                r.applied_by or "-",
            )
            for r in found
        ),
    )


def quotas_text(found: Sequence[QuotaInfo], namespaces: bool = False) -> str:
    """TokenQuotas with their use this window, as `kubectl get tokenquotas` lists them."""
    header = ("NAME", "AGENT", "WINDOW", "LIMIT", "USED", "RESERVED", "REMAINING", "RESETS")
    return table(
        led(namespaces, header),
        (
            (
                *((q.namespace,) if namespaces else ()),
                *(q.name, q.agent or "(all)", q.window, q.tokens, q.used, q.reserved),
                q.remaining,
                when(q.resets_at),
            )
            for q in found
        ),
    )


def _ref(name: str, namespace: str, namespaces: bool) -> str:
    """worker/NAME, as kubectl names an object; across namespaces, NAMESPACE/worker/NAME."""
    return f"{namespace}/worker/{name}" if namespaces else f"worker/{name}"


def kill_lines(results: Sequence[KillResult], namespaces: bool = False) -> str:
    """A line per matched worker, as kubectl delete prints them."""
    lines = []
    for r in results:
        said = {
            "killed": f"killed: {r.reason}",
            "already killed": f"already killed: {r.reason}",
            "finished": f"{r.phase} already: nothing to kill",
        }[r.outcome]
        dry = " (dry run)" if r.dry_run else ""
        lines.append(f"{_ref(r.name, r.namespace, namespaces)} {said}{dry}\n")
    return "".join(lines)


def count(results: Sequence[KillResult]) -> str:
    """How many a selection matched and what was (or would be) done to them."""
    tally = {o: sum(r.outcome == o for r in results) for o in ("killed", "already killed")}
    tally["left alone (finished)"] = sum(r.outcome == "finished" for r in results)
    done = ", ".join(f"{n} {what}" for what, n in tally.items() if n)
    noun = "worker" if len(results) == 1 else "workers"
    dry = " (dry run: nothing sent)" if any(r.dry_run for r in results) else ""
    return f"{len(results)} {noun} matched: {done}{dry}"


def collect_line(result: CollectResult, namespaces: bool = False, dry_run: bool = False) -> str:
    """One line for a worker a selection collected (or, dry, would collect)."""
    ref = _ref(result.name, result.namespace, namespaces)
    if dry_run:
        return f"{ref} collected (dry run): {result.phase} now\n"
    if not result.deleted and result.error:
        return f"{ref} {result.error}\n"
    kept = "collected" if result.deleted else "collected and kept"
    error = f", error: {cell(result.error)}" if result.error else ""
    return f"{ref} {kept}: {result.phase}{error}, output: {cell(result.output)}\n"


def indented(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())
