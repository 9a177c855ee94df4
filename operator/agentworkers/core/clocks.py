"""A run's three clocks. Pure: times in, decisions out.

- **Deadline**: the longest a run may take (its pod's `activeDeadlineSeconds`). A child's
  never outlives what is left of its parent's: a tree stops together.
- **Idle timeout**: how long an interactive run may wait Idle for a query before it ends
  (Done, reason IdleTimeout) and frees its pod.
- **TTL after finished**: how long a finished run nobody has to collect stays before it is
  deleted, like a Job's `ttlSecondsAfterFinished`.

Times are the API's: RFC 3339 in UTC, to the second.
"""

from __future__ import annotations

import datetime as dt


def parse(timestamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(timestamp)


def stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deadline(
    own: int | None, parent_deadline_at: str | None, now: dt.datetime
) -> tuple[int, str] | None:
    """The run's deadline starting `now`: seconds (its pod's activeDeadlineSeconds) and the
    moment it runs out. Its own, or what is left of its parent's when that is sooner (then
    exactly the parent's moment; at least 1 s: a parent past it is being stopped anyway)."""
    own_at = now + dt.timedelta(seconds=own) if own else None
    if parent_deadline_at is not None:
        parent_at = parse(parent_deadline_at)
        if own_at is None or parent_at < own_at:
            return max(1, int((parent_at - now).total_seconds())), parent_deadline_at
    if own_at is None or own is None:
        return None
    return own, stamp(own_at)


def seconds_left(since: str | None, limit: float | None, now: dt.datetime) -> float | None:
    """Seconds until a clock started at `since` runs `limit` seconds out (0 or less: it
    has); None when the clock is not running or has no limit."""
    if since is None or limit is None:
        return None
    return limit - (now - parse(since)).total_seconds()
