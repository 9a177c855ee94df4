"""coordination.k8s.io/v1 Leases, claimed and renewed with optimistic concurrency.

A claim is an update on the version read (or a create): of two replicas that both see a
lease free, one wins and the other gets a 409 and reads again. Whether a lease is free is
decided by the caller (`agentworkers.controller.infra.sharding`), on its own clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentworkers.core.clocks import now
from agentworkers.core.objects import meta
from agentworkers.errors import ApiError
from agentworkers.kube.api import Api

PLURAL = "leases"


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str  # "" when released
    renewed: str  # renewTime as written; a new value means its holder is alive
    duration: int  # seconds
    version: str  # resourceVersion, for the next write


def _lease(body: dict[str, Any]) -> Lease:
    spec, read = body.get("spec") or {}, meta(body)
    return Lease(
        name=read.name,
        holder=spec.get("holderIdentity") or "",
        renewed=spec.get("renewTime") or "",
        duration=int(spec.get("leaseDurationSeconds") or 0),
        version=read.resource_version,
    )


@dataclass
class Leases:
    api: Api
    namespace: str

    def read(self, name: str) -> Lease | None:
        found = self.api.get(PLURAL, self.namespace, name)
        return _lease(found) if found else None

    def hold(self, name: str, holder: str, duration: int, seen: Lease | None) -> Lease | None:
        """Claim or renew `name` for `holder`, on the version `seen` (None: it does not
        exist yet). Returns the lease as written, or None when another writer came first."""
        spec = {"holderIdentity": holder, "leaseDurationSeconds": duration}
        spec["renewTime"] = now(digits=6)  # a MicroTime
        if seen is None or seen.holder != holder:
            spec["acquireTime"] = spec["renewTime"]
        try:
            if seen is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": name},
                    "spec": spec,
                }
                return _lease(self.api.create(PLURAL, self.namespace, body))
            patch = {"metadata": {"resourceVersion": seen.version}, "spec": spec}
            return _lease(self.api.patch(PLURAL, self.namespace, name, patch))
        except ApiError as e:
            if e.status == 409:
                return None
            raise

    def release(self, lease: Lease) -> bool:
        """Give the lease up now (an empty holder), so the next owner need not wait."""
        patch = {
            "metadata": {"resourceVersion": lease.version},
            "spec": {"holderIdentity": "", "renewTime": None, "acquireTime": None},
        }
        try:
            self.api.patch(PLURAL, self.namespace, lease.name, patch)
        except ApiError as e:
            if e.status in (404, 409):
                return False
            raise
        return True
