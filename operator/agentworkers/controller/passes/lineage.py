"""Where a Worker sits in its tree: its parent run, the profile run above it, if any, and
the tree's root and counts.

A run below a profile run (its child, grandchild, ...) is bounded by that run's profile
and cannot select one of its own; both the spawn check (admission, handler) and the run
start ask these questions. The tree's limits (`core.tree`) are counted here, from the
store's parent -> children index, under a lock per tree (`tree_lock`) so that two spawns
into one tree are counted one after the other.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from agentworkers.api import reasons
from agentworkers.api.agentconfig import AgentConfigSpec, TreeLimits
from agentworkers.api.worker import TERMINAL_PHASES
from agentworkers.core import spawning
from agentworkers.core.objects import meta, phase
from agentworkers.core.spawning import ParentRun
from agentworkers.core.tree import Shape, tokens_used
from agentworkers.errors import UnknownWorkerError
from agentworkers.kube.repository import Repository

# How far up a parent chain the operator looks for a profile run (a bound on the reads).
MAX_ANCESTRY = 64


def parent_run(
    storage: Repository, namespace: str, parent_body: dict[str, Any] | None
) -> tuple[ParentRun | None, dict[str, Any] | None]:
    """What a spawn is checked against: the parent run, and the profile run (the parent
    itself or an ancestor) that bounds it, if any."""
    if parent_body is None:
        return None, None
    chain = ancestry(storage, namespace, parent_body)
    return spawning.parent_run(chain), spawning.profile_run(chain)


class Lookup(Protocol):
    """What a walk up a tree reads: the repository, or the store alone (no API read)."""

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...


class Tree(Lookup, Protocol):
    """What a walk down a tree reads besides: the parent -> children index."""

    def children(self, namespace: str, parent: str) -> list[str]: ...


def ancestry(storage: Lookup, namespace: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """`body` and every run above it, up to the tree's root (the last one)."""
    chain = [body]
    for _ in range(MAX_ANCESTRY):
        parent = (chain[-1].get("spec") or {}).get("parent")
        if not parent:
            return chain
        found = storage.get("workers", namespace, parent)
        if found is None:
            raise UnknownWorkerError(
                field="spec.parent",
                rule=f"worker {parent!r}, an ancestor of this run, does not exist",
            )
        chain.append(found)
    raise UnknownWorkerError(
        field="spec.parent", rule=f"the parent chain is longer than {MAX_ANCESTRY}"
    )


def tree_limits(storage: Repository, namespace: str, root: dict[str, Any]) -> TreeLimits | None:
    """The limits of the tree below `root`: its AgentConfig's `spec.tree`."""
    config = storage.get("agentconfigs", namespace, (root.get("spec") or {}).get("agent", ""))
    try:
        return AgentConfigSpec.model_validate((config or {}).get("spec") or {}).tree
    except ValidationError:
        return None  # missing or invalid: reported on it; the defaults hold meanwhile


def refused_by_tree(body: dict[str, Any]) -> bool:
    """A run that failed for a limit of its tree: it holds no place in it."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == reasons.READY and c.get("reason") in TREE_REASONS for c in conditions
    )


TREE_REASONS = frozenset({reasons.TREE_TOO_DEEP, reasons.TOO_MANY_CHILDREN, reasons.TREE_FULL})


def tree_shape(
    storage: Repository,
    namespace: str,
    chain: list[dict[str, Any]],
    counts: Callable[[dict[str, Any]], bool],
    skip: str,
    seen: set[str] | None = None,
) -> Shape:
    """Where a new child of `chain[0]` (its parent; `chain` from `ancestry`) would go: the
    parent's children and the root's live descendants for which `counts` holds, the new
    run `skip` (already in the store, when the operator checks) left out. `seen` gets the
    name of every descendant the store has."""
    parent, root = meta(chain[0]).name, meta(chain[-1]).name
    children = live = 0
    tokens = tokens_used(chain[-1])
    below = [root]
    while below:
        name = below.pop()
        for child in storage.children(namespace, name):
            if seen is not None:
                seen.add(child)
            body = storage.get("workers", namespace, child) if child != skip else None
            if body is None or not counts(body):
                continue
            below.append(child)
            if name == parent:
                children += 1
            if phase(body) not in TERMINAL_PHASES:
                live += 1
            tokens += tokens_used(body)
    return Shape(root, parent, len(chain), children, live, tokens)


def descendants(storage: Tree, namespace: str, root: str) -> list[dict[str, Any]]:
    """Every run below `root`, from the store's index (parents before their children)."""
    found, below = [], [root]
    while below:
        for child in storage.children(namespace, below.pop(0)):
            body = storage.get("workers", namespace, child)
            if body is not None:
                found.append(body)
                below.append(child)
    return found


_TREE_LOCKS = tuple(threading.Lock() for _ in range(64))


def tree_lock(namespace: str, root: str) -> threading.Lock:
    """The lock of a tree (one of a fixed set: nothing kept per tree)."""
    return _TREE_LOCKS[zlib.crc32(f"{namespace}/{root}".encode()) % len(_TREE_LOCKS)]


class Admitted:
    """Spawns admission has let through and the store has not seen yet, by tree.

    Between a review's answer and the watch event of the Worker it let through, the store
    does not count that Worker; a burst of spawns into one tree would all see the same
    count. Each admitted spawn is remembered until the store has it, or for `TTL` seconds
    (a create that another webhook refused never arrives).
    """

    TTL = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (namespace, root) -> {child: (expiry, parent)}
        self._trees: dict[tuple[str, str], dict[str, tuple[float, str]]] = {}

    def settle(self, storage: Repository, namespace: str, root: str) -> None:
        """Forget the tree's spawns the store has by now, and the expired ones."""
        now = time.monotonic()
        with self._lock:
            spawns = self._trees.get((namespace, root), {})
            for child, (expiry, parent) in list(spawns.items()):
                if expiry < now or child in storage.children(namespace, parent):
                    del spawns[child]
            if not spawns:
                self._trees.pop((namespace, root), None)

    def pending(self, namespace: str, root: str) -> dict[str, str]:
        """The tree's admitted spawns, child -> parent, as they are: a caller counts those
        its walk of the store did not see. Not pruned by the store here: a spawn whose
        watch event lands between the walk and this call would be in neither count."""
        with self._lock:
            return {
                child: parent
                for child, (_, parent) in self._trees.get((namespace, root), {}).items()
            }

    def add(self, namespace: str, root: str, child: str, parent: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._trees) > 1024:  # trees not spawned into since: forget the expired
                for key, spawns in list(self._trees.items()):
                    if all(expiry < now for expiry, _ in spawns.values()):
                        del self._trees[key]
            self._trees.setdefault((namespace, root), {})[child] = (now + self.TTL, parent)
