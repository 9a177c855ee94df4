"""The cyclic collector: long-lived objects are frozen after a full collection (the next
one does not walk them), and a sweep still frees a cycle among them."""

from __future__ import annotations

import gc
import weakref

from agentworkers.controller.infra import collector


class _Node:
    other: _Node | None = None


def test_a_full_collection_freezes_the_survivors_and_a_sweep_frees_their_cycles() -> None:
    collector.install()
    collector.install()
    assert gc.callbacks.count(collector._freeze_after_full) == 1
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        gc.collect()  # a full collection: a and b survive it, and are frozen
        assert gc.get_freeze_count() > 0
        del a, b
        gc.collect()  # frozen: not walked, not freed
        assert gone() is not None
        collector.sweep()
        assert gone() is None
    finally:
        gc.callbacks.remove(collector._freeze_after_full)
        gc.unfreeze()
