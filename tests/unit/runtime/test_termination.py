"""SIGTERM ends a run at once, whichever thread the kernel hands the signal to.

A signal's Python handler runs only on the main thread. When the kernel delivers SIGTERM
to another thread (any thread that does not block it may get a process's signal) while
the main thread waits in a read, the handler waits with the read: a run Idle on its
Worker's watch outlived its pod's grace period this way. The runtime keeps its main
thread in short waits (`_interruptible`) instead.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

PROGRAM = """
import signal, socket, sys, threading
from agentworkers.runtime.main import _interruptible

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
# Only another thread may take the signal, as when a library's thread is the one that does.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

def takes_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    threading.Event().wait()

threading.Thread(target=takes_signals, daemon=True).start()
quiet, _ = socket.socketpair()  # a read that never returns, as a quiet watch's
print("waiting", flush=True)
if sys.argv[1] == "interruptible":
    _interruptible(lambda: quiet.recv(1))
else:
    quiet.recv(1)
"""


def _terminated(mode: str, within: float) -> int | None:
    """The exit code of the program sent SIGTERM while it waits, or None if it has not
    ended `within` seconds later."""
    with subprocess.Popen(
        [sys.executable, "-c", PROGRAM, mode], stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None and process.stdout.readline() == "waiting\n"
        time.sleep(0.2)  # the signal-taking thread has unblocked it
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(within)
        except subprocess.TimeoutExpired:
            process.kill()
            return None


def test_sigterm_ends_a_run_whose_main_thread_waits_on_another() -> None:
    assert _terminated("interruptible", within=5) == 0


def test_the_control_a_main_thread_in_a_read_holds_sigterm_back() -> None:
    """Without `_interruptible`, the same program outlives the signal: the test above can fail."""
    assert _terminated("in the main thread", within=3) is None
