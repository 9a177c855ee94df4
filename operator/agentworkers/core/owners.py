"""Owner references, built one way: a child owned by its parent goes with it (the garbage
collector deletes it), and a controller finds its own child again by the owner's uid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    """A reference to `owner` for a child's `metadata.ownerReferences`. `controller`: the
    owner manages the child (one controller per object); otherwise it only owns it, as a
    parent Worker owns a child whose pod its own pass manages."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }
