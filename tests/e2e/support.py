"""What every end-to-end test needs: a handle on a real cluster, kubectl, and waiting."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kubernetes

T = TypeVar("T")


@dataclass(frozen=True)
class Cluster:
    """A running API server: the local control plane, or the user's (AGENTWORKERS_CLUSTER=existing)."""

    kubeconfig: Path
    bin_dir: Path | None
    api: kubernetes.client.ApiClient

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        if self.bin_dir:
            env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as a user would; with check=False the caller reads the refusal."""
        kubectl = str(self.bin_dir / "kubectl") if self.bin_dir else "kubectl"
        result = subprocess.run(
            [kubectl, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)


def wait_until(
    what: str, probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.2
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
