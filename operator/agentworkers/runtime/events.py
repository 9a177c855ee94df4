"""What a run does, as a stream of events: the seed's EventBus, and a sink for stdout.

The bus numbers events per worker from 1 and fans each one out to its subscribers'
bounded queues. A full queue loses the event (counted in ``drops``) rather than make
the agent loop wait: nothing a subscriber does may slow the run down. A bounded ring
keeps the latest events for ``recent`` (what inspect and the status ring read).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TextIO

from agentworkers.core.clocks import now

log = logging.getLogger(__name__)

MAX_SUMMARY = 1024  # WorkerEvent.summary's limit
DEFAULT_RING = 200
DEFAULT_QUEUE = 256


class EventKind(StrEnum):
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    THOUGHT = "thought"
    ASSISTANT_MESSAGE = "assistant_message"
    STATUS_CHANGE = "status_change"
    NOTICE = "notice"  # something the user should know that is not a step: a skill missing
    MCP_SERVER = "mcp_server"


@dataclass(frozen=True)
class Event:
    """One thing a run did. Payloads by kind:

    tool_call ``{name, id, args}``; tool_result ``{name, id, result}`` or
    ``{name, id, error}``; thought and assistant_message ``{text}``; status_change
    ``{status}`` plus ``error`` when it failed; notice ``{text}`` plus what it is about
    (``skill``); mcp_server ``{name, url, state, required}`` plus ``tools`` (connected:
    the names offered) or ``error`` (unavailable).
    """

    worker: str
    index: int
    time: str
    kind: EventKind
    payload: dict[str, Any]

    def to_json_line(self) -> str:
        """The event as one JSON object, without the newline (json.dumps escapes any)."""
        return json.dumps(
            {
                "worker": self.worker,
                "index": self.index,
                "time": self.time,
                "kind": self.kind.value,
                "payload": self.payload,
            },
            ensure_ascii=False,
            default=str,
        )

    def summary(self) -> str:
        """A short rendering for the status ring (at most MAX_SUMMARY characters)."""
        p = self.payload
        match self.kind:
            case EventKind.TOOL_CALL:
                text = f"{p.get('name')}({_compact(p.get('args', {}))})"
            case EventKind.TOOL_RESULT:
                if "error" in p:
                    text = f"{p.get('name')} error: {p['error']}"
                else:
                    text = f"{p.get('name')} -> {_compact(p.get('result'))}"
            case EventKind.STATUS_CHANGE:
                text = str(p.get("status", ""))
                if p.get("error"):
                    text += f": {p['error']}"
            case EventKind.MCP_SERVER:
                text = f"MCP server {p.get('name')} {p.get('state')}"
                count = len(p.get("tools", []))
                tools = f"{count} tool{'' if count == 1 else 's'}"
                text += f": {p['error']}" if p.get("error") else f": {tools}"
            case _:
                text = str(p.get("text", ""))
        return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 1] + "…"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class EventBus:
    """Numbers, records and fans out one worker's events. Thread-safe."""

    def __init__(self, worker_id: str, ring_size: int = DEFAULT_RING) -> None:
        self.worker_id = worker_id
        self._lock = threading.Lock()
        self._index = 0
        self._ring: deque[Event] = deque(maxlen=ring_size)
        # Each subscriber's queue with the size it may fill; its last slot stays free so
        # the end marker (None) always fits.
        self._subscribers: list[tuple[queue.Queue[Event | None], int]] = []
        self._drops = 0
        self._closed = False

    @property
    def drops(self) -> int:
        """Events lost to full subscriber queues, over all subscribers."""
        with self._lock:
            return self._drops

    @property
    def last_index(self) -> int:
        with self._lock:
            return self._index

    def publish(self, kind: EventKind, payload: dict[str, Any]) -> Event:
        """Number the event, keep it in the ring and offer it to every subscriber.

        Never blocks: a subscriber whose queue is full loses this event. Delivery happens
        under the lock, so every subscriber sees events in index order. After ``close``
        events are still numbered and kept, but reach no subscriber.
        """
        with self._lock:
            self._index += 1
            event = Event(self.worker_id, self._index, now(digits=3), kind, payload)
            self._ring.append(event)
            for q, limit in self._subscribers:
                # Only this method adds to the queue, under this lock, and consumers only
                # take from it: a size below the limit cannot fill up before the put.
                if q.qsize() >= limit:
                    self._drops += 1
                else:
                    q.put_nowait(event)
            return event

    def subscribe(
        self, maxsize: int = DEFAULT_QUEUE
    ) -> tuple[queue.Queue[Event | None], Callable[[], None]]:
        """A queue of the events published from now on, and a function to unsubscribe.

        The queue receives None, once, when the subscription ends (unsubscribe or close).
        """
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        q: queue.Queue[Event | None] = queue.Queue(maxsize + 1)
        entry = (q, maxsize)
        with self._lock:
            if self._closed:
                q.put_nowait(None)
            else:
                self._subscribers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry not in self._subscribers:
                    return
                self._subscribers.remove(entry)
                q.put_nowait(None)

        return q, unsubscribe

    def recent(self, since: int = 0, limit: int = 50) -> list[Event]:
        """The latest ``limit`` events with an index above ``since`` still in the ring,
        oldest first. Events can be missing, fallen out of the ring or past ``limit``:
        a gap after ``since`` says so."""
        with self._lock:
            newer = [e for e in self._ring if e.index > since]
        return newer[-limit:] if limit > 0 else []

    def close(self) -> None:
        """End every subscription; idempotent."""
        with self._lock:
            self._closed = True
            subscribers, self._subscribers = self._subscribers, []
            for q, _ in subscribers:
                q.put_nowait(None)


class JsonLinesSink:
    """Writes every event of a bus as a JSON line to a text stream (the pod's stdout).

    Writing happens on the sink's own thread: a stalled stream fills the sink's queue
    and costs events (counted by the bus), never the publisher's time.
    """

    def __init__(self, bus: EventBus, stream: TextIO, maxsize: int = 1024) -> None:
        self._stream = stream
        self._queue, self._unsubscribe = bus.subscribe(maxsize)
        self._thread = threading.Thread(
            target=self._run, name=f"events-{bus.worker_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                self._stream.write(event.to_json_line() + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                # A closed or broken stream will not come back; stop taking events.
                log.exception("event sink stream failed; no more events are written")
                self._unsubscribe()
                return

    def close(self, timeout: float = 5.0) -> None:
        """Stop after writing what is already queued (waiting at most ``timeout``)."""
        self._unsubscribe()
        self._thread.join(timeout)
