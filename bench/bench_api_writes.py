#!/usr/bin/env python3
"""API writes and latency of the config plane and the worker lifecycle, on the local control plane.

    python bench/bench_api_writes.py

Counts the mutating requests the API server served (its own `apiserver_request_total`,
by verb and resource) around one profile edit, and around one worker from spawn to
collect; times apply -> new revision and spawn -> pod. Bounded: a handful of objects,
loopback only. Other clients of the same cluster add to the counts, so run it alone.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.support import (  # noqa: E402
    Cluster,
    Operator,
    install_crds,
    local_cluster,
    wait_until,
)

from agentworkers.api import WorkerSpec  # noqa: E402
from agentworkers.client import Client  # noqa: E402

MUTATING = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
# The control plane's own heartbeats (leader leases, the apiserver's endpoints), which go on
# whatever the operator does.
BACKGROUND = {"leases", "endpoints"}
LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def writes(cluster: Cluster) -> Counter[tuple[str, str]]:
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("verb") in MUTATING and labels.get("resource") not in BACKGROUND:
            key = (
                labels["verb"],
                labels.get("resource", "")
                + ("/" + labels["subresource"] if labels.get("subresource") else ""),
            )
            counts[key] += int(float(match["value"]))
    return counts


def delta(
    before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]
) -> Counter[tuple[str, str]]:
    return Counter({k: after[k] - before[k] for k in after if after[k] - before[k] > 0})


def show(title: str, counts: Counter[tuple[str, str]]) -> None:
    print(f"\n{title}: {sum(counts.values())} writes")
    for (verb, resource), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:4d}  {verb:6s} {resource}")


def main() -> int:
    cluster = local_cluster()
    install_crds(cluster)
    api = cluster.api
    prefix = f"bench{uuid.uuid4().hex[:4]}"
    namespace = f"{prefix}-writes"
    cluster.kubectl("create", "namespace", namespace)
    examples = REPO / "examples"
    with (
        tempfile.TemporaryDirectory() as tmp,
        Operator.start(
            cluster,
            Path(tmp),
            f"--namespace={prefix}-*",
            f"--webhook-name=agentworkers-{prefix}.io",
        ) as operator,
        contextlib.ExitStack() as cleanup,
    ):
        cleanup.callback(cluster.kubectl, "delete", "namespace", namespace, "--wait=false")
        cluster.kubectl("apply", "-n", namespace, "-f", str(examples / "virtualagentprofiles.yaml"))
        cluster.kubectl("apply", "-n", namespace, "-f", str(examples / "agentconfig.yaml"))

        def revision() -> int:
            status = cluster.kubectl_json("get", "ac", "planner", "-n", namespace).get("status", {})
            return int((status.get("activeRevision") or {}).get("revision", 0))

        wait_until("revision 1", lambda: revision() == 1)
        time.sleep(2)  # let the status echoes settle before counting

        latencies, edit_writes = [], []
        for step in range(5):
            before = writes(cluster)
            start = time.monotonic()
            cluster.kubectl(
                "patch",
                "vap",
                "planner-researcher",
                "-n",
                namespace,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"overlay": {"maxSteps": 10 + step}}}),
            )
            wait_until("the next revision", lambda s=step: revision() == s + 2)
            latencies.append(time.monotonic() - start)
            time.sleep(1.5)  # the echoes of the operator's own status writes
            edit_writes.append(delta(before, writes(cluster)))
        show("one profile edit (the last of 5)", edit_writes[-1])
        print(f"  writes per edit over 5 edits: {[sum(d.values()) for d in edit_writes]}")
        print(
            f"  apply -> new revision: median {statistics.median(latencies) * 1000:.0f} ms, "
            f"max {max(latencies) * 1000:.0f} ms"
        )

        client = Client(api, namespace)
        before = writes(cluster)
        start = time.monotonic()
        client.spawn("bench-worker", WorkerSpec(agent="planner", initial_message="hi"))
        wait_until("the pod", lambda: client.get("bench-worker").status.pod)
        to_pod = time.monotonic() - start
        client.kill("bench-worker", reason="benchmark over", by="bench")
        client.collect("bench-worker", timeout=30)
        wait_until(
            "the worker gone",
            lambda: (
                not cluster.kubectl(
                    "get", "worker", "bench-worker", "-n", namespace, check=False
                ).stdout
            ),
        )
        time.sleep(1.5)
        show("one worker, spawn -> kill -> collect", delta(before, writes(cluster)))
        print(f"  spawn -> pod: {to_pod * 1000:.0f} ms")
        print(
            "\noperator metrics sample:\n"
            + "\n".join(
                line
                for line in operator.metrics().splitlines()
                if line.startswith(
                    ("agentworkers_revisions_created_total", "agentworkers_spawns_total")
                )
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
