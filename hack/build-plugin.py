#!/usr/bin/env python3
"""Pack the kubectl plugin for krew: one file with its dependencies, in an archive, and the
krew manifest for it.

    python hack/build-plugin.py     # dist/plugin/: the archive and workers.yaml

The plugin is a zipapp (shiv) of this package and its dependencies, for this machine's
platform and Python minor version (compiled dependencies such as pydantic-core are built
for one). Install it locally with:

    kubectl krew install --manifest=dist/plugin/workers.yaml \\
        --archive=dist/plugin/kubectl-workers-linux-amd64.tar.gz
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "dist" / "plugin"
ARCHIVE = "kubectl-workers-linux-amd64.tar.gz"


def version() -> str:
    init = (REPO / "operator" / "agentworkers" / "__init__.py").read_text()
    return "v" + init.split('__version__ = "', 1)[1].split('"', 1)[0]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    program = OUT / "kubectl-workers"
    subprocess.run(
        [sys.executable, "-m", "shiv", "--quiet", "--compressed", "--reproducible",
         "-c", "agentworkers", "-p", f"/usr/bin/env {python}", "-o", str(program), str(REPO)],
        check=True,
    )  # fmt: skip
    archive = OUT / ARCHIVE
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(program, arcname="kubectl-workers")
        tar.add(REPO / "LICENSE", arcname="LICENSE")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    template = (REPO / "plugins" / "krew" / "workers.yaml").read_text()
    manifest = OUT / "workers.yaml"
    manifest.write_text(
        template.replace("{{VERSION}}", version())
        .replace("{{SHA256}}", digest)
        .replace("{{PYTHON}}", python)
    )
    print(manifest)
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
