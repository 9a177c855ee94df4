"""The sandbox tools with real files and real processes: run_command's timeouts, caps,
exit codes and environment, and file tools that a swapped link cannot lead outside."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.sandbox import DRAIN_SECONDS
from agentworkers.runtime.tools import MAX_OUTPUT_BYTES, Sandbox, Toolbox

SANDBOX_TOOLS = ["list_files", "read_file", "write_file", "run_command"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "sandbox" / "sub").mkdir(parents=True)
    return tmp_path / "sandbox"


@pytest.fixture
def box(root: Path) -> Toolbox:
    return Toolbox(Sandbox(str(root)).tools(), allowed=SANDBOX_TOOLS)


def run(box: Toolbox, **args: Any) -> dict[str, Any]:
    result = box.call("run_command", args)
    assert result.error is None, result.error
    assert result.result is not None
    return result.result


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours is dead too: reap it if it is a child (it is not, here: sh's).
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


# --- run_command -----------------------------------------------------------------------


def test_run_command_is_offered_only_when_listed(root: Path) -> None:
    config = EffectiveConfig(agent="a", provider="scripted", model="m", tools=("read_file",))
    box = Toolbox.for_config(config, Sandbox(str(root)).tools())
    assert box.names() == ["read_file"]
    assert box.call("run_command", {"command": ["true"]}).error == (
        "tool 'run_command' is not available to this run"
    )


def test_argv_and_shell_line_with_their_exit_codes(box: Toolbox, root: Path) -> None:
    done = run(box, command=["sh", "-c", 'printf "%s|" "$@"; echo err >&2; exit 7', "x", "a b"])
    assert done == {
        "exit_code": 7,
        "signal": None,
        "timed_out": False,
        "stdout": "a b|",
        "stderr": "err\n",
        "stdout_truncated": False,
        "stderr_truncated": False,
    }
    # A string goes through /bin/sh -c: pipes and expansions work; it runs in the sandbox.
    line = run(box, command="echo one two | wc -w; pwd; echo $HOME")
    assert line["exit_code"] == 0
    assert line["stdout"].split() == ["2", str(root), str(root)]
    assert run(box, command=["pwd"], cwd="sub")["stdout"] == f"{root}/sub\n"


def test_a_signal_is_reported_with_its_name(box: Toolbox) -> None:
    done = run(box, command="kill -TERM $$")
    assert (done["exit_code"], done["signal"], done["timed_out"]) == (143, "SIGTERM", False)


def test_a_timeout_kills_the_whole_group(box: Toolbox, root: Path) -> None:
    started = time.monotonic()
    done = run(box, command="sleep 60 & echo $! > bg.pid; sleep 60", timeout=1)
    assert time.monotonic() - started < 1 + DRAIN_SECONDS + 2
    assert (done["exit_code"], done["signal"], done["timed_out"]) == (137, "SIGKILL", True)
    background = int((root / "bg.pid").read_text())
    deadline = time.monotonic() + 5
    while alive(background) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(background)


def test_what_a_command_leaves_running_is_killed_when_it_ends(box: Toolbox, root: Path) -> None:
    started = time.monotonic()
    done = run(box, command="sleep 60 & echo $! > bg.pid; echo started")
    # It returned at once: the background sleep held stdout, and was killed with the group.
    assert time.monotonic() - started < DRAIN_SECONDS
    assert (done["exit_code"], done["stdout"]) == (0, "started\n")
    background = int((root / "bg.pid").read_text())
    deadline = time.monotonic() + 5
    while alive(background) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(background)


def test_outputs_are_capped_each_and_marked(box: Toolbox) -> None:
    big = MAX_OUTPUT_BYTES + 5000
    done = run(box, command=f"head -c {big} /dev/zero | tr '\\0' x; echo small >&2")
    assert done["stdout_truncated"] is True
    assert done["stdout"] == "x" * MAX_OUTPUT_BYTES + (
        f"\n[output cut: {big} bytes in all, the first {MAX_OUTPUT_BYTES} shown]"
    )
    assert (done["stderr"], done["stderr_truncated"]) == ("small\n", False)
    assert done["exit_code"] == 0


def test_the_environment_is_built_from_scratch(
    box: Toolbox, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTWORKERS_API_KEY", "sk-the-model-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-another-key")
    monkeypatch.setenv("KUBECONFIG", "/var/run/pod/kubeconfig")
    monkeypatch.setenv("AGENTWORKERS_SECRETS_DIR", "/var/run/agentworkers/secrets")
    done = run(box, command=["env"])
    env = dict(line.split("=", 1) for line in done["stdout"].splitlines())
    assert env == {
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
    }
    assert "sk-" not in done["stdout"]


def test_bad_commands_and_directories_are_refused(box: Toolbox, root: Path) -> None:
    (root / "file.txt").write_text("x")
    assert box.call("run_command", {"command": ["no-such-command-here"]}).error == (
        "cannot run 'no-such-command-here': No such file or directory"
    )
    assert box.call("run_command", {"command": ["pwd"], "cwd": "../"}).error == (
        "path '../' is outside the sandbox"
    )
    assert box.call("run_command", {"command": ["pwd"], "cwd": "/etc"}).error == (
        "path '/etc' is absolute; use a path relative to the sandbox"
    )
    assert box.call("run_command", {"command": ["pwd"], "cwd": "file.txt"}).error == (
        "'file.txt' is not a directory (or a part of it is not)"
    )
    assert box.call("run_command", {"command": ["pwd"], "cwd": "nope"}).error == (
        "'nope' does not exist"
    )
    too_long = box.call("run_command", {"command": "true", "timeout": 601}).error
    assert too_long is not None and too_long.startswith("invalid arguments for run_command")
    empty = box.call("run_command", {"command": []}).error
    assert empty is not None and empty.startswith("invalid arguments for run_command")


# --- links: followed inside, refused outside, never raced ------------------------------


def test_links_inside_are_followed_and_shown_in_listings(box: Toolbox, root: Path) -> None:
    # The layout a kubelet gives a ConfigMap volume: every key a link through ..data.
    skill = root / "skills" / "demo"
    (skill / "..2026_12_02").mkdir(parents=True)
    (skill / "..2026_12_02" / "SKILL.md").write_text("---\nname: demo\n---\n")
    os.symlink("..2026_12_02", skill / "..data")
    os.symlink("..data/SKILL.md", skill / "SKILL.md")

    read = box.call("read_file", {"path": "skills/demo/SKILL.md"}).result
    assert read is not None and read["content"] == "---\nname: demo\n---\n"
    listing = box.call("list_files", {"path": "skills/demo"}).result
    assert listing is not None
    assert listing["entries"] == [
        {"name": "..2026_12_02", "dir": True},
        {"name": "..data", "dir": False, "link": True},
        {"name": "SKILL.md", "dir": False, "link": True},
    ]
    os.symlink("sub/../../sandbox/sub", root / "climbs")  # above the root, then back in
    assert box.call("list_files", {"path": "climbs"}).error == (
        "path 'climbs' is outside the sandbox"
    )
    os.symlink("loop", root / "loop")
    loop = box.call("read_file", {"path": "loop"}).error
    assert loop is not None and "symbolic links" in loop


MIN_FLIPS = 100


class Flipper:
    """A second thread that puts at `path`, in turn, what `real` made and a link to
    `outside` (each renamed in and out: `path` is briefly absent between, and what a
    write makes there then is cleared), as fast as it can, until stopped."""

    def __init__(self, path: Path, real: Callable[[Path], None], outside: str) -> None:
        self.path = path
        self.spare_real, self.spare_link = path.with_name("spare-real"), path.with_name("spare")
        real(self.spare_real)
        os.symlink(outside, self.spare_link)
        self.stop = threading.Event()
        self.flips = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for spare in (self.spare_real, self.spare_link):
                try:
                    os.rename(spare, self.path)
                except OSError:  # a write made a directory there meanwhile: clear it
                    shutil.rmtree(self.path, ignore_errors=True)
                    continue
                os.rename(self.path, spare)
            self.flips += 2

    def __enter__(self) -> Flipper:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(5)


def inside_file(path: Path) -> None:
    path.write_text("inside")


def inside_dir(path: Path) -> None:
    path.mkdir()
    (path / "f").write_text("inside")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the sandbox whose file `f` must never be read or written."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_text("OUTSIDE")
    return tmp_path / "outside"


def hammer(
    call: Callable[[], Any], flipper: Flipper, seconds: float = 2.0, most: int = 20000
) -> Iterator[Any]:
    """`call` again and again for `seconds`, and on (up to 30 s) until the flipper has
    swapped enough times for a race to be likely: a loaded machine swaps more slowly."""
    start = time.monotonic()
    for _ in range(most):
        spent = time.monotonic() - start
        if spent > 30 or (spent > seconds and flipper.flips > MIN_FLIPS):
            return
        yield call()


@pytest.mark.parametrize(
    ("target", "real", "path"),
    [
        ("outside/f", inside_file, "f"),  # the file itself swapped (absolute link)
        ("../outside/f", inside_file, "f"),  # the same, by a relative link that climbs out
        ("outside", inside_dir, "d/f"),  # a directory on the way swapped
    ],
)
def test_a_swapped_link_never_leads_a_read_outside(
    box: Toolbox,
    root: Path,
    outside: Path,
    target: str,
    real: Callable[[Path], None],
    path: str,
) -> None:
    link = str(outside.parent / target) if not target.startswith("..") else target
    with Flipper(root / path.split("/", maxsplit=1)[0], real, link) as flipper:
        results = list(hammer(lambda: box.call("read_file", {"path": path}), flipper))
    contents = [r.result["content"] for r in results if r.result is not None]
    assert "OUTSIDE" not in contents
    assert flipper.flips > MIN_FLIPS
    assert "inside" in contents  # it read while the swaps went on
    assert any(r.error == f"path {path!r} is outside the sandbox" for r in results)


def test_a_swapped_link_never_leads_a_write_outside(
    box: Toolbox, root: Path, outside: Path
) -> None:
    with Flipper(root / "d", inside_dir, str(outside)) as flipper:
        results = list(
            hammer(lambda: box.call("write_file", {"path": "d/new", "content": "x"}), flipper, 1.5)
        )
    assert sorted(p.name for p in outside.iterdir()) == ["f"]
    assert (outside / "f").read_text() == "OUTSIDE"
    assert flipper.flips > MIN_FLIPS
    assert any(r.error is None for r in results) and any(r.error for r in results)


def test_the_same_swaps_defeat_a_check_then_open(root: Path, outside: Path) -> None:
    """The control: what the tools did before (resolve the path, check it, then open it
    by name) reads outside under these swaps, so the tests above can fail."""

    def check_then_open() -> str | None:
        try:
            full = os.path.realpath(root / "f")
            if os.path.commonpath([root, full]) != str(root):
                return None
            with open(root / "f") as f:
                return f.read()
        except OSError:
            return None

    with Flipper(root / "f", inside_file, str(outside / "f")) as flipper:
        leaked = any(read == "OUTSIDE" for read in hammer(check_then_open, flipper, 10.0, 10**6))
    assert leaked
