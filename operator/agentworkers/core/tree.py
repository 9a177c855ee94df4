"""A spawn tree's limits: whether one more run fits. Pure: the counts come from the caller.

A tree is a top-level run (its root, depth 0) and every run below it through
`spec.parent`. Its root's AgentConfig bounds it (`spec.tree`): how deep a run may be, how
many children one run may have at a time, and how many runs below the root may be live
(not ended) at a time. Admission counts from the watch-fed store plus the spawns it has
just admitted; the operator counts again, under the tree's lock, the runs it has started.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentworkers.api import reasons
from agentworkers.api.agentconfig import TreeLimits
from agentworkers.errors import TreeLimitError


@dataclass(frozen=True)
class Shape:
    """Where a new run would go: its tree's root, its depth, and the counts it joins."""

    root: str
    parent: str
    depth: int  # of the new run
    children: int  # the parent's children already counted
    live: int  # the root's live descendants already counted


def check_tree(limits: TreeLimits | None, agent: str, shape: Shape) -> None:
    """Refuse a run that would pass a limit of its tree, naming the limit, the count and
    the root."""
    limits = limits or TreeLimits()
    where = f"AgentConfig {agent}'s spec.tree"
    if shape.depth > limits.depth:
        raise TreeLimitError(
            f"a run at depth {shape.depth} is deeper than maxDepth {limits.depth} of the "
            f"tree of {shape.root!r} ({where})",
            "spec.parent",
            reason=reasons.TREE_TOO_DEEP,
        )
    if shape.children >= limits.children:
        raise TreeLimitError(
            f"worker {shape.parent!r} has {shape.children} children, maxChildren "
            f"{limits.children} in the tree of {shape.root!r} ({where})",
            "spec.parent",
            reason=reasons.TOO_MANY_CHILDREN,
        )
    if shape.live >= limits.live_descendants:
        raise TreeLimitError(
            f"the tree of {shape.root!r} has {shape.live} live runs below its root, "
            f"maxLiveDescendants {limits.live_descendants} ({where})",
            "spec.parent",
            reason=reasons.TREE_FULL,
        )
