"""Flux for the e2e tests, as a user runs it: source-controller and kustomize-controller
(built from Go modules by hack/build-flux.sh) against the local control plane, pulling
from a git repository served on loopback by git's own http-backend (hack/githttp.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from githttp import serving
from tests.e2e.support import REPO, Cluster, built, free_port, readyz, stop, wait_until


def build() -> Path:
    """The cached build's bin directory."""
    return built("build-flux.sh")


@dataclass
class Flux:
    """The two controllers, running; their logs under `workdir`."""

    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]

    @classmethod
    @contextlib.contextmanager
    def start(cls, cluster: Cluster, workdir: Path) -> Iterator[Flux]:
        bin_dir = build()
        cluster.kubectl("apply", "--server-side", "-f", str(bin_dir / "crds.yaml"))
        for crd in ("gitrepositories.source", "kustomizations.kustomize"):
            cluster.kubectl(
                "wait",
                "--for=condition=Established",
                f"crd/{crd}.toolkit.fluxcd.io",
                "--timeout=60s",
            )
        storage = free_port()
        (
            workdir / "artifacts"
        ).mkdir()  # source-controller refuses a storage path that is not there
        env = {**cluster.env, "RUNTIME_NAMESPACE": "flux-system"}
        common = ["--watch-all-namespaces=true", "--log-level=info", "--concurrent=4"]
        commands = {
            "source-controller": [
                f"--storage-path={workdir / 'artifacts'}",
                f"--storage-addr=127.0.0.1:{storage}",
                f"--storage-adv-addr=127.0.0.1:{storage}",
            ],
            "kustomize-controller": [],
        }
        flux = cls([], [])
        try:
            for name, extra in commands.items():
                health = free_port()
                log = workdir / f"{name}.log"
                with log.open("ab") as out:
                    flux.processes.append(
                        subprocess.Popen(
                            [
                                str(bin_dir / name),
                                *common,
                                *extra,
                                f"--metrics-addr=127.0.0.1:{free_port()}",
                                f"--health-addr=127.0.0.1:{health}",
                            ],
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            env=env,
                        )
                    )
                flux.logs.append(log)
                wait_until(f"{name} to be ready", lambda h=health: flux.ready(h), timeout=120)
            yield flux
        finally:
            for process in flux.processes:
                stop(process)

    def ready(self, health_port: int) -> bool:
        return readyz(health_port, zip(self.processes, self.logs, strict=True))

    def tail(self, lines: int = 30) -> str:
        return "\n".join(
            f"--- {log.stem}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in self.logs
        )


class GitRepo:
    """A bare repository served over HTTP on loopback, and a work tree that commits and
    pushes to it (by path, as a developer's push would land)."""

    def __init__(self, root: Path, url: str) -> None:
        self.bare = root / "srv" / "agents.git"
        self.work = root / "work"
        self.url = f"{url}/agents.git"
        self._git("init", "--quiet", "--bare", "--initial-branch=main", str(self.bare), cwd=root)
        self._git("init", "--quiet", "--initial-branch=main", str(self.work), cwd=root)
        shutil.copytree(REPO / "examples" / "gitops", self.work / "examples" / "gitops")

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(
            [
                "git",
                "-c",
                "user.name=Dev",
                "-c",
                "user.email=dev@example.com",
                *args,
            ],
            cwd=cwd or self.work,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()

    def commit(self, message: str, change: Callable[[Path], None] | None = None) -> str:
        """Apply `change` to the work tree, commit everything, push; the new commit's sha."""
        if change is not None:
            change(self.work / "examples" / "gitops")
        self._git("add", "--all")
        self._git("commit", "--quiet", "--allow-empty", "-m", message)
        self._git("push", "--quiet", str(self.bare), "main")
        return self._git("rev-parse", "HEAD")

    def revert(self, sha: str) -> str:
        self._git("revert", "--no-edit", sha)
        self._git("push", "--quiet", str(self.bare), "main")
        return self._git("rev-parse", "HEAD")


@contextlib.contextmanager
def served(root: Path) -> Iterator[GitRepo]:
    (root / "srv").mkdir(parents=True)
    with serving(root / "srv") as url:
        yield GitRepo(root, url)


def source_and_kustomization(namespace: str, url: str, wait: bool = True) -> list[dict[str, Any]]:
    """examples/gitops/flux/agents.yaml's staging pair, pointed at the test's repository and
    namespace (targetNamespace renames the overlay's Namespace to it), polled often."""
    return [
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "agents-main", "namespace": namespace},
            "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1m"},
        },
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "agents-staging", "namespace": namespace},
            "spec": {
                "sourceRef": {"kind": "GitRepository", "name": "agents-main"},
                "path": "./examples/gitops/overlays/staging",
                "targetNamespace": namespace,
                "interval": "10m",
                "prune": True,
                "wait": wait,
                "timeout": "2m",
            },
        },
    ]


def reconcile_now(cluster: Cluster, namespace: str) -> None:
    """What `flux reconcile kustomization agents-staging --with-source` asks for."""
    now = dt.datetime.now(dt.UTC).isoformat()
    for kind, name in (("gitrepository", "agents-main"), ("kustomization", "agents-staging")):
        cluster.kubectl(
            "annotate",
            kind,
            name,
            "-n",
            namespace,
            "--overwrite",
            f"reconcile.fluxcd.io/requestedAt={now}",
        )
