"""How a verb prints: `Output` (a table or text for people, `-o json|yaml` for scripts;
remarks on stderr, which --quiet silences) and `Waiting` (progress while a verb waits)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from agentworkers.cli.parsers import TABLES
from agentworkers.cli.render import dump, json_line
from agentworkers.client import WorkerInfo


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
        if self.fmt not in TABLES:
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

    def item(self, value: Any, text: str) -> None:
        """One item of a stream: `text` for people, else a JSON line or a YAML document."""
        if self.fmt in TABLES:
            self.stdout.write(text)
        elif self.fmt == "json":
            self.stdout.write(json_line(value))
        else:
            self.stdout.write("---\n" + dump(value, "yaml"))
        self.stdout.flush()


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
