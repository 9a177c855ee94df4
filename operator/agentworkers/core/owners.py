"""Owner references, read and written here: a child owned by its parent goes with it (the
garbage collector deletes it), and a controller finds its own child again by the owner's
uid (an object of the name it expects may be someone else's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentworkers.core.objects import meta


@dataclass(frozen=True, slots=True)
class OwnerReference:
    """One of `metadata.ownerReferences`. `controller` and `block_owner_deletion` are None
    when the API's copy does not say (so `wire` writes back exactly what was read)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> OwnerReference:
        return cls(
            api_version=str(raw.get("apiVersion") or ""),
            kind=str(raw.get("kind") or ""),
            name=str(raw.get("name") or ""),
            uid=str(raw.get("uid") or ""),
            controller=raw.get("controller"),
            block_owner_deletion=raw.get("blockOwnerDeletion"),
        )

    def wire(self) -> dict[str, str | bool]:
        """As the API spells it, for a child's `metadata.ownerReferences`."""
        wired: dict[str, str | bool] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }
        if self.controller is not None:
            wired["controller"] = self.controller
        if self.block_owner_deletion is not None:
            wired["blockOwnerDeletion"] = self.block_owner_deletion
        return wired


def references(body: Mapping[str, Any]) -> tuple[OwnerReference, ...]:
    """The owner references of `body`, as the API has them (none: empty)."""
    raw = (body.get("metadata") or {}).get("ownerReferences") or ()
    return tuple(map(OwnerReference.of, raw))


def owned_by(body: Mapping[str, Any], uid: str) -> bool:
    """Whether the object of `uid` owns `body`, as its controller or not."""
    return any(o.uid == uid for o in references(body))


def owner_names(body: Mapping[str, Any], kind: str) -> list[str]:
    """The names of the owners of `body` of `kind`."""
    return [o.name for o in references(body) if o.kind == kind and o.name]


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, str | bool]:
    """A reference to `owner` for a child's `metadata.ownerReferences`. `controller`: the
    owner manages the child (one controller per object); otherwise it only owns it, as a
    parent Worker owns a child whose pod its own pass manages."""
    of = meta(owner)
    return OwnerReference(
        api_version=owner["apiVersion"],
        kind=owner["kind"],
        name=of.name,
        uid=of.uid,
        controller=controller,
        block_owner_deletion=True,
    ).wire()
