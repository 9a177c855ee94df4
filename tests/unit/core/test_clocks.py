"""The three clocks, pure: a child's deadline within its parent's, and how long is left."""

from __future__ import annotations

import datetime as dt

from agentworkers.core import clocks

NOW = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_a_child_never_outlives_what_is_left_of_its_parent_s_deadline() -> None:
    parent_ends = clocks.stamp(NOW + dt.timedelta(seconds=90))
    in_30 = clocks.stamp(NOW + dt.timedelta(seconds=30))
    assert clocks.deadline(600, parent_ends, NOW) == (90, parent_ends)  # cut to the parent's
    assert clocks.deadline(30, parent_ends, NOW) == (30, in_30)  # its own, when sooner
    assert clocks.deadline(None, parent_ends, NOW) == (90, parent_ends)  # none of its own
    assert clocks.deadline(600, None, NOW) == (600, clocks.stamp(NOW + dt.timedelta(seconds=600)))
    assert clocks.deadline(None, None, NOW) is None
    past = clocks.stamp(NOW - dt.timedelta(seconds=5))
    assert clocks.deadline(600, past, NOW) == (1, past)  # the parent is being stopped


def test_seconds_left_on_a_clock() -> None:
    since = clocks.stamp(NOW - dt.timedelta(seconds=20))
    spread = clocks.fraction("uid-1")
    assert clocks.seconds_left(since, 30, NOW, spread="uid-1") == 10 + spread
    assert clocks.seconds_left(since, 15, NOW, spread="uid-1") == -5 + spread  # ran out
    assert clocks.seconds_left(None, 30, NOW, spread="uid-1") is None  # not running
    assert clocks.seconds_left(since, None, NOW, spread="uid-1") is None  # no limit


def test_clocks_started_in_one_second_run_out_across_it_not_in_one_instant() -> None:
    """Timestamps are whole seconds: the pods of a second's spawns all started "at" it.
    Their runs' clocks run out spread over the second after, each at its own moment."""
    since = clocks.stamp(NOW - dt.timedelta(seconds=3))
    uids = [f"4f6c3a9e-{i:04d}-4c1b-9d2e-6a1f0b7c8d9e" for i in range(100)]
    lefts = [clocks.seconds_left(since, 3, NOW, spread=uid) for uid in uids]
    assert all(left is not None and 0 <= left < 1 for left in lefts)
    # No tenth of the second holds more than a fifth of them.
    tenths = [int(left * 10) for left in lefts if left is not None]
    assert max(tenths.count(t) for t in range(10)) <= 20
    assert clocks.fraction(uids[0]) == clocks.fraction(uids[0])  # the same in every pass


def test_times_are_read_and_written_one_way() -> None:
    """The one place times are parsed and formatted: the API's form (UTC, to the second,
    `Z`), a MicroTime's (a Lease's renewTime) and the runtime events' milliseconds."""
    moment = dt.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    assert clocks.stamp(moment) == "2030-01-02T03:04:05Z"
    assert clocks.stamp(moment, 3) == "2030-01-02T03:04:05.678Z"
    assert clocks.stamp(moment, 6) == "2030-01-02T03:04:05.678901Z"
    assert clocks.parse("2030-01-02T03:04:05Z") == moment.replace(microsecond=0)
    assert clocks.parse("2030-01-02T05:04:05+02:00") == moment.replace(microsecond=0)
    assert clocks.parse("2030-01-02T03:04:05") == moment.replace(microsecond=0)  # UTC
    assert clocks.parse(clocks.stamp(moment, 6)) == moment
    assert clocks.parse(clocks.now()) <= dt.datetime.now(dt.UTC)
