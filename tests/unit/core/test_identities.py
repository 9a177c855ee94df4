"""What a pool pass over pooled identities decides: an account is free only when no pod
runs as it and its quarantine has passed (or it was never used); stale and surplus free
accounts go; the pool is refilled to its size."""

from __future__ import annotations

from agentworkers.core.access import worker_of
from agentworkers.core.identities import (
    CREATE_PER_PASS,
    QUARANTINE_SECONDS,
    Account,
    account_name,
    annotations_hash,
    is_pool_account,
    plan,
)

NOW = 1000.0
HASH = annotations_hash(None)


def account(name: str, *, busy: bool = False, since: float | None = None, fresh: bool = False,
            annotations: str = HASH) -> Account:  # fmt: skip
    return Account(name, annotations, busy, since, fresh)


def test_a_name_is_fresh_and_never_a_run_s_own_or_a_warm_pod_s() -> None:
    name = account_name("planner")
    assert name.startswith("id-planner-") and name != account_name("planner")
    assert is_pool_account(name)
    assert worker_of(f"system:serviceaccount:ns:{name}", "ns") is None
    assert not is_pool_account("worker-a") and not is_pool_account("warm-planner-1")


def test_an_account_never_used_is_free_at_once_and_a_used_one_after_its_quarantine() -> None:
    done = plan(
        [
            account("new", fresh=True),
            account("busy", busy=True),
            account("unconfirmed"),  # a pod or RoleBinding of it is still in the API
            account("resting", since=NOW - QUARANTINE_SECONDS + 1),
            account("rested", since=NOW - QUARANTINE_SECONDS),
        ],
        size=5,
        annotations=HASH,
        now=NOW,
    )
    assert done.free == ("rested", "new")
    assert (done.in_use, done.quarantined) == (2, 1)
    # Five wanted free: two are, one soon will be; two more are made.
    assert done.create == 2 and not done.delete


def test_free_accounts_of_other_annotations_or_over_the_size_go() -> None:
    done = plan(
        [
            account("old", fresh=True, annotations=annotations_hash({"role": "a"})),
            account("a", since=NOW - 100),
            account("b", since=NOW - 50),
            account("c", fresh=True),
            account("busy", busy=True, annotations=annotations_hash({"role": "a"})),
        ],
        size=2,
        annotations=HASH,
        now=NOW,
    )
    # The longest free are kept; an account in use is never deleted, whatever it carries.
    assert done.free == ("a", "b")
    assert set(done.delete) == {"old", "c"}
    assert done.create == 0


def test_a_large_pool_fills_over_a_few_passes() -> None:
    assert plan([], size=CREATE_PER_PASS * 3, annotations=HASH, now=NOW).create == CREATE_PER_PASS
    assert plan([], size=0, annotations=HASH, now=NOW).create == 0
