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

Active/standby (`--leader-elect`) is one shard: every replica is index 0 of 1, and the one
holding `<prefix>-shard-0` reconciles while the others keep their watches and store warm,
so a takeover lists nothing. One shard needs no member Leases (it has no one to fall to),
and the replicas are told apart by `identity` (the pod's name and uid), not by their
index. A replica that stops cleanly gives its Leases up (`resign`): the next one
claims them at its next round instead of after `duration`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agentworkers.kube.leases import Lease

log = logging.getLogger(__name__)

POD_UID = "AGENTWORKERS_POD_UID"


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


def holder_identity() -> str:
    """Who holds a lease, as `kubectl get lease` shows it: the pod's name, then its uid
    (`AGENTWORKERS_POD_UID`, from the downward API), so a container restarted in its pod
    holds its predecessor's leases again at once (a kubelet starts it only once that one
    has exited), while no other pod, here or in another namespace, is the same holder.
    Outside a pod: a random part of this process's own."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{os.environ.get(POD_UID) or uuid.uuid4().hex[:8]}"


class LeaseStore(Protocol):
    def read(self, name: str) -> Lease | None: ...
    def hold(self, name: str, holder: str, duration: int, seen: Lease | None) -> Lease | None: ...
    def release(self, lease: Lease) -> bool: ...


class Everything:
    """No sharding, no leader election: this replica alone serves every namespace."""

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
    identity: str = field(default_factory=holder_identity)
    # shard -> the moment (our clock) our hold on it ends unless renewed
    _valid: dict[int, float] = field(default_factory=dict)
    # lease name -> ((holder, renewTime), when we first saw that record)
    _seen: dict[str, tuple[tuple[str, str], float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _resigned: bool = False

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

    def _live(self) -> set[int]:
        """The replicas alive (ours included), each saying so on its member lease."""
        if self.count == 1:
            return {self.index}
        member = self._member(self.index)
        mine = self.leases.read(member)
        self._hold(member, mine, mine is None or self._expired(mine))
        live = {self.index}
        for j in range(self.count):
            if j != self.index:
                other = self.leases.read(self._member(j))
                if other is not None and not self._expired(other):
                    live.add(j)
        return live

    def _member(self, index: int) -> str:
        return f"{self.prefix}-member-{index}"

    def _shard(self, k: int) -> str:
        return f"{self.prefix}-shard-{k}"

    def step(self) -> None:
        """One round: say we are alive, see who else is, claim, renew or release shards."""
        if self._resigned:
            return
        before = self.held()
        wanted = {
            k for k, owner in assignment(self.count, self._live()).items() if owner == self.index
        }
        for k in range(self.count):
            name = self._shard(k)
            started = self.clock()
            lease = self.leases.read(name)
            free = lease is None or self._expired(lease)
            if k in wanted and self._hold(name, lease, free):
                with self._lock:
                    if not self._resigned:
                        self._valid[k] = started + self.duration - self.margin
            elif k not in wanted:
                with self._lock:
                    self._valid.pop(k, None)
                if lease is not None and lease.holder == self.identity:
                    self.leases.release(lease)
        gained = self.held() - before
        if gained:
            log.info("serving shard(s) %s of %d as %s", sorted(gained), self.count, self.identity)
            self.on_gained(gained)

    def resign(self) -> None:
        """Stop serving, then give up every lease we hold, so that another replica takes
        over at its next round (a clean exit: a rolling update, a drained node). Call it
        once no pass runs any more; a renewal racing it only makes the next wait longer."""
        with self._lock:
            self._resigned = True
            self._valid.clear()
        names = [self._shard(k) for k in range(self.count)]
        for name in names + ([self._member(self.index)] if self.count > 1 else []):
            lease = self.leases.read(name)
            if lease is not None and lease.holder == self.identity:
                self.leases.release(lease)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # one bad round must not end sharding; the next one retries
                log.exception("sharding round failed")
            stop.wait(self.period)
