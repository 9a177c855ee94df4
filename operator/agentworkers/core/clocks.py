"""A run's three clocks. Pure: times in, decisions out.

- **Deadline**: the longest a run may take (its pod's `activeDeadlineSeconds`). A child's
  never outlives what is left of its parent's: a tree stops together.
- **Idle timeout**: how long an interactive run may wait Idle for a query before it ends
  (Done, reason IdleTimeout) and frees its pod.
- **TTL after finished**: how long a finished run nobody has to collect stays before it is
  deleted, like a Job's `ttlSecondsAfterFinished`.

Times are the API's: RFC 3339 in UTC, to the second. `parse` and `stamp` are the one
place times are read and written, for every layer (the store's, conditions', Events',
Leases', the CLI's and the runtime's).
"""

from __future__ import annotations

import datetime as dt
import zlib


def parse(timestamp: str) -> dt.datetime:
    """An RFC 3339 time (`Z` or an offset; a time without one is UTC), timezone-aware."""
    moment = dt.datetime.fromisoformat(timestamp)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def stamp(moment: dt.datetime, digits: int = 0) -> str:
    """`moment` in UTC with a `Z`: to the second (the API's Time), or with `digits` (3, 6)
    of the second's fraction (6: a MicroTime, as a Lease's renewTime)."""
    utc = moment.astimezone(dt.UTC)
    fraction = f".{utc.microsecond:06d}"[: digits + 1] if digits else ""
    return f"{utc:%Y-%m-%dT%H:%M:%S}{fraction}Z"


def now(digits: int = 0) -> str:
    """The time now, as `stamp` writes it."""
    return stamp(dt.datetime.now(dt.UTC), digits)


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


def seconds_left(
    since: str | None, limit: float | None, now: dt.datetime, *, spread: str
) -> float | None:
    """Seconds until a clock started at `since` runs `limit` seconds out (0 or less: it
    has); None when the clock is not running or has no limit.

    `since` is to the second, so every clock started in one second would run out in the
    same instant: a burst of passes and writes each second, which the spawns in flight
    then wait behind. Each clock runs out at its own fraction of that second instead,
    from `spread` (its object's uid)."""
    if since is None or limit is None:
        return None
    return limit + fraction(spread) - (now - parse(since)).total_seconds()


def fraction(key: str) -> float:
    """A fraction of a second in [0, 1), the same for `key` in every process."""
    return zlib.crc32(key.encode()) / 2**32
