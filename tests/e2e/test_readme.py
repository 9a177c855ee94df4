"""The README's tour runs as written, line by line, in a namespace of its own.

Each command line of the tour's second block is run by a shell, with `tour` replaced by
the test's namespace (the session's operator serves only its own namespaces) and the
one line `make run` prints (`hack/run.py`'s EXPORT) as the environment. A followed event
stream (Ctrl-C in the README) is stopped after a few seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.support import REPO, Cluster

pytestmark = pytest.mark.usefixtures("operator")

FOLLOWED = 5  # seconds a `--follow` line runs before the test stops it, as Ctrl-C would


def tour() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## A quick tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = [line.split("  #", 1)[0].strip() for line in blocks[1].splitlines()]
    return [line for line in lines if line]


def test_the_export_line_is_the_one_make_run_prints() -> None:
    run = (REPO / "hack" / "run.py").read_text()
    export = re.search(r'^EXPORT = "(.*)"$', run, re.M)
    assert export is not None
    assert tour()[0] == export.group(1)


def test_the_readme_tour_runs_as_written(cluster: Cluster, namespace: str, podrunner: Path) -> None:
    assert cluster.bin_dir is not None
    env = {
        **cluster.env,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{cluster.bin_dir}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
    }
    ran = []
    for line in tour():
        if line.startswith("export ") or line.startswith("kubectl create namespace"):
            continue  # the environment above; the namespace fixture made the namespace
        command = re.sub(r"(-n|namespace) tour\b", rf"\1 {namespace}", line)
        follow = "--follow" in command
        done = subprocess.run(
            ["bash", "-c", f"timeout {FOLLOWED} {command}" if follow else command],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        ok = done.returncode == 124 if follow else done.returncode == 0
        assert ok, f"{line}\n-> exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        ran.append((line, done.stdout))
    collected = next(out for line, out in ran if "collect review" in line)
    assert "Killed" in collected and "not needed" in collected
