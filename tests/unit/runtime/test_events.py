"""The event bus: numbering, fan-out that never waits, the ring, and the JSON-lines sink."""

from __future__ import annotations

import io
import json
import queue
import threading
import time

from agentworkers.api.worker import WorkerEvent
from agentworkers.runtime.events import MAX_SUMMARY, Event, EventBus, EventKind, JsonLinesSink


def drain(q: queue.Queue[Event | None]) -> list[Event | None]:
    items: list[Event | None] = []
    while not q.empty():
        items.append(q.get_nowait())
    return items


def test_indexes_are_monotonic_from_one_across_threads() -> None:
    bus = EventBus("w1")
    q, _ = bus.subscribe(maxsize=1000)

    def publish_many() -> None:
        for n in range(100):
            bus.publish(EventKind.THOUGHT, {"text": str(n)})

    threads = [threading.Thread(target=publish_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)

    seen = [e.index for e in drain(q) if e is not None]
    assert seen == list(range(1, 401))  # every index once, delivered in order
    assert bus.last_index == 400
    assert bus.drops == 0


def test_a_full_subscriber_loses_events_counted_and_never_blocks() -> None:
    bus = EventBus("w1")
    slow, _ = bus.subscribe(maxsize=2)  # never read
    fast, _ = bus.subscribe(maxsize=1000)

    started = time.monotonic()
    for n in range(500):
        bus.publish(EventKind.ASSISTANT_MESSAGE, {"text": str(n)})
    assert time.monotonic() - started < 2.0

    assert bus.drops == 498
    assert [e.index for e in drain(slow) if e] == [1, 2]
    assert len(drain(fast)) == 500


def test_unsubscribe_and_close_end_subscriptions_with_none() -> None:
    bus = EventBus("w1")
    q1, unsubscribe = bus.subscribe(maxsize=1)
    q2, _ = bus.subscribe(maxsize=1)
    bus.publish(EventKind.THOUGHT, {"text": "fills both"})
    unsubscribe()
    unsubscribe()  # idempotent
    bus.publish(EventKind.THOUGHT, {"text": "only q2 would take it, but it is full"})
    bus.close()

    assert [e.index if e else None for e in drain(q1)] == [1, None]
    assert [e.index if e else None for e in drain(q2)] == [1, None]
    assert bus.drops == 1
    late, _ = bus.subscribe()
    assert drain(late) == [None]
    assert bus.publish(EventKind.THOUGHT, {"text": "kept"}).index == 3
    assert bus.recent(since=2)[0].payload == {"text": "kept"}


def test_recent_pages_with_a_since_cursor_over_a_bounded_ring() -> None:
    bus = EventBus("w1", ring_size=5)
    for n in range(8):
        bus.publish(EventKind.THOUGHT, {"text": str(n)})

    assert [e.index for e in bus.recent()] == [4, 5, 6, 7, 8]  # 1..3 fell out of the ring
    assert [e.index for e in bus.recent(since=6)] == [7, 8]
    assert [e.index for e in bus.recent(since=0, limit=2)] == [7, 8]  # the latest
    assert bus.recent(limit=0) == []
    assert bus.recent(since=8) == []


def test_json_line_shape() -> None:
    event = EventBus("w1").publish(EventKind.TOOL_CALL, {"name": "read_file", "id": "c1"})
    line = event.to_json_line()

    assert "\n" not in line
    decoded = json.loads(line)
    assert decoded == {
        "worker": "w1",
        "index": 1,
        "time": event.time,
        "kind": "tool_call",
        "payload": {"name": "read_file", "id": "c1"},
    }
    assert event.time.endswith("Z") and event.time[10] == "T"


def test_summaries_are_short_and_fit_the_status_ring() -> None:
    bus = EventBus("w1")
    call = bus.publish(EventKind.TOOL_CALL, {"name": "read_file", "id": "c", "args": {"p": 1}})
    failed = bus.publish(EventKind.TOOL_RESULT, {"name": "read_file", "id": "c", "error": "no"})
    status = bus.publish(EventKind.STATUS_CHANGE, {"status": "failed", "error": "boom"})
    long = bus.publish(EventKind.ASSISTANT_MESSAGE, {"text": "x" * 5000})
    up = bus.publish(EventKind.MCP_SERVER, {"name": "fx", "state": "Connected", "tools": ["a"]})
    down = bus.publish(EventKind.MCP_SERVER, {"name": "g", "state": "Unavailable", "error": "x"})

    assert call.summary() == 'read_file({"p":1})'
    assert failed.summary() == "read_file error: no"
    assert status.summary() == "failed: boom"
    assert len(long.summary()) == MAX_SUMMARY
    assert up.summary() == "MCP server fx Connected: 1 tool"
    assert down.summary() == "MCP server g Unavailable: x"
    for event in (call, failed, status, long, up, down):
        entry = WorkerEvent(
            index=event.index, kind=event.kind.value, time=event.time, summary=event.summary()
        )
        assert entry.kind == event.kind


class StalledStream(io.StringIO):
    """A stdout nobody reads: every write waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, s: str) -> int:
        self.release.wait(5)
        return super().write(s)


def test_sink_writes_json_lines_without_ever_blocking_the_publisher() -> None:
    bus = EventBus("w1")
    stream = StalledStream()
    sink = JsonLinesSink(bus, stream, maxsize=10)

    started = time.monotonic()
    for n in range(200):
        bus.publish(EventKind.THOUGHT, {"text": str(n)})
    assert time.monotonic() - started < 2.0
    assert bus.drops > 0

    stream.release.set()
    sink.close()
    lines = stream.getvalue().splitlines()
    indexes = [json.loads(line)["index"] for line in lines]
    assert indexes[0] == 1
    assert indexes == sorted(indexes)
    assert len(lines) + bus.drops == 200
