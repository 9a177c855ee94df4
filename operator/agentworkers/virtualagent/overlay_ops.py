"""Applying an overlay to a parent's resolved configuration: it can only narrow.

Skills narrow by intersection, exclusions grow by union, limits are clamped to the
parent's, so no overlay value can widen what the parent allows.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentworkers.virtualagent.normalization import sorted_set


def intersect_strings(base: Iterable[str], keep: Iterable[str] | None) -> tuple[str, ...] | None:
    """The sorted set of ``base`` names also in ``keep``: the skill narrowing.

    An empty or ``None`` ``keep`` returns ``None``, meaning no narrowing, as in the
    seed. An overlay's explicit empty skill set narrows to *no* skills, so a caller
    applying one must not pass it here as "keep nothing".
    """
    wanted = set(keep or ())
    if not wanted:
        return None
    return tuple(sorted({name for name in base if name in wanted}))


def union_strings(a: Iterable[str] | None, b: Iterable[str] | None) -> tuple[str, ...] | None:
    """The sorted, trimmed, de-duplicated union of two exclusion sets; ``None`` if empty.

    The tools operation: adding an overlay's exclusions can only hide more.
    """
    return sorted_set([*(a or ()), *(b or ())])


def clamp_max(value: int, parent: int | None) -> int:
    """``value``, but at most ``parent``; ``None`` means the parent has no ceiling."""
    return parent if parent is not None and value > parent else value


def _given(limit: int | None) -> int | None:
    """An overlay limit, or ``None`` when it is unset or not positive (the parent's stays)."""
    return limit if limit is not None and limit > 0 else None


def overlay_clamp_max_tokens(parent_resolved: int | None, overlay: int | None) -> int | None:
    """The child's max-tokens: the overlay's, never above the parent's resolved ceiling.

    With no overlay value the parent's (possibly ``None``) ceiling stays; with no parent
    ceiling the overlay's value is used as is.
    """
    limit = _given(overlay)
    return parent_resolved if limit is None else clamp_max(limit, parent_resolved)


def overlay_clamp_max_steps(parent_cap: int, overlay: int | None) -> int:
    """The child's run-loop step cap: the overlay's, never above the parent's cap."""
    limit = _given(overlay)
    return parent_cap if limit is None else min(limit, parent_cap)


def overlay_clamp_token_budget(parent: int, overlay: int | None) -> int:
    """The child's token budget, never above the parent's.

    A parent budget of 0 (or less) means "no budget", so an overlay budget introduces
    one; a positive parent budget caps the overlay's.
    """
    limit = _given(overlay)
    if limit is None:
        return parent
    return clamp_max(limit, parent if parent > 0 else None)


def block_name(key: str) -> str:
    """Name of the system block a profile's instructions render under: ``virtual_agent.<key>``."""
    return f"virtual_agent.{key}"
