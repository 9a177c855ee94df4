"""hack/githttp.py: git's own http-backend behind a loopback HTTP server, read by a real
git client (protocol v0 and v2), as Flux's source-controller reads it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from githttp import serving

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


@pytest.mark.parametrize("protocol", ["0", "2"])
def test_a_clone_over_http_gets_every_commit(tmp_path: Path, protocol: str) -> None:
    git("init", "--quiet", "--bare", "--initial-branch=main", "srv/agents.git", cwd=tmp_path)
    work = tmp_path / "work"
    git("init", "--quiet", "--initial-branch=main", str(work), cwd=tmp_path)
    for n in range(2):
        (work / "file").write_text(f"version {n}\n")
        git("add", "file", cwd=work)
        git("commit", "--quiet", "-m", f"commit {n}", cwd=work)
    git("push", "--quiet", str(tmp_path / "srv" / "agents.git"), "main", cwd=work)
    with serving(tmp_path / "srv") as url:
        git(
            "-c",
            f"protocol.version={protocol}",
            "clone",
            "--quiet",
            f"{url}/agents.git",
            "clone",
            cwd=tmp_path,
        )
        missing = subprocess.run(
            ["git", "ls-remote", f"{url}/nothing.git"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert (tmp_path / "clone" / "file").read_text() == "version 1\n"
    assert git("rev-parse", "HEAD", cwd=tmp_path / "clone") == git("rev-parse", "HEAD", cwd=work)
    assert missing.returncode != 0
