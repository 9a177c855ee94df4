"""Several controller replicas split the namespaces between them, each served by one.

A namespace belongs to shard `shard_of(namespace, count)`, a stable hash; replica `i` of
`count` (a StatefulSet's ordinal) serves shard `i` and, while a replica is gone, the
shards that fall to it. Two kinds of Lease decide it, both renewed every `period`:

* `<prefix>-member-<i>`: replica `i` is alive;
* `<prefix>-shard-<k>`: who serves shard `k` now. Only its holder reconciles the shard's
  objects, and only until its last renewal is `duration - margin` old; another replica
  claims it only once it has seen it unrenewed for `duration` (client-go's rule: on its own
  clock, so clock skew between machines does not matter).

Shard `k` falls to replica `k` when it is alive, else to the next live replica after it
(`assignment`). So a replica that dies has its shards served again within about
`duration + period` seconds, and when it comes back the taker releases them to it.
Admission is not sharded: any replica (or `--role=admission` process) answers any review.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agentworkers.kube.leases import Lease

log = logging.getLogger(__name__)


def shard_of(namespace: str, count: int) -> int:
    """The shard of a namespace: the same in every replica and every release."""
    digest = hashlib.sha256(namespace.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def assignment(count: int, live: set[int]) -> dict[int, int]:
    """Shard -> the replica that should serve it: itself if live, else the next live one."""
    if not live:
        return {}
    return {
        k: next((k + d) % count for d in range(count) if (k + d) % count in live)
        for k in range(count)
    }


class LeaseStore(Protocol):
    def read(self, name: str) -> Lease | None: ...
    def hold(self, name: str, holder: str, duration: int, seen: Lease | None) -> Lease | None: ...
    def release(self, lease: Lease) -> bool: ...


class Everything:
    """No sharding: one replica (or an active/standby pair) serves every namespace."""

    def owns(self, namespace: str) -> bool:
        return True


@dataclass
class Shards:
    count: int
    index: int
    leases: LeaseStore
    # Called (in the sharding thread) with the shards just gained: their objects need a pass.
    on_gained: Callable[[set[int]], None]
    prefix: str = "agentworkers"
    duration: int = 15
    period: float = 5.0
    margin: float = 3.0
    clock: Callable[[], float] = time.monotonic
    identity: str = field(default_factory=lambda: f"{uuid.uuid4().hex[:12]}")
    # shard -> the moment (our clock) our hold on it ends unless renewed
    _valid: dict[int, float] = field(default_factory=dict)
    # lease name -> ((holder, renewTime), when we first saw that record)
    _seen: dict[str, tuple[tuple[str, str], float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is not in 0..{self.count - 1}")

    def owns(self, namespace: str) -> bool:
        shard = shard_of(namespace, self.count)
        with self._lock:
            return self.clock() < self._valid.get(shard, 0.0)

    def held(self) -> set[int]:
        now = self.clock()
        with self._lock:
            return {k for k, until in self._valid.items() if now < until}

    def _expired(self, lease: Lease) -> bool:
        """Unrenewed for `duration` as far as we have watched it (or never held). Every
        lease read goes through here, so the watch starts with the first read."""
        record = (lease.holder, lease.renewed)
        now = self.clock()
        seen = self._seen.get(lease.name)
        if seen is None or seen[0] != record:
            self._seen[lease.name] = (record, now)
            seen = self._seen[lease.name]
        return not lease.holder or now - seen[1] >= lease.duration

    def _hold(self, name: str, lease: Lease | None, free: bool) -> bool:
        """Claim or renew the lease if it is ours or `free`; True if we hold it now."""
        if lease is not None and lease.holder != self.identity and not free:
            return False
        started = self.clock()
        return self.leases.hold(name, self.identity, self.duration, lease) is not None and (
            self.clock() - started < self.duration - self.margin
        )

    def step(self) -> None:
        """One round: say we are alive, see who else is, claim, renew or release shards."""
        before = self.held()
        member = f"{self.prefix}-member-{self.index}"
        mine = self.leases.read(member)
        self._hold(member, mine, mine is None or self._expired(mine))
        live = {self.index}
        for j in range(self.count):
            if j != self.index:
                other = self.leases.read(f"{self.prefix}-member-{j}")
                if other is not None and not self._expired(other):
                    live.add(j)
        wanted = {k for k, owner in assignment(self.count, live).items() if owner == self.index}
        for k in range(self.count):
            name = f"{self.prefix}-shard-{k}"
            started = self.clock()
            lease = self.leases.read(name)
            free = lease is None or self._expired(lease)
            if k in wanted and self._hold(name, lease, free):
                with self._lock:
                    self._valid[k] = started + self.duration - self.margin
            elif k not in wanted:
                with self._lock:
                    self._valid.pop(k, None)
                if lease is not None and lease.holder == self.identity:
                    self.leases.release(lease)
        gained = self.held() - before
        if gained:
            log.info("serving shard(s) %s of %d", sorted(gained), self.count)
            self.on_gained(gained)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # one bad round must not end sharding; the next one retries
                log.exception("sharding round failed")
            stop.wait(self.period)
