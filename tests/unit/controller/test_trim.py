"""The trim thread: calls malloc_trim every period, stops when told; absent, does nothing."""

from __future__ import annotations

import threading
import time

import pytest

from agentworkers.controller import trim


def test_it_trims_every_period_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(trim, "_malloc_trim", lambda: calls.append)
    stop = threading.Event()
    assert trim.start(stop, period=0.01)
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls[:3] == [0, 0, 0]
    stop.set()
    time.sleep(0.05)
    settled = len(calls)
    time.sleep(0.05)
    assert len(calls) == settled


def test_without_malloc_trim_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trim, "_malloc_trim", lambda: None)
    assert not trim.start(threading.Event())
