"""Release artefacts (`make dist`): a wheel pipx can install, an sdist, and the chart package
helm pushes to an OCI registry, all of one version."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from agentworkers import __version__
from tests.unit.chart.helm import REPO, require_helm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_make_dist_builds_the_wheel_the_sdist_and_the_chart(tmp_path: Path) -> None:
    require_helm()
    made = subprocess.run(
        [sys.executable, str(REPO / "hack" / "dist.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    v = __version__
    with zipfile.ZipFile(tmp_path / f"agentworkers-{v}-py3-none-any.whl") as wheel:
        names = wheel.namelist()
        assert "agentworkers/cli/main.py" in names
        entry = wheel.read(f"agentworkers-{v}.dist-info/entry_points.txt").decode()
    # pipx exposes both commands: the CLI and the kubectl plugin.
    assert "agentworkers = agentworkers.cli.main:main" in entry
    assert "kubectl-workers = agentworkers.cli.main:main" in entry
    with tarfile.open(tmp_path / f"agentworkers-{v}.tar.gz") as sdist:
        assert f"agentworkers-{v}/pyproject.toml" in sdist.getnames()
    with tarfile.open(tmp_path / f"agentworkers-{v}.tgz") as chart:
        names = chart.getnames()
        meta = yaml.safe_load(chart.extractfile("agentworkers/Chart.yaml").read())  # type: ignore[union-attr]
    assert (meta["version"], meta["appVersion"]) == (v, v)
    crds = {Path(n).name for n in names if n.startswith("agentworkers/crds/")}
    assert crds == {p.name for p in (REPO / "crds").glob("*.yaml")}
