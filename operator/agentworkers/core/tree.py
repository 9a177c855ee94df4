"""A spawn tree's limits: whether one more run fits. Pure: the counts come from the caller.

A tree is a top-level run (its root, depth 0) and every run below it through
`spec.parent`. Its root's AgentConfig bounds it (`spec.tree`): how deep a run may be, how
many children one run may have at a time, how many runs below the root may be live
(not ended) at a time, and how many tokens the whole tree may use. Admission counts from
the watch-fed store plus the spawns it has just admitted; the operator counts again, under
the tree's lock, the runs it has started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    tokens_used: int = 0  # by the root and every run below it


def budget_left(limits: TreeLimits | None, tokens_used: int) -> int | None:
    """Tokens the tree has left (0 or less: spent); None without a budget."""
    if limits is None or limits.token_budget is None:
        return None
    return limits.token_budget - tokens_used


def check_tree(
    limits: TreeLimits | None, agent: str, shape: Shape, child_budget: int | None = None
) -> None:
    """Refuse a run that would pass a limit of its tree, naming the limit, the count and
    the root; `child_budget`: the new run's own token budget (limits.tokenBudget)."""
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
    left = budget_left(limits, shape.tokens_used)
    if left is not None and (left <= 0 or (child_budget is not None and left < child_budget)):
        wants = f", less than the child's own tokenBudget {child_budget}" if child_budget else ""
        raise TreeLimitError(
            f"the tree of {shape.root!r} has {max(left, 0)} of its tokenBudget "
            f"{limits.token_budget} tokens left{wants} ({where})",
            "spec.parent",
            reason=reasons.TREE_BUDGET,
        )


def tokens_used(body: dict[str, Any]) -> int:
    """The tokens a run's runtime reported it used."""
    used = (body.get("status") or {}).get("tokensUsed") or {}
    return int(used.get("prompt") or 0) + int(used.get("completion") or 0)
