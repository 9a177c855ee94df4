"""Pooled identities: ServiceAccounts of an agent made ahead of its cold runs. Pure.

A cold run's pod may not be admitted before the ServiceAccount it names exists; a pool
takes that write off the run's path. The argument that a reused account gives a run no
more than its own account would is in docs/scaling.md ("Pooled identities"); what it
rests on is decided here:

- an account is free only once no pod that ran as it exists (the pod's tokens are bound
  to it: the API server refuses them once it is gone) and no RoleBinding that named it
  exists (no earlier run's rights are left on it), both confirmed in the API, and then
  only after QUARANTINE_SECONDS more (the API server caches a token it accepted for 10 s);
- an account never used (made by this process, no pod ever named it) is free at once;
- an account a run took is the run's until a pod of its appears in the store, the run
  records its pod or is gone, or RESERVED_SECONDS pass: then it is confirmed and
  quarantined like any other.

`settle` decides, from what the store and the API show, each account's state; `plan`
what a pool pass makes and deletes.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentworkers.api.names import IDENTITY_LABEL
from agentworkers.core.objects import meta

# Never the `worker-` prefix of a run's own account nor the `warm-` one of a warm pod's
# (`core.access`, `core.pools`): admission tells the three apart by name.
PREFIX = "id-"
# The API server's default --authentication-token-success-cache-ttl is 10 s: a token it
# accepted within that is accepted again without a look at its pod. Three times that.
QUARANTINE_SECONDS = 30.0
# Longer than any one API call may take (options.request_timeout): a pod create sent
# under a reservation has landed, or never will, by then.
RESERVED_SECONDS = 120.0
# Accounts a pool pass creates at most (a large pool fills over a few passes).
CREATE_PER_PASS = 20


def account_name(agent: str) -> str:
    """A fresh pooled account's name: random, so no other process can have used it."""
    return f"{PREFIX}{agent}"[:240] + f"-{secrets.token_hex(4)}"


def is_pool_account(account: str) -> bool:
    return account.startswith(PREFIX)


def annotations_hash(annotations: Mapping[str, str] | None) -> str:
    """What an account carries that a run's config decides (workload identity): a run
    takes only an account made for its agent's annotations as they are now."""
    canonical = json.dumps(dict(annotations or {}), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Account:
    """A pooled account as a pool pass sees it."""

    name: str
    annotations: str  # its annotations_hash
    # A pod of the store runs as it, or a run took it less than RESERVED_SECONDS ago.
    busy: bool
    # When it was last seen free: not busy, no pod and no RoleBinding of it in the API;
    # None: not seen so (or seen busy since).
    free_since: float | None
    # Made by this process and never named by a pod: free at once.
    fresh: bool = False


@dataclass(frozen=True)
class PoolPlan:
    free: tuple[str, ...]  # takeable now, the oldest first
    create: int
    delete: tuple[str, ...]  # free accounts to delete: stale annotations, or surplus
    in_use: int
    quarantined: int


def plan(accounts: list[Account], size: int, annotations: str, now: float) -> PoolPlan:
    """What a pass over one pool does: `size` free accounts with `annotations` kept."""
    free: list[Account] = []
    delete: list[str] = []
    in_use = quarantined = 0
    for account in accounts:
        if account.busy or (account.free_since is None and not account.fresh):
            in_use += 1
        elif not account.fresh and now - (account.free_since or now) < QUARANTINE_SECONDS:
            quarantined += 1
        elif account.annotations != annotations:
            delete.append(account.name)
        else:
            free.append(account)
    free.sort(key=lambda a: (a.free_since or now, a.name))
    delete += [a.name for a in free[size:]]
    free = free[:size]
    return PoolPlan(
        free=tuple(a.name for a in free),
        create=max(0, min(size - len(free) - quarantined, CREATE_PER_PASS)),
        delete=tuple(delete),
        in_use=in_use,
        quarantined=quarantined,
    )


def of_pod(pod: dict[str, Any]) -> str | None:
    """The pooled account a run's pod runs as; None: the run's own account."""
    return meta(pod).labels.get(IDENTITY_LABEL) or None


def run_as(pod: dict[str, Any], account: str) -> None:
    """Make a run's pod run as the pooled `account`, labelled with it: the pod is what
    records, durably, that the account is the run's."""
    pod["spec"]["serviceAccountName"] = account
    pod["metadata"]["labels"] = {**meta(pod).labels, IDENTITY_LABEL: account}
