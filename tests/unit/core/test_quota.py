"""Token quotas decided without a cluster: calendar windows, usage counted once across
reports, windows and collections, and whether a spawn fits (with the reason if not)."""

from __future__ import annotations

import datetime as dt

import pytest

from agentworkers.api.quota import TokenQuotaSpec, TokenQuotaStatus
from agentworkers.core.clocks import stamp
from agentworkers.core.quota import Run, account, check_spawn, window_bounds
from agentworkers.errors import TokenQuotaError

NOW = dt.datetime(2030, 12, 31, 23, 30, 5, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("window", "start", "end"),
    [
        ("Hour", "2030-12-31T23:00:00Z", "2031-01-01T00:00:00Z"),
        ("Day", "2030-12-31T00:00:00Z", "2031-01-01T00:00:00Z"),
        ("Month", "2030-12-01T00:00:00Z", "2031-01-01T00:00:00Z"),
    ],
)
def test_windows_are_calendar_windows_in_utc(window: str, start: str, end: str) -> None:
    found = window_bounds(window, NOW)  # type: ignore[arg-type]
    assert (stamp(found[0]), stamp(found[1])) == (start, end)
    # Any zone: the same instant, the same window.
    elsewhere = NOW.astimezone(dt.timezone(dt.timedelta(hours=9)))
    assert window_bounds(window, elsewhere) == found  # type: ignore[arg-type]


def test_a_month_in_the_middle_of_the_year() -> None:
    start, end = window_bounds("Month", dt.datetime(2030, 2, 14, tzinfo=dt.UTC))
    assert (stamp(start), stamp(end)) == ("2030-02-01T00:00:00Z", "2030-03-01T00:00:00Z")


def run(
    uid: str, tokens: int, budget: int | None = 100, live: bool = True, agent: str = "a"
) -> Run:
    return Run(uid, agent, tokens, budget, live)


def test_each_report_is_counted_once_and_a_gone_run_stays_counted() -> None:
    spec = TokenQuotaSpec(tokens=1000, window="Day")
    first = account(spec, TokenQuotaStatus(), [run("w1", 30), run("w2", 0)], NOW)
    assert (first.used, first.reserved, dict(first.counted)) == (30, 70 + 100, {"w1": 30})
    # w1 reported more; w2 its first; nothing is counted twice.
    again = account(spec, first.status(spec, NOW), [run("w1", 50), run("w2", 10)], NOW)
    assert (again.used, dict(again.counted)) == (60, {"w1": 50, "w2": 10})
    # w1 collected: its tokens stay used, its count is dropped; w2 ended: it holds nothing.
    later = account(spec, again.status(spec, NOW), [run("w2", 10, live=False)], NOW)
    assert (later.used, later.reserved, dict(later.counted)) == (60, 0, {"w2": 10})
    assert later.status(spec, NOW).remaining == 940


def test_a_new_window_starts_at_zero_without_counting_the_old_window_again() -> None:
    spec = TokenQuotaSpec(tokens=1000, window="Hour")
    before = account(spec, TokenQuotaStatus(), [run("w1", 400)], NOW)
    next_hour = NOW + dt.timedelta(hours=1)
    after = account(spec, before.status(spec, NOW), [run("w1", 450)], next_hour)
    assert after.used == 50  # only what it used since the last count
    assert stamp(after.window_start) == "2031-01-01T00:00:00Z"


def test_an_agent_s_quota_counts_that_agent_s_runs_only() -> None:
    spec = TokenQuotaSpec(tokens=1000, agent="a")
    usage = account(spec, TokenQuotaStatus(), [run("w1", 5), run("w2", 7, agent="b")], NOW)
    assert (usage.used, dict(usage.counted)) == (5, {"w1": 5})


def test_a_spawn_that_does_not_fit_is_refused_naming_quota_use_and_reset() -> None:
    spec = TokenQuotaSpec(tokens=1000, window="Day", agent="a")
    usage = account(spec, TokenQuotaStatus(), [run("w1", 600, budget=700)], NOW)
    check_spawn("team-a", spec, usage, 300)  # 1000 - 600 used - 100 held = 300: fits
    with pytest.raises(TokenQuotaError) as refused:
        check_spawn("team-a", spec, usage, 300, pending=1)
    assert refused.value.reason == "TokenQuotaExceeded"
    assert str(refused.value) == (
        "spec.agent: TokenQuota 'team-a' (agent a) has 299 of its 1000 tokens per day left "
        "(600 used, 101 held by live runs), less than this run's tokenBudget 300; the window "
        "resets at 2031-01-01T00:00:00Z"
    )


def test_under_a_quota_a_run_needs_a_budget() -> None:
    spec = TokenQuotaSpec(tokens=1000)
    with pytest.raises(TokenQuotaError, match="no token budget") as refused:
        check_spawn("team-a", spec, account(spec, TokenQuotaStatus(), [], NOW), None)
    assert refused.value.reason == "TokenQuotaNeedsBudget"
