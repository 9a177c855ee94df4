"""A warm pod's wait for its claim (docs/scaling.md, "Warm pool"): the runtime, imported
and connected, sleeps until the operator gives its pod to a run, which the pod's
downward-API file then names."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from agentworkers.core.pools import Claim

# Seconds between reads of a warm pod's claim file when nothing signalled a change (a
# change to its directory wakes the runtime at once: `wait_for_claim`).
CLAIM_POLL = 1.0
# Seconds between a waiting runtime's requests that keep its connections open: the API
# server closes one idle for 90 s (its IdleTimeout), as may a load balancer in front of
# it; client-go pings an idle connection after 30 s for the same reason.
KEEPALIVE_SECONDS = 30.0
# inotify: IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE.
IN_CHANGES = 0x008 | 0x080 | 0x100


def wait_for_claim(
    path: Path, meanwhile: Callable[[], None] = lambda: None, every: float = KEEPALIVE_SECONDS
) -> Claim:
    """A warm pod's wait: until the operator gives the pod to a run, whose claim the pod's
    downward-API file then holds (empty until then, as a kubelet writes an absent
    annotation). The file is read again whenever its directory changes (a kubelet, like
    the local pod runner, swaps the new content in with a rename), and each CLAIM_POLL
    seconds in case a change went unnoticed. `meanwhile` is called every `every` seconds
    of the wait (the runtime keeps its connections to the API server open)."""
    last = time.monotonic()
    with _changes(path.parent) as changed:
        while True:
            with contextlib.suppress(FileNotFoundError):
                text = path.read_text().strip()
                if text:
                    return Claim.model_validate_json(text)
            changed(max(0.0, min(CLAIM_POLL, last + every - time.monotonic())))
            if time.monotonic() - last >= every:
                meanwhile()
                last = time.monotonic()


@contextlib.contextmanager
def _changes(directory: Path) -> Iterator[Callable[[float], None]]:
    """A wait for a change in `directory` (Linux inotify: a file created, written or
    renamed into it), at most `timeout` seconds; a plain sleep where inotify is missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK) if hasattr(libc, "inotify_init1") else -1
    if fd < 0 or libc.inotify_add_watch(fd, bytes(directory), IN_CHANGES) < 0:
        if fd >= 0:
            os.close(fd)
        yield time.sleep
        return

    def wait(timeout: float) -> None:
        if select.select([fd], [], [], timeout)[0]:
            with contextlib.suppress(BlockingIOError):
                os.read(fd, 65536)

    try:
        yield wait
    finally:
        os.close(fd)
