"""The CLI as a user installs it: a wheel in a fresh virtualenv, used as a kubectl plugin.

What `make dist` builds and the README's `pipx install` line installs: its own
environment, nothing from this repository's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import REPO, Cluster

pytestmark = pytest.mark.usefixtures("operator")


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=cwd, timeout=600, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_runs_as_kubectl_workers(
    cluster: Cluster, namespace: str, planner: dict[str, Any], tmp_path: Path
) -> None:
    assert cluster.bin_dir is not None
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(REPO))
    [wheel] = dist.glob("agentworkers-*.whl")
    run(sys.executable, "-m", "venv", str(venv))
    run(str(venv / "bin" / "pip"), "install", "--quiet", str(wheel))
    # Only the fresh environment and kubectl: not this repository's venv or sources.
    env = {**cluster.env, "PATH": f"{venv / 'bin'}:{cluster.bin_dir}:/usr/bin:/bin"}
    env.pop("PYTHONPATH", None)
    elsewhere = tmp_path  # not the repository, whose package would otherwise be importable
    assert run("kubectl", "workers", "--help", env=env, cwd=elsewhere).startswith(
        "usage: kubectl workers"
    )
    assert run("kubectl", "workers", "--version", env=env, cwd=elsewhere).startswith(
        "kubectl workers "
    )
    spawned = run(
        "kubectl", "workers", "-n", namespace, "spawn", "w1", "-m", "hello", env=env, cwd=elsewhere
    )
    assert spawned == "worker/w1 spawned\n"
    where = run(
        str(venv / "bin" / "python"), "-c", "import agentworkers; print(agentworkers.__file__)",
        env=env, cwd=elsewhere,
    )  # fmt: skip
    assert where.startswith(str(venv)), where


def test_the_krew_plugin_installs_and_runs(
    cluster: Cluster, namespace: str, planner: dict[str, Any], tmp_path: Path
) -> None:
    """What `make plugin` packs, installed by krew from its manifest and archive."""
    assert cluster.bin_dir is not None
    krew = run("bash", str(REPO / "hack" / "build-krew.sh")).strip().splitlines()[-1]
    made = run(sys.executable, str(REPO / "hack" / "build-plugin.py")).split()
    manifest, archive = made[-2], made[-1]
    root = tmp_path / "krew"
    python = Path(sys.executable).resolve().parent  # the Python the plugin was packed for
    env = {
        **cluster.env,
        "KREW_ROOT": str(root),
        "SHIV_ROOT": str(tmp_path / "shiv"),
        "PATH": f"{root / 'bin'}:{cluster.bin_dir}:{python}:/usr/bin:/bin",
    }
    env.pop("PYTHONPATH", None)
    run(f"{krew}/krew", "install", f"--manifest={manifest}", f"--archive={archive}", env=env)
    assert (root / "bin" / "kubectl-workers").exists()
    version = run("kubectl", "workers", "--version", env=env, cwd=tmp_path)
    assert version.startswith("kubectl workers ")
    spawned = run(
        "kubectl", "workers", "-n", namespace, "spawn", "w2", "-m", "hello", env=env, cwd=tmp_path
    )
    assert spawned == "worker/w2 spawned\n"
