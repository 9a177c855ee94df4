#!/usr/bin/env python3
"""API writes and latency of the config plane and the worker lifecycle, on the local control plane.

    python bench/bench_api_writes.py

Counts the mutating requests the API server served (its own `apiserver_request_total`,
by verb and resource) around one profile edit, around one worker from spawn to kill to
collect, and the write budget: one Worker's whole life (spawn, its run to Done in a pod,
collect, the garbage collector's cleanup) side by side with one Job's (create, its pod
completes, delete). The operator's own writes come from its
`agentworkers_api_requests_total`; the Job controller's are the API server's count less
the writes of the user, the scheduler and the kubelet (kwok), by resource. Times apply ->
new revision and spawn -> pod. Bounded: a handful of objects, loopback only. Other clients
of the same cluster add to the counts, so run it alone.
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

from bench.bench_scale import job  # noqa: E402
from tests.e2e.support import (  # noqa: E402
    Cluster,
    Operator,
    install_crds,
    local_cluster,
    pod_runner,
    wait_until,
)

from agentworkers.api import WorkerSpec  # noqa: E402
from agentworkers.client import Client  # noqa: E402

MUTATING = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
# The control plane's own heartbeats (leader leases, the apiserver's endpoints), which go on
# whatever the operator does.
BACKGROUND = {"leases", "endpoints"}
# events.k8s.io carries the scheduler's and other components' Events, and their series
# updates go on too (the operator and the Job controller post through core/v1).
LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
OWN = re.compile(r"^agentworkers_api_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
# Writes of a Job's life that are not the Job controller's: the user's create and delete,
# the scheduler's binding, the kubelet's (kwok's) pod status and token requests, and the pod
# deletes (the garbage collector's, then kwok's final one).
NOT_THE_JOB_CONTROLLER = {
    ("POST", "jobs"),
    ("DELETE", "jobs"),
    ("POST", "pods/binding"),
    ("PATCH", "pods/status"),
    ("POST", "serviceaccounts/token"),
    ("DELETE", "pods"),
}


def writes(cluster: Cluster) -> Counter[tuple[str, str]]:
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if (
            labels.get("verb") in MUTATING
            and labels.get("resource") not in BACKGROUND
            and labels.get("group") != "events.k8s.io"
        ):
            key = (
                labels["verb"],
                labels.get("resource", "")
                + ("/" + labels["subresource"] if labels.get("subresource") else ""),
            )
            counts[key] += int(float(match["value"]))
    return counts


def operator_writes(operator: Operator) -> Counter[tuple[str, str]]:
    """The operator's own writes, from its metrics."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in operator.metrics().splitlines():
        if match := OWN.match(line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            if labels["verb"] in MUTATING and labels["resource"] not in BACKGROUND:
                counts[(labels["verb"], labels["resource"])] += int(float(match["value"]))
    return counts


def delta(
    before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]
) -> Counter[tuple[str, str]]:
    return Counter({k: after[k] - before[k] for k in after if after[k] - before[k] > 0})


def show(title: str, counts: Counter[tuple[str, str]]) -> None:
    print(f"\n{title}: {sum(counts.values())} writes")
    for (verb, resource), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:4d}  {verb:6s} {resource}")


def gone(what: str, cluster: Cluster, namespace: str, kind: str, name: str) -> None:
    wait_until(
        f"{what} to go",
        lambda: (
            not cluster.kubectl(
                "get", kind, name, "-n", namespace, "--ignore-not-found", "-o", "name"
            ).stdout.strip()
        ),
    )


def write_budget(
    cluster: Cluster, client: Client, operator: Operator, namespace: str, tmp: Path
) -> None:
    """A whole life, Worker beside Job: every write, and the controller's own."""
    with pod_runner(cluster, namespace, tmp / "pods"):
        before, own = writes(cluster), operator_writes(operator)
        client.spawn("life", WorkerSpec(agent="planner", initial_message="hi"))
        wait_until("the run to end", lambda: client.get("life").status.phase == "Done")
        client.collect("life", timeout=30)
        gone("the worker's pod", cluster, namespace, "pod", "life")
        time.sleep(1.5)
        worker_all = delta(before, writes(cluster))
        worker_own = delta(own, operator_writes(operator))
    before = writes(cluster)
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(job("life")))
    wait_until(
        "the job to complete",
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in cluster.kubectl_json("get", "job", "life", "-n", namespace)
            .get("status", {})
            .get("conditions", [])
        ),
    )
    cluster.kubectl("delete", "job", "life", "-n", namespace, "--cascade=background")
    wait_until(
        "the job's pod to go",
        lambda: (
            not cluster.kubectl(
                "get", "pods", "-n", namespace, "-l", "job-name=life", "-o", "name"
            ).stdout.strip()
        ),
    )
    time.sleep(1.5)
    job_all = delta(before, writes(cluster))
    job_controller = Counter(
        {
            (verb, resource): n
            for (verb, resource), n in job_all.items()
            if (verb, resource) not in NOT_THE_JOB_CONTROLLER
            and not resource.startswith("events.k8s.io/")
        }
    )
    show("a Worker's whole life: all writes", worker_all)
    show("  of which the operator's own", worker_own)
    show("a Job's whole life: all writes", job_all)
    show("  of which the Job controller's", job_controller)
    print(
        f"\nwrite budget, whole life: operator {sum(worker_own.values())} "
        f"vs Job controller {sum(job_controller.values())}; all writes "
        f"{sum(worker_all.values())} vs {sum(job_all.values())}"
    )


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
        Operator.of_own(cluster, Path(tmp), prefix) as operator,
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

        write_budget(cluster, client, operator, namespace, Path(tmp))
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
