#!/usr/bin/env python3
"""Run agentworkers on the local control plane until Ctrl-C: the operator and the pod runner.

    make run

For trying the CLI by hand (see the README's tour): the control plane comes up (or is
reused), the CRDs are applied, and the operator (with its admission webhook) and
hack/podrunner.py run in the foreground. Logs go to .cluster/run/.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.support import Operator, local_cluster, pod_runner  # noqa: E402


def main() -> int:
    cluster = local_cluster()
    crds = str(REPO / "crds")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", crds)
    cluster.kubectl("wait", "--for=condition=Established", "-f", crds)
    workdir = REPO / ".cluster" / "run"
    workdir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Operator.start(cluster, workdir) as operator, pod_runner(cluster, "", workdir / "pods"):
        print(f"operator running (log {operator.log}, metrics {operator.metrics_url})")
        print(f"pod runner running (logs in {workdir / 'pods'})")
        tools = f"{REPO / '.venv' / 'bin'}:{cluster.bin_dir}"
        print(f"\n  export KUBECONFIG={cluster.kubeconfig} PATH={tools}:$PATH\n")
        print("Ctrl-C stops them (the control plane keeps running: make cluster-down).")
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
