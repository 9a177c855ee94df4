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

# The one line the README quotes: this control plane's kubeconfig, its own kubectl
# (.cluster/bin, kept by hack/localcluster.py) and the agentworkers CLI.
EXPORT = "export KUBECONFIG=$PWD/.cluster/kubeconfig PATH=$PWD/.cluster/bin:$PWD/.venv/bin:$PATH"


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
        print(f"\nIn another terminal, here:\n\n  {EXPORT}\n")
        print("Ctrl-C stops them (the control plane keeps running: make cluster-down).")
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
