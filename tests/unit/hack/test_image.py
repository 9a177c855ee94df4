"""hack/image.py's own logic, without building: where its Debian packages come from, how a
failed step reads, and how an overlay's changes become an OCI layer and a root.

The Dockerfile's reading is in tests/unit/chart/test_dockerfile.py; the build itself in
tests/e2e/test_image.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

import image

REPO = Path(__file__).resolve().parents[3]


def machine(tmp_path: Path, codename: str) -> Path:
    """An /etc with an apt configuration in both of apt's spellings."""
    etc = tmp_path / "etc"
    (etc / "apt" / "sources.list.d").mkdir(parents=True)
    (etc / "os-release").write_text(f'ID=debian\nVERSION_CODENAME="{codename}"\n')
    (etc / "apt" / "sources.list.d" / "debian.sources").write_text(
        f"""Types: deb
# a comment
URIs: http://mirror.test/debian
Suites: {codename} {codename}-updates
Components: main

Types: deb
URIs: http://off.test/debian
Suites: {codename}
Enabled: no

Types: deb deb-src
URIs: http://mirror.test/debian-security
Suites: {codename}-security
Components: main
"""
    )
    (etc / "apt" / "sources.list.d" / "other.list").write_text(
        f"deb [arch=amd64] http://other.test/debian {codename}-backports main\n"
    )
    return etc


def test_the_mirrors_are_the_machines(tmp_path: Path) -> None:
    etc = machine(tmp_path, "bookworm")
    expected = {
        "bookworm": "http://mirror.test/debian",
        "bookworm-updates": "http://mirror.test/debian",
        "bookworm-security": "http://mirror.test/debian-security",
    }
    assert image.mirrors("bookworm", etc) == expected
    # Another release than the machine's: its mirrors, the image's suites.
    assert image.mirrors("trixie", etc) == {
        k.replace("bookworm", "trixie"): v for k, v in expected.items()
    }


def test_no_debian_mirror_is_an_error(tmp_path: Path) -> None:
    etc = machine(tmp_path, "bookworm")
    (etc / "os-release").write_text("ID=ubuntu\nVERSION_CODENAME=noble\n")
    with pytest.raises(image.ImageError, match="no Debian mirror for noble"):
        image.mirrors("bookworm", etc)


def test_a_failed_step_says_what_failed(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    image.run(["sh", "-c", "echo fine"], "first", log)
    with pytest.raises(image.ImageError) as failed:
        image.run(["sh", "-c", "echo no such package >&2; exit 100"], "RUN apt-get x", log)
    message = str(failed.value)
    assert message.startswith("RUN apt-get x failed (exit 100)")
    assert "no such package" in message and str(log) in message
    assert "fine" in log.read_text()


def test_an_overlays_changes_become_a_layer_and_a_root(tmp_path: Path) -> None:
    # The base's root, and a root made from it by hard links, as the builder makes them.
    base = tmp_path / "base"
    venv = base / "opt" / "agentworkers"
    (venv / "bin").mkdir(parents=True)
    (venv / "kept.py").write_text("kept")
    (venv / "replaced.py").write_text("old")
    (venv / "gone.py").write_text("gone")
    root = tmp_path / "root"
    subprocess.run(["cp", "-al", str(base), str(root)], check=True)
    # What a build stage's RUN left in the overlay's upper directory.
    upper = tmp_path / "upper"
    changed = upper / "opt" / "agentworkers"
    (changed / "bin").mkdir(parents=True)
    (changed / "replaced.py").write_text("new")
    (changed / "new.py").write_text("new")
    (changed / "bin" / "tool").symlink_to("../new.py")
    (upper / "src").mkdir()
    (upper / "src" / "not-shipped").write_text("x")
    whiteout = os.geteuid() == 0
    if whiteout:  # an overlay's whiteout is a character device 0:0; mknod needs root
        os.mknod(changed / "gone.py", stat.S_IFCHR | 0o600, 0)
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        image.write_layer(upper, "/opt/agentworkers", tar, root)
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members["opt/agentworkers/replaced.py"]).read() == b"new"  # type: ignore[union-attr]
    assert {m.uid for m in members.values()} == {0}
    assert members["opt/agentworkers/bin/tool"].linkname == "../new.py"
    assert "src/not-shipped" not in members
    assert list(members)[:2] == ["opt", "opt/agentworkers"]
    # The root has the change; the base's own files are untouched.
    assert (root / "opt/agentworkers/replaced.py").read_text() == "new"
    assert (venv / "replaced.py").read_text() == "old"
    assert (root / "opt/agentworkers/kept.py").stat().st_ino == (venv / "kept.py").stat().st_ino
    assert (root / "opt/agentworkers/bin/tool").read_text() == "new"
    if whiteout:
        assert "opt/agentworkers/.wh.gone.py" in members
        assert members["opt/agentworkers/.wh.gone.py"].isfile()
        assert not (root / "opt/agentworkers/gone.py").exists()
        assert (venv / "gone.py").exists()
