"""Token quotas, decided: the window a moment falls in, what a quota's scope has used and
holds, and whether a spawn fits. Pure: the controller reads the runs and writes the status.

Windows are calendar windows in UTC (the hour, the day from 00:00, the month from its
first day), not rolling ones: "when it resets" is one instant everyone can name, and a
window's usage is one number on the status rather than a history of reports.

What a spawn is checked against is exact, not an estimate:

    left = tokens - used - reserved - pending

`used`: the tokens runs in scope reported in this window (each run's count is remembered
on the status, so a report is added once, and what a collected run used stays added);
`reserved`: what each live run may still use, its budget less what it used; `pending`:
the budgets of spawns just admitted whose Workers the operator has not seen yet. A run
that may use more than `left` is refused, so no window's runs can together pass its
quota: that is why, under a quota, a run needs a token budget.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agentworkers.api import reasons
from agentworkers.api.quota import TokenQuotaSpec, TokenQuotaStatus, Window
from agentworkers.core.clocks import stamp
from agentworkers.errors import TokenQuotaError


def window_bounds(window: Window, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The calendar window (UTC) `now` falls in: its start, and the start of the next."""
    now = now.astimezone(dt.UTC)
    if window == "Hour":
        start = now.replace(minute=0, second=0, microsecond=0)
        return start, start + dt.timedelta(hours=1)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "Day":
        return day, day + dt.timedelta(days=1)
    start = day.replace(day=1)
    following = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else (start.replace(month=start.month + 1))
    )
    return start, following


@dataclass(frozen=True)
class Run:
    """A Worker as a quota sees it."""

    uid: str
    agent: str
    tokens: int  # reported so far (status.tokensUsed)
    budget: int | None  # its agent's limits.tokenBudget
    live: bool  # not ended: it may use more


@dataclass(frozen=True)
class Usage:
    window_start: dt.datetime
    resets_at: dt.datetime
    used: int
    reserved: int
    counted: Mapping[str, int]

    def left(self, spec: TokenQuotaSpec, pending: int = 0) -> int:
        return spec.tokens - self.used - self.reserved - pending

    def status(self, spec: TokenQuotaSpec, now: dt.datetime) -> TokenQuotaStatus:
        return TokenQuotaStatus(
            window_start=stamp(self.window_start),
            resets_at=stamp(self.resets_at),
            used=self.used,
            reserved=self.reserved,
            remaining=max(self.left(spec), 0),
            counted=dict(self.counted),
            accounted_at=stamp(now),
        )


def in_scope(spec: TokenQuotaSpec, agent: str) -> bool:
    return spec.agent is None or spec.agent == agent


def account(
    spec: TokenQuotaSpec, status: TokenQuotaStatus, runs: Iterable[Run], now: dt.datetime
) -> Usage:
    """The quota's usage now, from its last status and the runs in its namespace.

    A run's tokens beyond what the status counted of it are added to this window's use; a
    new window starts at 0 but keeps the counts (what was used before it is not used in
    it). A run no longer there is dropped from the counts: its tokens stay in `used`.
    """
    start, end = window_bounds(spec.window, now)
    used = status.used if status.window_start == stamp(start) else 0
    counted: dict[str, int] = {}
    reserved = 0
    for run in runs:
        if not in_scope(spec, run.agent):
            continue
        before = status.counted.get(run.uid, 0)
        used += max(run.tokens - before, 0)
        if run.tokens or before:
            counted[run.uid] = max(run.tokens, before)
        if run.live and run.budget is not None:
            reserved += max(run.budget - run.tokens, 0)
    return Usage(start, end, used, reserved, counted)


def check_spawn(
    quota: str, spec: TokenQuotaSpec, usage: Usage, budget: int | None, pending: int = 0
) -> None:
    """A spawn of `budget` tokens fits the quota, or TokenQuotaError names the quota,
    what was used of it, what is held and when the window resets."""
    where = f"TokenQuota {quota!r}" + (f" (agent {spec.agent})" if spec.agent else "")
    resets = stamp(usage.resets_at)
    if budget is None:
        raise TokenQuotaError(
            field="spec.agent",
            rule=f"{where} caps this run's tokens, and the run has no token budget to hold "
            "against it: set its AgentConfig's spec.limits.tokenBudget",
            reason=reasons.TOKEN_QUOTA_NEEDS_BUDGET,
        )
    left = usage.left(spec, pending)
    if budget > left:
        held = usage.reserved + pending
        raise TokenQuotaError(
            field="spec.agent",
            rule=f"{where} has {max(left, 0)} of its {spec.tokens} tokens per "
            f"{spec.window.lower()} left ({usage.used} used, {held} held by live runs), "
            f"less than this run's tokenBudget {budget}; the window resets at {resets}",
            reason=reasons.TOKEN_QUOTA_EXCEEDED,
        )
