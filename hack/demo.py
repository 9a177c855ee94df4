#!/usr/bin/env python3
"""The demo: agentworkers on a real local control plane, start to finish.

    make demo

Brings the local control plane up (building it on first use), installs the CRDs,
runs the operator, applies the examples and shows what a user would look at.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def main() -> int:
    step("Local control plane")
    up = subprocess.run(
        [sys.executable, str(REPO / "hack" / "localcluster.py"), "up", "--json"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    info = json.loads(up.stdout.strip().splitlines()[-1])
    env = dict(
        os.environ, KUBECONFIG=info["kubeconfig"], PATH=f"{info['binDir']}:{os.environ['PATH']}"
    )

    def kubectl(*args: str, stdin: str | None = None, show: bool = True) -> str:
        if show:
            print(f"$ kubectl {' '.join(args)}", flush=True)
        out = subprocess.run(
            ["kubectl", *args], input=stdin, env=env, capture_output=True, text=True, check=True
        ).stdout
        if show:
            print(out.rstrip(), flush=True)
        return out

    kubectl("version")
    kubectl("get", "nodes", "-o", "wide")

    step("CustomResourceDefinitions")
    kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "-f", str(REPO / "crds"), show=False)
    kubectl("api-resources", "--api-group=agentworkers.io")

    step("A pod on a kwok node")
    kubectl("delete", "pod", "demo-hello", "--ignore-not-found", "--wait=true", show=False)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "demo-hello"},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/demo-hello", "--timeout=60s")
    kubectl("get", "pod", "demo-hello", "-o", "wide")
    kubectl("delete", "pod", "demo-hello", "--wait=false", show=False)

    step("Done")
    print(f"The cluster keeps running: export KUBECONFIG={info['kubeconfig']}")
    print(f"kubectl is in {info['binDir']}; `make cluster-down` stops everything.")
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"(demo took {time.monotonic() - started:.0f}s)")
    sys.exit(code)
