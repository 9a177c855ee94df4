#!/usr/bin/env python3
"""Release artefacts in dist/: the wheel and sdist, and the packaged chart.

    python hack/dist.py [--out dist]

One version everywhere: the package's (pyproject.toml, agentworkers.__version__), the
chart's version and appVersion (the image tag its pods run by default). A mismatch stops
the build before anything is written. Then `pipx install dist/agentworkers-<v>-*.whl`
installs the CLI, and `helm push dist/agentworkers-<v>.tgz oci://<registry>/charts`
publishes the chart (docs/install.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "agentworkers"


def versions() -> dict[str, str]:
    sys.path.insert(0, str(REPO / "operator"))
    from agentworkers import __version__  # noqa: PLC0415

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {
        "pyproject.toml version": project["version"],
        "agentworkers.__version__": __version__,
        "Chart.yaml version": str(chart["version"]),
        "Chart.yaml appVersion": str(chart["appVersion"]),
    }


def helm() -> Path:
    built = subprocess.run(
        ["bash", str(REPO / "hack" / "build-helm.sh")], check=True, capture_output=True, text=True
    )
    return Path(built.stdout.strip().splitlines()[-1]) / "helm"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    args = parser.parse_args()
    found = versions()
    if len(set(found.values())) != 1:
        print("error: versions differ: " + ", ".join(f"{k} {v}" for k, v in found.items()))
        return 1
    version = next(iter(found.values()))
    args.out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(args.out), str(REPO)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [str(helm()), "package", str(CHART), "--destination", str(args.out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    made = [
        args.out / f"agentworkers-{version}-py3-none-any.whl",
        args.out / f"agentworkers-{version}.tar.gz",
        args.out / f"agentworkers-{version}.tgz",
    ]
    for path in made:
        if not path.exists():
            print(f"error: {path} was not made")
            return 1
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
