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
    assert clocks.seconds_left(since, 30, NOW) == 10
    assert clocks.seconds_left(since, 15, NOW) == -5  # ran out
    assert clocks.seconds_left(None, 30, NOW) is None  # not running
    assert clocks.seconds_left(since, None, NOW) is None  # no limit
