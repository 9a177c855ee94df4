"""Python's cyclic garbage collector, kept out of the way of answering.

A full collection walks every object the process holds (the store of every Worker, pod
and config, kopf's indexes): about 100 ms at a thousand Workers, with every thread
stopped, so an admission review or a pass that arrives meanwhile waits it out. What
survived a full collection is long-lived, so it is frozen (`gc.freeze`): the next full
collection walks only what came after. Every `SWEEP_SECONDS` one sweep unfreezes and
collects everything, so a cycle among long-lived objects is still freed, late. (kopf's
event bodies, once the bulk of the cyclic garbage, are no cycles: `kopf_fixes`, 5.)
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

SWEEP_SECONDS = 600.0
OLDEST = 2  # the collector's generations: 0, 1, 2


def _freeze_after_full(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == OLDEST:
        gc.freeze()


def sweep() -> int:
    """Unfreeze and collect everything once; what survives is frozen again."""
    gc.unfreeze()
    return gc.collect()


def _sweeping() -> None:
    while True:
        time.sleep(SWEEP_SECONDS)
        sweep()


def install() -> None:
    """Freeze after each full collection and sweep now and then (idempotent)."""
    if _freeze_after_full in gc.callbacks:
        return
    gc.callbacks.append(_freeze_after_full)
    threading.Thread(target=_sweeping, name="gc-sweep", daemon=True).start()
