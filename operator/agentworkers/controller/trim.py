"""Give memory freed after a burst back to the system.

A burst of thousands of Workers makes kopf queue their watch events (whole bodies) faster
than the handlers drain them; once drained, the objects are freed, but glibc keeps the
freed heap pages mapped, so the process stays at its peak size. `malloc_trim(0)` returns
them. It runs every `period` seconds in a thread of its own, costs a few milliseconds, and
does nothing where the C library has no such call (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

PERIOD = 15.0  # seconds


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def start(stop: threading.Event, period: float = PERIOD) -> bool:
    """Trim every `period` seconds until `stop` is set; False where there is no trim."""
    trim = _malloc_trim()
    if trim is None:
        log.debug("no malloc_trim in this C library; memory freed after a burst stays mapped")
        return False

    def run() -> None:
        while not stop.wait(period):
            trim(0)

    threading.Thread(target=run, name="malloc-trim", daemon=True).start()
    return True
