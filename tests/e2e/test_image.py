"""The image `make image` builds (hack/image.py): it is the Dockerfile's, and it starts in a
real container (runc) the way a worker pod runs it: uid 65532, a read-only root, /tmp and
/sandbox the only places to write, no capabilities, no new privileges.

Needs root (the build's debootstrap and chroot, and runc), as CI has. No cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import image

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap and runc need root"),
    # A cold build when `make tools` has not made it: minutes.
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def built() -> image.Image:
    # `make tools` built it; here it is at most the code's layer again (seconds).
    return image.ensure_image()


def snapshot(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every entry of a root filesystem with its inode, mode, size and modification time (not
    its change time: another build's hard links to the base's files change that)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            info = (Path(dirpath) / name).lstat()
            found[f"{dirpath}/{name}"] = (
                info.st_ino,
                info.st_mode,
                info.st_size,
                info.st_mtime_ns,
            )
    return found


def runc_config(built: image.Image, args: list[str]) -> dict[str, Any]:
    """The least an OCI runtime needs to run the image as a worker pod's securityContext
    says: the image's env and the pod's HOME, a read-only root, tmpfs for /tmp and the
    sandbox, an empty capability set, no new privileges, namespaces of its own (a network
    namespace with nothing in it)."""
    env = [e for e in built.config["config"]["Env"] if not e.startswith("HOME=")]
    tmpfs = ["nosuid", "nodev", "mode=1777", "size=16m"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 65532, "gid": 65532},
            "args": args,
            "env": [*env, "HOME=/sandbox"],
            "cwd": "/sandbox",
            "capabilities": {
                "bounding": [],
                "effective": [],
                "permitted": [],
                "inheritable": [],
                "ambient": [],
            },
            "noNewPrivileges": True,
        },
        "root": {"path": str(built.rootfs), "readonly": True},
        "hostname": "worker",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": tmpfs},
            {"destination": "/sandbox", "type": "tmpfs", "source": "tmpfs", "options": tmpfs},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger", "/proc/bus"],
        },
    }


@pytest.fixture
def container(built: image.Image, tmp_path: Path) -> Iterator[Any]:
    """Runs `args` in a fresh container; returns the finished process."""
    names: list[str] = []

    def start(args: list[str]) -> subprocess.CompletedProcess[str]:
        bundle = tmp_path / f"bundle-{len(names)}"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(runc_config(built, args)))
        name = f"aw-image-{uuid.uuid4().hex[:8]}"
        names.append(name)
        return subprocess.run(
            ["runc", "run", "--bundle", str(bundle), name],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    yield start
    for name in names:
        subprocess.run(["runc", "delete", "--force", name], capture_output=True, check=False)


def test_the_image_is_the_dockerfiles(built: image.Image) -> None:
    recipe = image.Recipe.read(REPO)
    config = built.config["config"]
    assert {k: config.get(k) for k in recipe.config()} == recipe.config()
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["agentworkers"]
    assert config["Labels"]["org.opencontainers.image.version"] == recipe.version
    assert built.tag == f"agentworkers:{recipe.version}"
    root = built.rootfs
    # Debian's release and Python, as the Dockerfile's base and `python` stage name them.
    os_release = (root / "etc/os-release").read_text()
    assert f"VERSION_CODENAME={recipe.suite}" in os_release
    assert (root / "opt/agentworkers/bin/python").readlink().name.startswith("python3")
    assert os.path.realpath(root / "opt/agentworkers/bin/python").endswith("/python3.11")
    assert "python3.11" in recipe.stages[0].of("RUN")[0]
    # Only the venv came from the build stage: no pip, no sources, no wheels, no build tools.
    status = (root / "var/lib/dpkg/status").read_text()
    assert "Package: python3.11\n" in status
    assert "Package: python3-pip\n" not in status
    assert not list(root.glob("opt/agentworkers/lib/python*/site-packages/pip"))
    assert not (root / "src").exists() and not (root / "wheels").exists()
    assert [p.name for p in (root / "opt").iterdir()] == ["agentworkers"]
    assert not list(root.glob("usr/bin/*gcc*"))
    # The mount points a read-only root cannot make at run time.
    for path in ("sandbox", "tmp", "run/agentworkers", "run/secrets/kubernetes.io/serviceaccount"):
        assert (root / path).is_dir(), path
    for path in image.MOUNT_FILES:
        assert (root / path).is_file(), path


def test_the_rootfs_is_the_layouts(built: image.Image, tmp_path: Path) -> None:
    """The root a container runs is the image's, as `umoci unpack` makes it (the builder
    makes it from the base's unpacked root and the code's layer, without unpacking)."""
    unpacked = tmp_path / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", built.ref, str(unpacked)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    diff = subprocess.run(
        ["diff", "-r", "--no-dereference", str(unpacked / "rootfs"), str(built.rootfs)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert diff.returncode == 0, diff.stdout[-3000:] + diff.stderr[-3000:]
    unpacked_config = json.loads((unpacked / "config.json").read_text())["process"]
    assert unpacked_config["user"] == {"uid": 65532, "gid": 65532}
    assert unpacked_config["args"] == ["agentworkers", "--help"]


def test_the_image_runs_the_working_trees_code(built: image.Image) -> None:
    installed = next(built.rootfs.glob("opt/agentworkers/lib/python3.*/site-packages/agentworkers"))
    source = REPO / "operator" / "agentworkers"
    ours = sorted(p.relative_to(source) for p in source.rglob("*.py"))
    assert ours == sorted(p.relative_to(installed) for p in installed.rglob("*.py"))
    for rel in ours:
        assert (installed / rel).read_bytes() == (source / rel).read_bytes(), rel
        # Compiled at build time: a read-only root never gets bytecode written at run time.
        cached = installed / rel.parent / "__pycache__"
        assert list(cached.glob(f"{rel.stem}.cpython-311*.pyc")), rel


def test_starts_in_runc_as_a_worker_pod_runs_it(built: image.Image, container: Any) -> None:
    before = snapshot(built.rootfs)
    config = built.config["config"]
    helped = container([*config["Entrypoint"], *config["Cmd"]])
    assert helped.returncode == 0, helped.stderr
    assert "agentworkers" in helped.stdout
    ran = container(["agentworkers", "run", "--help"])
    assert ran.returncode == 0, ran.stderr
    # The runtime imports, and nothing it does needs a write outside /tmp and the sandbox.
    probe = """
import json, os, tempfile
import agentworkers.runtime.main, agentworkers.runtime.loop, agentworkers.runtime.tools
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
try:
    open("/opt/agentworkers/x", "w")
    root = "writable"
except OSError as e:
    root = e.strerror
with tempfile.NamedTemporaryFile() as f:
    tmp = f.name
open(os.path.expanduser("~/note"), "w").write("ok")
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "cap": status["CapEff"],
    "nnp": status["NoNewPrivs"], "root": root, "tmp": tmp, "home": os.path.expanduser("~"),
    "cwd": os.getcwd(), "bytecode": __import__("sys").dont_write_bytecode}))
"""
    probed = container(["python", "-c", probe])
    assert probed.returncode == 0, probed.stderr
    seen = json.loads(probed.stdout)
    assert seen["uid"] == 65532 and seen["gid"] == 65532
    assert int(seen["cap"], 16) == 0
    assert seen["nnp"].strip() == "1"
    assert seen["root"] == "Read-only file system"
    assert seen["tmp"].startswith("/tmp/")
    assert seen["home"] == seen["cwd"] == "/sandbox"
    assert seen["bytecode"] is True
    assert snapshot(built.rootfs) == before, "a container wrote into the image's root"
