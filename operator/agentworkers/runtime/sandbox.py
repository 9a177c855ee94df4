"""The run's sandbox directory: files opened beneath it, and commands run in it.

**Opening beneath the sandbox.** A path is walked one component at a time, each opened
with ``O_NOFOLLOW`` relative to the directory descriptor already held (``dir_fd``), so
no component is ever looked up by a path string again after it was checked: a second
process in the sandbox that swaps a directory or a file for a symbolic link between two
calls cannot make a tool read or write outside. A symbolic link met on the way is read
with ``readlink`` on the held directory and its target walked the same way: a link that
stays inside (a relative target that does not climb above the root) is followed, so a
kubelet's ConfigMap volume (``SKILL.md -> ..data/SKILL.md``) reads as it does in a
shell; an absolute target, or ``..`` above the root, is refused as outside. (Linux's
``openat2(RESOLVE_BENEATH)`` gives the same guarantee in the kernel; the walk is used
because it works under every seccomp profile and runtime class, gVisor included, and on
every kernel.)

**Commands.** ``run`` starts a process in a new session (its own process group), with
an environment built from scratch (``command_env``), stdin closed, stdout and stderr
each read up to a cap (the rest drained and counted, never buffered), and a timeout
after which the whole group is killed. The group is killed when the command ends too,
so nothing it started in the background outlives it.

Neither is the security boundary: the pod is (non-root, read-only root filesystem, no
capabilities). A command runs as the runtime's own user and can read what it can.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass

MAX_LINKS = 40  # symbolic links followed in one walk, as the kernel's own limit
DRAIN_SECONDS = 2.0  # after a command ends: how long its pipes may take to close
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A path or a command the sandbox refuses; the message is for the model."""


@dataclass(frozen=True)
class Opened:
    """A descriptor opened beneath the root, and the path it resolved to (no links)."""

    fd: int
    path: str


def open_beneath(
    root: str, path: str, flags: int, mode: int = 0o644, make_parents: bool = False
) -> Opened:
    """Open ``path`` (relative) beneath the directory ``root`` with ``flags`` (plus
    O_NOFOLLOW and O_CLOEXEC). A path whose walk ends on a directory (``.``, ``a/..``)
    gives that directory, opened read-only, whatever the flags. ``make_parents`` makes
    missing directories on the way (for a write). Raises Refused for an absolute path or
    one that leads outside, OSError for the rest (not found, not a directory)."""
    if os.path.isabs(path):
        raise Refused(f"path {path!r} is absolute; use a path relative to the sandbox")
    parts = deque(_components(path))
    # The root itself is trusted (the pod's mount, or the runner's directory): followed.
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stack = [(root_fd, "")]  # the directories walked: (fd, name)
    links = 0
    try:
        while parts:
            name = parts.popleft()
            if name == "..":
                if len(stack) == 1:
                    raise Refused(f"path {path!r} is outside the sandbox")
                os.close(stack.pop()[0])
                continue
            here = stack[-1][0]
            last = not parts
            try:
                if last:
                    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=here)
                    return Opened(fd, _joined(stack, name))
                stack.append((_open_dir(name, here, make_parents), name))
            except OSError as e:
                # A link (ELOOP under O_NOFOLLOW; ENOTDIR on some systems for a directory).
                if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, f"too many symbolic links in {path!r}") from e
                try:
                    target = os.readlink(name, dir_fd=here)
                except OSError as not_link:
                    if not_link.errno == errno.EINVAL and e.errno == errno.ENOTDIR:
                        raise e from None  # a file where a directory was wanted
                    if not_link.errno == errno.EINVAL:
                        parts.appendleft(name)  # swapped back meanwhile: walk it again
                        continue
                    raise
                if os.path.isabs(target):
                    raise Refused(f"path {path!r} is outside the sandbox") from None
                parts.extendleft(reversed(_components(target)))
        # The walk ended on a directory (the root, or after a `..`).
        return Opened(os.dup(stack[-1][0]), _joined(stack[:-1], stack[-1][1]) or ".")
    finally:
        for fd, _ in stack:
            os.close(fd)


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _joined(stack: list[tuple[int, str]], name: str) -> str:
    return "/".join([*(n for _, n in stack if n), name]).strip("/")


def _open_dir(name: str, dir_fd: int, make: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not make:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: open what is there
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def read_at_most(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``fd``, fewer only at its end (a read may return less)."""
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def command_env(sandbox: str) -> dict[str, str]:
    """A command's whole environment. Built from nothing, so no model key, token,
    kubeconfig or secret's path reaches it: the runtime's PATH (to find what the image
    has), HOME the sandbox, a UTF-8 locale and /tmp for temporary files."""
    return {
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "HOME": sandbox,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
    }


@dataclass(frozen=True)
class Output:
    """What a command wrote to one stream: its first ``cap`` bytes (and, when there was
    more, a line saying how much), and whether it was cut."""

    text: str
    cut: bool


@dataclass(frozen=True)
class Completed:
    exit_code: int  # 128 + the signal's number when a signal ended it, as a shell reports
    signal: str | None
    timed_out: bool
    stdout: Output
    stderr: Output


class _Capture:
    def __init__(self, cap: int) -> None:
        self.cap, self.kept, self.total = cap, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    def output(self) -> Output:
        text = self.kept.decode("utf-8", "replace")
        cut = self.total > len(self.kept)
        if cut:
            text += f"\n[output cut: {self.total} bytes in all, the first {len(self.kept)} shown]"
        return Output(text, cut)


def run(argv: list[str], cwd: str, env: dict[str, str], timeout: float, cap: int) -> Completed:
    """Run ``argv`` in ``cwd``; see the module's docstring. OSError if it cannot start."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    captures = {process.stdout: _Capture(cap), process.stderr: _Capture(cap)}
    timed_out, ended = False, False
    end = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for pipe in captures:
            selector.register(pipe, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = end - time.monotonic()
                if left <= 0:
                    if ended:
                        break  # something that left the group holds a pipe: stop reading
                    timed_out, ended = True, True
                    _kill_group(process.pid)
                    end = time.monotonic() + DRAIN_SECONDS
                    continue
                for key, _ in selector.select(min(left, 0.1)):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        captures[key.fileobj].add(chunk)  # type: ignore[index]
                    else:
                        selector.unregister(key.fileobj)
                if not ended and process.poll() is not None:
                    ended = True
                    _kill_group(process.pid)  # what it left running would hold the pipes
                    end = min(end, time.monotonic() + DRAIN_SECONDS)
        finally:
            _kill_group(process.pid)
            code = process.wait()
            process.stdout.close()
            process.stderr.close()
    name = signal.Signals(-code).name if code < 0 else None
    return Completed(
        exit_code=128 - code if code < 0 else code,
        signal=name,
        timed_out=timed_out,
        stdout=captures[process.stdout].output(),
        stderr=captures[process.stderr].output(),
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, signal.SIGKILL)
