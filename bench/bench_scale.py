#!/usr/bin/env python3
"""Spawn throughput: Workers (this operator) side by side with Jobs (the Job controller).

    python bench/bench_scale.py [--rates 10,25,50,100] [--seconds 10] [--burst 1000]
        [--runtime-runs 25] [--held 1000] [--no-pooled] [--rounds 1] [--no-own] [--no-throttled]

On the local control plane, in one run: open-loop creation of Workers (each with its own
account, and with pooled identities), and of Jobs (parallelism 1, a Pod Security
"restricted" template) with kube-controller-manager at its default client limits and then
unthrottled, at each rate for `--seconds`; create -> the runtime's own Running report,
cold, cold with pooled identities and warm, beside the Job's pod Running; the
`--held-rate` phase again on a cluster holding `--held` Workers and as many Jobs; then a
burst of `--burst` Workers. For each it prints create -> pod seen p50/p90/p99 (from the moment the
create was due, so a slow client counts), whether the rate was kept up (every pod within
KEPT_UP seconds), API reads and writes per object by resource (the API server's own
`apiserver_request_total`), CPU ms per object of the operator, the API server and the
controller manager (/proc), admission webhook p99 (the API server's histogram) and the
operator's resident memory, and the operator's own writes per Worker by resource.
Bounded in count and time; loopback only; run it alone.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import itertools
import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import kubernetes  # noqa: E402
from tests.e2e.support import (  # noqa: E402
    CONFIG,
    Cluster,
    Operator,
    first_revision,
    install_crds,
    local_cluster,
    pod_runner,
    wait_until,
)

KEPT_UP = 5.0  # seconds: a rate is kept up when every pod appears within this
HOLD_RATE = 100.0  # creates per second of the objects a held cluster holds
PROBE_INTERVAL = 0.05  # seconds between the admission probe's reviews
# Seconds the probe runs alone, the operator otherwise idle, to price its reviews: the
# operator's CPU per Worker is shown less them too (the probe is an observer).
PROBE_CALIBRATION = 10.0
# hack/localcluster.py's state: the control plane this run uses (its own directory, if set).
STATE = Path(os.environ.get("AGENTWORKERS_CLUSTER_DIR", REPO / ".cluster")) / "state.json"
REQUESTS = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
ADMISSION = re.compile(
    r"^apiserver_admission_webhook_admission_duration_seconds_bucket\{(?P<labels>[^}]*)\} "
    r"(?P<value>\S+)$"
)
OWN = re.compile(r"^agentworkers_api_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
PASSES = re.compile(
    r'^agentworkers_reconciles_total\{(?P<labels>[^}]*handler="worker"[^}]*)\} (?P<value>\S+)$'
)
REVIEWS = re.compile(
    r"^agentworkers_admission_review_seconds_bucket\{(?P<labels>[^}]*)\} (?P<value>\S+)$"
)
# The API server's own time on a create (the whole request, and its etcd write) and on a
# webhook's review: sums and counts, so a phase's mean shows where its creates wait.
SERVER_TIMES = re.compile(
    r"^(?P<metric>apiserver_request_duration_seconds|etcd_request_duration_seconds|"
    r"apiserver_admission_webhook_admission_duration_seconds)_(?P<part>sum|count)"
    r"\{(?P<labels>[^}]*)\} (?P<value>\S+)$"
)
READS, WRITES = {"GET", "LIST"}, {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
HEARTBEATS = {"leases", "endpoints", "endpointslices", "events"}
TICK = os.sysconf("SC_CLK_TCK")


def worker(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name},
        "spec": {"agent": "planner", "initialMessage": "bench"},
    }


RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": "ghcr.io/agentworkers/agentworkers:0.1.0",
                            "command": ["agentworkers", "--help"],
                            "securityContext": RESTRICTED,
                        }
                    ],
                }
            },
        },
    }


# --- what the API server and the processes report -------------------------------------


def metrics(cluster: Cluster) -> list[str]:
    return cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines()


def _labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


def requests(lines: list[str]) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for line in lines:
        if match := REQUESTS.match(line):
            labels = _labels(match["labels"])
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            counts[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return counts


def server_times(lines: list[str]) -> Counter[tuple[str, str]]:
    """(what, "sum" or "count"): the API server's POSTs by resource (`POST pods`), their
    etcd creates (`etcd pods`) and its webhook reviews by check (`webhook worker`)."""
    found: Counter[tuple[str, str]] = Counter()
    for line in lines:
        if not (match := SERVER_TIMES.match(line)):
            continue
        labels = _labels(match["labels"])
        if match["metric"] == "apiserver_request_duration_seconds":
            if labels.get("verb") != "POST" or labels.get("subresource"):
                continue
            what = f"POST {labels.get('resource')}"
        elif match["metric"] == "etcd_request_duration_seconds":
            if labels.get("operation") != "create":
                continue
            what = f"etcd {labels.get('resource')}"
        else:
            what = f"webhook {labels.get('name', '').split('.', 1)[0]}"
        found[(what, match["part"])] += float(match["value"])
    return found


def mean_ms(times: Counter[tuple[str, str]], what: str) -> float:
    count = times[(what, "count")]
    return times[(what, "sum")] * 1000 / count if count else float("nan")


def own_reads(lines: list[str]) -> Counter[str]:
    """The operator's own GETs and LISTs by resource (its agentworkers_api_requests_total)."""
    counts: Counter[str] = Counter()
    for line in lines:
        if (match := OWN.match(line)) and (labels := _labels(match["labels"]))["verb"] in READS:
            counts[f"{labels['verb']} {labels['resource']}"] += int(float(match["value"]))
    return counts


def own_writes(lines: list[str]) -> Counter[str]:
    """The operator's own writes by verb and resource (its agentworkers_api_requests_total)."""
    counts: Counter[str] = Counter()
    for line in lines:
        if not (match := OWN.match(line)):
            continue
        labels = _labels(match["labels"])
        if labels["verb"] in WRITES and labels["resource"] not in HEARTBEATS:
            counts[f"{labels['verb']} {labels['resource']}"] += int(float(match["value"]))
    return counts


WARM = re.compile(
    r"^agentworkers_warm_(?P<what>claims|misses)_total(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$"
)


def warm_starts(lines: list[str]) -> Counter[str]:
    """Runs of a pooled agent by how they started: `claimed`, or cold with the miss's
    reason (agentworkers_warm_claims_total, agentworkers_warm_misses_total)."""
    counts: Counter[str] = Counter()
    for line in lines:
        if match := WARM.match(line):
            reason = _labels(match["labels"] or "").get("reason", "")
            key = "claimed" if match["what"] == "claims" else f"cold ({reason})"
            counts[key] += int(float(match["value"]))
    return counts


def pooled_config(size: int) -> dict[str, Any]:
    """The bench's agent with `size` pooled identities (docs/scaling.md, "Pooled
    identities")."""
    config = json.loads(json.dumps(CONFIG))
    config["spec"].setdefault("worker", {})["identityPool"] = size
    return config


def pool_filled(cluster: Cluster, namespace: str, size: int) -> float:
    """Waits (bounded) for an agent's identity pool to hold `size` accounts; the seconds."""
    began = time.monotonic()
    wait_until(
        f"{size} pooled identities",
        lambda: len(
            cluster.kubectl_json(
                "get", "serviceaccounts", "-n", namespace, "-l",
                "agentworkers.io/identity-pool=planner",
            )["items"]
        ) >= size,
        timeout=300,
        interval=1,
    )  # fmt: skip
    return time.monotonic() - began


def passes(lines: list[str]) -> float:
    """The operator's Worker reconcile passes so far (its agentworkers_reconciles_total)."""
    return sum(float(m["value"]) for line in lines if (m := PASSES.match(line)))


def admission_buckets(lines: list[str], webhook: str) -> dict[float, float]:
    buckets: dict[float, float] = {}
    for line in lines:
        if (match := ADMISSION.match(line)) and webhook in match["labels"]:
            le = _labels(match["labels"])["le"]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0) + float(match["value"])
    return buckets


def review_buckets(lines: list[str]) -> dict[float, float]:
    """The operator's own histogram of answering a Worker's admission review."""
    buckets: dict[float, float] = {}
    for line in lines:
        if (match := REVIEWS.match(line)) and 'check="worker"' in match["labels"]:
            le = _labels(match["labels"])["le"]
            buckets[float("inf") if le == "+Inf" else float(le)] = float(match["value"])
    return buckets


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The q-quantile of a histogram's growth, interpolated within its bucket (as PromQL)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0) for b in bounds]
    total = counts[-1] if counts else 0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and every process below it, live or reaped: its own, the
    children it waited for (cutime, cstime), and each live descendant's the same way."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    total, below = 0.0, [pid]
    while below:
        one = below.pop()
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / TICK  # utime stime cutime cstime
            below.extend(children.get(one, ()))
    return total


def control_plane() -> dict[str, int]:
    pids = json.loads(STATE.read_text())["pids"]
    return {
        "apiserver": pids["kube-apiserver"],
        "controller-manager": pids["kube-controller-manager"],
        "etcd": pids["etcd"],
        "scheduler": pids["kube-scheduler"],
        "kwok": pids["kwok"],
    }


def machine_ticks() -> tuple[int, int]:
    """The machine's CPU time so far, in clock ticks: (busy, all), over every core."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory now, or at its peak with `field="VmHWM"`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def raw(
    api: kubernetes.client.ApiClient,
    method: str,
    path: str,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    timeout: float = 60,
) -> Any:
    """One request, its response left unread and undecoded (the bench's own CPU stays low)."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = api.param_serialize(
        method, path, query_params=query, header_params=headers, body=body,
        auth_settings=["BearerToken"],
    )  # fmt: skip
    return api.call_api(*request, _request_timeout=timeout).response


# --- the pods, as a watch sees them ----------------------------------------------------


class PodWatch:
    """First time each (namespace, owner) has a pod, from one raw watch of all pods."""

    def __init__(self, api: kubernetes.client.ApiClient, prefix: str) -> None:
        self.api, self.prefix = api, prefix
        self.seen: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            query = [("watch", "true"), ("timeoutSeconds", "60")]
            if version:
                query.append(("resourceVersion", version))
            response = raw(self.api, "GET", "/api/v1/pods", query=query, timeout=90)
            for line in response:
                event = json.loads(line)
                pod = event["object"]
                meta = pod["metadata"]
                version = meta.get("resourceVersion", version)
                if event["type"] != "ADDED" or not meta["namespace"].startswith(self.prefix):
                    continue
                labels = meta.get("labels") or {}
                owner = labels.get("agentworkers.io/worker") or labels.get("job-name")
                if owner:
                    self.seen.setdefault((meta["namespace"], owner), time.monotonic())


# --- admission, asked directly --------------------------------------------------------


class AdmissionProbe:
    """Reviews of a Worker's create sent straight to the operator's webhook (its URL and CA
    from its ValidatingWebhookConfiguration), one every PROBE_INTERVAL on a kept-alive
    connection, as the API server sends them: the time our process takes to answer,
    the connection, TLS and its threads' wait for Python's lock included, without the API
    server's own queue (its histogram has both, in buckets too coarse to tell them apart)."""

    def __init__(self, cluster: Cluster, webhook: str, namespace: str) -> None:
        config = cluster.kubectl_json("get", "validatingwebhookconfiguration", webhook)
        hook = next(h for h in config["webhooks"] if "workers" in h["rules"][0]["resources"])
        url = urllib.parse.urlsplit(hook["clientConfig"]["url"])
        context = ssl.create_default_context(
            cadata=base64.b64decode(hook["clientConfig"]["caBundle"]).decode()
        )
        self._connect = lambda: http.client.HTTPSConnection(
            url.hostname or "127.0.0.1", url.port, context=context, timeout=10
        )
        self._path = url.path
        self._namespace = namespace
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> AdmissionProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _review(self, i: int) -> bytes:
        request = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "agentworkers.io", "version": "v1alpha1", "kind": "Worker"},
            "resource": {"group": "agentworkers.io", "version": "v1alpha1", "resource": "workers"},
            "operation": "CREATE",
            "namespace": self._namespace,
            "name": f"probe-{i}",
            "object": {
                **worker(f"probe-{i}"),
                "metadata": {"name": f"probe-{i}", "namespace": self._namespace},
            },
            "userInfo": {"username": "bench-probe"},
            "dryRun": True,
        }
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
        return json.dumps({**review, "request": request}).encode()

    def _run(self) -> None:
        connection = self._connect()
        for i in itertools.count():
            if self._stop.wait(PROBE_INTERVAL):
                break
            body = self._review(i)
            began = time.monotonic()
            try:
                connection.request("POST", self._path, body, {"Content-Type": "application/json"})
                answer = json.loads(connection.getresponse().read())
                if not answer["response"]["allowed"]:
                    raise ValueError(answer["response"].get("status"))
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                self.errors += 1
                self.first_error = self.first_error or f"{type(e).__name__}: {e}"
                connection.close()
                connection = self._connect()
                continue
            self.latencies.append(time.monotonic() - began)
        connection.close()


# --- one phase: open-loop creation at a rate -------------------------------------------


@dataclass
class Phase:
    label: str
    count: int
    latencies: list[float]
    calls: list[float]
    # From the create's answer to the pod: the controller's own part.
    controller: list[float]
    requests: Counter[tuple[str, str]]
    # The API server's own time (`server_times`) over the phase.
    server: Counter[tuple[str, str]]
    cpu: dict[str, float]
    admission_p99: float
    missing: int
    # The same review as the operator timed it (its own histogram): the rest is the API
    # server's (its webhook client, the network, its own queue when saturated).
    review_p99: float = float("nan")
    settled_rss: float = float("nan")
    rss: float = float("nan")
    peak_rss: float = float("nan")
    own_reads: Counter[str] = field(default_factory=Counter)
    own_writes: Counter[str] = field(default_factory=Counter)
    passes: float = float("nan")
    # Admission reviews sent straight to the webhook meanwhile (AdmissionProbe).
    probe: list[float] = field(default_factory=list)
    probe_errors: int = 0
    probe_error: str = ""
    notes: list[str] = field(default_factory=list)
    # Of the machine's CPU while the creates went out (every process: the bench's too).
    busy: float = float("nan")

    @property
    def kept_up(self) -> bool:
        return not self.missing and max(self.latencies, default=0) <= KEPT_UP


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Bench:
    cluster: Cluster
    watch: PodWatch
    pids: dict[str, int]
    prefix: str
    webhook: str
    answering: Operator  # the process that answers admission reviews
    controller: Operator  # the one that reconciles (the same process unless --split)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(48))
    failures: list[str] = field(default_factory=list)
    # The answering process's CPU seconds per probe review (`price_probe`).
    probe_cpu: float = 0.0

    def namespace(self, label: str) -> str:
        name = f"{self.prefix}-{label}"
        self.cluster.kubectl("create", "namespace", name)
        wait_until(
            "the default service account",
            lambda: (
                self.cluster.kubectl(
                    "get", "serviceaccount", "default", "-n", name, check=False
                ).returncode
                == 0
            ),
        )
        return name

    @property
    def answering_process(self) -> str:
        """The name, in `pids`, of the process that answers admission reviews."""
        return "admission" if "admission" in self.pids else "operator"

    def price_probe(self) -> None:
        """The probe alone for PROBE_CALIBRATION seconds: its reviews' CPU in the process
        that answers them."""
        label = "probe"
        namespace = self.namespace(label)
        self.cluster.apply(namespace, CONFIG)
        first_revision(self.cluster, namespace)
        process = self.answering_process
        before = cpu_seconds(self.pids[process])
        with AdmissionProbe(self.cluster, self.webhook, namespace) as probe:
            time.sleep(PROBE_CALIBRATION)
        reviews = len(probe.latencies) + probe.errors
        self.probe_cpu = (cpu_seconds(self.pids[process]) - before) / max(1, reviews)
        print(f"== the admission probe alone: {self.probe_cpu * 1000:.2f} ms CPU per review")
        self.drop(label)

    def run(
        self, label: str, make: Callable[[str], dict[str, Any]], path: str, count: int, rate: float
    ) -> Phase:
        namespace = self.namespace(label)
        workers = self._agent(label, namespace, count)
        url = path.format(namespace=namespace)
        due: dict[str, float] = {}
        answered: dict[str, float] = {}
        calls: list[float] = []
        before_m, before_cpu = metrics(self.cluster), self._cpu()
        before_r = self.answering.metrics().splitlines()
        before_lines = self.controller.metrics().splitlines()
        before_own, before_passes = own_reads(before_lines), passes(before_lines)
        before_writes = own_writes(before_lines)
        probe = AdmissionProbe(self.cluster, self.webhook, namespace) if workers else None
        stack = contextlib.ExitStack()
        if probe is not None:
            stack.enter_context(probe)
        start, ticks = time.monotonic(), machine_ticks()

        def create(name: str) -> None:
            began = time.monotonic()
            response = raw(self.cluster.api, "POST", url, body=make(name))
            answer = response.data  # read whole, so the connection goes back clean
            if response.status >= 300:
                self.failures.append(f"{name}: {response.status} {answer[:200]!r}")
            answered[name] = time.monotonic()
            calls.append(answered[name] - began)

        pending = []
        for i in range(count):
            name = f"o{i:05d}"
            at = start + (i / rate if rate else 0)
            if (wait := at - time.monotonic()) > 0:
                time.sleep(wait)
            due[name] = at
            pending.append(self.pool.submit(create, name))
        for future in pending:
            future.result()  # every create answered before the phase is judged
        busy, total = (now - then for now, then in zip(machine_ticks(), ticks, strict=True))
        deadline = time.monotonic() + KEPT_UP * 4 + count / 50

        def done() -> bool:
            return all((namespace, n) in self.watch.seen for n in due)

        while time.monotonic() < deadline and not done():
            time.sleep(0.2)
        stack.close()
        time.sleep(2)  # the status writes that follow a pod
        after_m, after_cpu = metrics(self.cluster), self._cpu()
        latencies = [
            self.watch.seen[(namespace, n)] - at
            for n, at in due.items()
            if (namespace, n) in self.watch.seen
        ]
        grown = requests(after_m) - requests(before_m)
        phase = Phase(
            label=label,
            count=count,
            latencies=latencies,
            calls=calls,
            controller=[
                self.watch.seen[(namespace, n)] - at
                for n, at in answered.items()
                if (namespace, n) in self.watch.seen
            ],
            requests=grown,
            server=server_times(after_m) - server_times(before_m),
            cpu={k: after_cpu[k] - before_cpu[k] for k in after_cpu},
            admission_p99=bucket_quantile(
                admission_buckets(before_m, self.webhook),
                admission_buckets(after_m, self.webhook),
                0.99,
            ),
            missing=count - len(latencies),
            own_reads=own_reads(after_lines := self.controller.metrics().splitlines()) - before_own,
            own_writes=own_writes(after_lines) - before_writes,
            passes=passes(after_lines) - before_passes,
            probe=probe.latencies if probe else [],
            probe_errors=probe.errors if probe else 0,
            probe_error=probe.first_error if probe else "",
            busy=busy / max(total, 1),
            rss=rss_mib(self.pids["operator"]),
            peak_rss=rss_mib(self.pids["operator"], "VmHWM"),
            review_p99=bucket_quantile(
                review_buckets(before_r),
                review_buckets(self.answering.metrics().splitlines()),
                0.99,
            ),
        )
        if self.failures:
            phase.notes.append(f"{len(self.failures)} creates refused, e.g. {self.failures[0]}")
            self.failures.clear()
        self.report(phase)
        return phase

    def _agent(self, label: str, namespace: str, count: int) -> bool:
        """The agent of a Worker phase (`pooled-*`: with `count` pooled identities, all made
        first); False: not a Worker phase."""
        if not label.startswith(("worker", "pooled")):
            return False
        pooled = label.startswith("pooled")
        self.cluster.apply(namespace, pooled_config(count) if pooled else CONFIG)
        first_revision(self.cluster, namespace)
        if pooled:
            pool_filled(self.cluster, namespace, count)
        return True

    def _cpu(self) -> dict[str, float]:
        # The controller manager is restarted between phases: its pid is read afresh.
        pids = {**self.pids, **control_plane()}
        return {name: cpu_seconds(pid) for name, pid in pids.items()}

    def drop(self, label: str) -> None:
        # Waited for (bounded), so its garbage collection does not load the next phase.
        name = f"{self.prefix}-{label}"
        self.cluster.kubectl("delete", "namespace", name, "--wait=false")
        with contextlib.suppress(AssertionError):
            wait_until(
                f"namespace {name} to go",
                lambda: self.cluster.kubectl("get", "namespace", name, check=False).returncode,
                timeout=300,
                interval=1,
            )

    def report(self, p: Phase) -> None:
        n = p.count
        lat = p.latencies
        print(
            f"\n== {p.label}: {n} objects; create->pod p50 {pct(lat, 0.5) * 1000:.0f} ms, "
            f"p90 {pct(lat, 0.9) * 1000:.0f} ms, p99 {pct(lat, 0.99) * 1000:.0f} ms, "
            f"max {max(lat, default=float('nan')) * 1000:.0f} ms; "
            f"{'kept up' if p.kept_up else f'NOT kept up ({p.missing} without a pod)'}"
        )
        print(
            f"   create answered->pod p50 {pct(p.controller, 0.5) * 1000:.0f} ms, "
            f"p99 {pct(p.controller, 0.99) * 1000:.0f} ms; "
            f"create call p50 {pct(p.calls, 0.5) * 1000:.0f} ms, "
            f"p99 {pct(p.calls, 0.99) * 1000:.0f} ms; "
            f"admission webhook p99 {p.admission_p99 * 1000:.0f} ms "
            f"(answering it, in the operator: p99 {p.review_p99 * 1000:.1f} ms); "
            f"operator RSS {p.rss:.0f} MiB (peak {p.peak_rss:.0f})"
        )
        for note in p.notes:
            print(f"   {note}")
        kind = "workers" if p.label.startswith(("worker", "pooled")) else "jobs"
        hook = mean_ms(p.server, "webhook worker")
        print(
            f"   the API server's own mean per create: {kind} "
            f"{mean_ms(p.server, f'POST {kind}'):.1f} ms (its etcd write "
            f"{mean_ms(p.server, f'etcd {kind}'):.1f}"
            + (f", our webhook {hook:.1f}" if kind == "workers" else "")
            + f"), pods {mean_ms(p.server, 'POST pods'):.1f} ms (its etcd write "
            f"{mean_ms(p.server, 'etcd pods'):.1f})"
        )
        probed = (len(p.probe) + p.probe_errors) * self.probe_cpu
        print(
            "   CPU ms per object: "
            + ", ".join(
                f"{k} {v * 1000 / n:.1f}"
                + (
                    f" ({(v - probed) * 1000 / n:.1f} less the probe's)"
                    if probed and k == self.answering_process
                    else ""
                )
                for k, v in sorted(p.cpu.items())
            )
        )
        print(
            f"   the machine while the creates went out: {p.busy:.0%} busy "
            f"(of {os.cpu_count()} cores, every process, the bench's too)"
        )
        reads = {k: v for k, v in p.requests.items() if k[0] in READS}
        writes = {k: v for k, v in p.requests.items() if k[0] in WRITES and k[1] not in HEARTBEATS}
        for title, counts in (("reads", reads), ("writes", writes)):
            total = sum(counts.values()) / n
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
            detail = ", ".join(f"{verb} {res} {v / n:.2f}" for (verb, res), v in top)
            print(f"   API {title} per object {total:.2f}: {detail}")
        own = ", ".join(f"{k} {v / n:.2f}" for k, v in p.own_reads.most_common(4))
        print(
            f"   of the reads, the operator's own per object: {p.own_reads.total() / n:.2f} {own}"
        )
        if p.label.startswith(("worker", "pooled")):
            mine = ", ".join(f"{k} {v / n:.2f}" for k, v in p.own_writes.most_common(8))
            print(f"   the operator's own writes per Worker {p.own_writes.total() / n:.2f}: {mine}")
            print(f"   reconcile passes per Worker: {p.passes / n:.2f}")
            print(
                f"   admission asked directly (past the API server): p50 "
                f"{pct(p.probe, 0.5) * 1000:.1f} ms, p99 {pct(p.probe, 0.99) * 1000:.1f} ms, "
                f"max {max(p.probe, default=float('nan')) * 1000:.1f} ms "
                f"({len(p.probe)} reviews, {p.probe_errors} failed"
                + (f", e.g. {p.probe_error[:200]})" if p.probe_error else ")")
            )


# --- to the runtime's own Running report: cold, warm, and the Job's pod Running ----------


class FirstSeen:
    """First time each object of a kind in a namespace meets `test`, from one raw watch."""

    def __init__(
        self, api: kubernetes.client.ApiClient, path: str, test: Callable[[dict[str, Any]], bool]
    ) -> None:
        self.api, self.path, self.test = api, path, test
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FirstSeen:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            query = [("watch", "true"), ("timeoutSeconds", "30")]
            if version:
                query.append(("resourceVersion", version))
            for line in raw(self.api, "GET", self.path, query=query, timeout=60):
                event = json.loads(line)
                body = event["object"]
                version = body["metadata"].get("resourceVersion", version)
                if event["type"] in ("ADDED", "MODIFIED") and self.test(body):
                    self.seen.setdefault(body["metadata"]["name"], time.monotonic())
                if self._stop.is_set():
                    return


def runtime_running(body: dict[str, Any]) -> bool:
    """A Worker whose runtime reported itself (it alone writes eventIndex) past Pending."""
    status = body.get("status") or {}
    return bool(status.get("eventIndex")) and status.get("phase") in ("Running", "Idle", "Done")


def pod_running(body: dict[str, Any]) -> bool:
    return (body.get("status") or {}).get("phase") == "Running"


@dataclass
class RuntimePhase:
    label: str
    latencies: list[float]
    count: int
    note: str = ""
    # The operator's own writes while they went to Running, by verb and resource.
    writes: Counter[str] = field(default_factory=Counter)
    # CPU seconds by process while they went to Running (the pod runner is the kubelet;
    # "runtimes": every worker runtime it ran, live or ended).
    cpu: dict[str, float] = field(default_factory=dict)
    # The API server's requests meanwhile, from every client, by verb and resource.
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)


def to_running(bench: Bench, args: argparse.Namespace) -> list[RuntimePhase]:
    """Create -> the runtime's own Running report, `--runtime-runs` Workers at
    `--runtime-rate` each: cold (no pool), warm (a pool of as many, all ready first), and
    Jobs' create -> pod Running beside them (unthrottled Job controller). The worker pods
    run as local processes (hack/podrunner.py, process mode), the Jobs' pods only in kwok:
    the Job's figure has no process start in it, the cold Worker's has a Python start."""
    runs, rate = args.runtime_runs, args.runtime_rate
    results = []
    logs = Path(tempfile.mkdtemp(prefix="bench-pods-"))
    with pod_runner(bench.cluster, f"{bench.prefix}-rt", logs) as runner:

        def cpu() -> dict[str, float]:
            mine = cpu_seconds(runner.pid)
            return {**bench._cpu(), "pod runner": mine, "runtimes": tree_cpu(runner.pid) - mine}

        for label in ("rt-cold", "rt-pooled", "rt-warm") if args.pooled else ("rt-cold", "rt-warm"):
            namespace = bench.namespace(label)
            config = pooled_config(runs) if label == "rt-pooled" else json.loads(json.dumps(CONFIG))
            if label == "rt-warm":
                config["spec"]["worker"]["warmPool"] = {"size": runs, "idleSeconds": 3600}
            bench.cluster.apply(namespace, config)
            first_revision(bench.cluster, namespace)
            note = ""
            if label == "rt-pooled":
                filled = pool_filled(bench.cluster, namespace, runs)
                note = f"pool of {runs} identities filled {filled:.0f} s after its config"
            if label == "rt-warm":
                note = _warm_pool_ready(bench, namespace, runs)
            results.append(_runs_to_running(bench, label, namespace, runs, rate, cpu, note))
            bench.drop(label)
    results.append(_jobs_to_running(bench, runs, rate))
    for r in results:
        lat = r.latencies
        print(
            f"\n== {r.label}: {r.count} objects at {rate:g}/s; create->Running p50 "
            f"{pct(lat, 0.5) * 1000:.0f} ms, p90 {pct(lat, 0.9) * 1000:.0f} ms, p99 "
            f"{pct(lat, 0.99) * 1000:.0f} ms ({r.count - len(lat)} never Running)"
            + (f"; {r.note}" if r.note else "")
        )
        if r.cpu:
            print(
                "   CPU ms per run, from the first create to the last Running: "
                + ", ".join(f"{k} {v * 1000 / r.count:.0f}" for k, v in sorted(r.cpu.items()))
            )
        if r.requests:
            served = [(k, v) for k, v in r.requests.items() if k[1] not in HEARTBEATS]
            top = sorted(served, key=lambda kv: -kv[1])[:10]
            total = sum(v for _, v in served) / r.count
            print(
                f"   API requests per run, every client: {total:.1f}: "
                + ", ".join(f"{verb} {res} {v / r.count:.2f}" for (verb, res), v in top)
            )
        if r.writes:
            mine = ", ".join(f"{k} {v / r.count:.2f}" for k, v in r.writes.most_common(8))
            print(
                f"   the operator's own writes per Worker {r.writes.total() / r.count:.2f}: {mine}"
            )
    return results


def _warm_pool_ready(bench: Bench, namespace: str, runs: int) -> str:
    """Wait for a pool of `runs` ready warm pods, their runtimes started and waiting; how
    long that took."""
    began = time.monotonic()
    wait_until(
        f"{runs} warm pods ready",
        lambda: (
            (bench.cluster.kubectl_json("get", "agentconfig", "planner", "-n", namespace)
             .get("status") or {}).get("warmPool", {}).get("ready") == runs
        ),
        timeout=300,
        interval=1,
    )  # fmt: skip
    ready_at = time.monotonic() - began
    idle_at = _warm_idle(namespace, runs) - began
    return (
        f"pool of {runs} Running {ready_at:.0f} s after its config, its runtimes "
        f"idle (started, waiting) {idle_at:.0f} s after"
    )


def _runs_to_running(
    bench: Bench,
    label: str,
    namespace: str,
    runs: int,
    rate: float,
    cpu: Callable[[], dict[str, float]],
    note: str,
) -> RuntimePhase:
    """`runs` Workers at `rate`, each timed to its runtime's Running report; the CPU, the
    API requests and the operator's writes it took."""
    path = WORKERS.format(namespace=namespace)
    lines = bench.controller.metrics().splitlines()
    before, started_before = own_writes(lines), warm_starts(lines)
    cpu_before, ticks_before, server_before = cpu(), machine_ticks(), metrics(bench.cluster)
    with FirstSeen(bench.cluster.api, path, runtime_running) as seen:
        due = _open_loop(bench, path, worker, runs, rate)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(seen.seen) < runs:
            time.sleep(0.2)
    used = {k: v - cpu_before.get(k, 0.0) for k, v in cpu().items()}
    busy, ticks = (a - b for a, b in zip(machine_ticks(), ticks_before, strict=True))
    served = requests(metrics(bench.cluster)) - requests(server_before)
    note += f"{'; ' if note else ''}machine {busy / max(ticks, 1):.0%} busy"
    lines = bench.controller.metrics().splitlines()
    if label == "rt-warm":
        started = warm_starts(lines) - started_before
        note += "; " + ", ".join(f"{k} {v}" for k, v in sorted(started.items()))
    latencies = [seen.seen[n] - at for n, at in due.items() if n in seen.seen]
    return RuntimePhase(label, latencies, runs, note, own_writes(lines) - before, used, served)


def _jobs_to_running(bench: Bench, runs: int, rate: float) -> RuntimePhase:
    """Jobs' create -> pod Running, the Job controller unthrottled."""
    with controller_manager(5000):
        namespace = bench.namespace("job-rt")
        pods_path = f"/api/v1/namespaces/{namespace}/pods"
        with FirstSeen(bench.cluster.api, pods_path, pod_running) as seen:
            due = _open_loop(bench, JOBS.format(namespace=namespace), job, runs, rate)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(seen.seen) < runs:
                time.sleep(0.2)
        by_job = {pod.rsplit("-", 1)[0]: at for pod, at in seen.seen.items()}
        latencies = [by_job[n] - at for n, at in due.items() if n in by_job]
        bench.drop("job-rt")
    return RuntimePhase("job-rt", latencies, runs)


def _warm_idle(namespace: str, count: int, timeout: float = 180) -> float:
    """When the warm runtimes of `namespace` (local processes) are done starting: their CPU
    time grows by less than 1% of a core each over a second (waiting, each polls its
    claim file every 10 ms). A warm pod counts as ready once
    it runs; on a loaded machine its runtime's start takes seconds more, and a claim
    before then waits for it (docs/scaling.md): the warm figure is of started runtimes."""

    def warm_cpu() -> tuple[int, float]:
        found, total = 0, 0.0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"--warm" in argv and f"--namespace={namespace}".encode() in argv:
                    total += cpu_seconds(int(entry.name))
                    found += 1
            except OSError:
                continue
        return found, total

    deadline = time.monotonic() + timeout
    _, before = warm_cpu()
    while time.monotonic() < deadline:
        time.sleep(1)
        found, now = warm_cpu()
        if found >= count and now - before < 0.01 * found:
            break
        before = now
    return time.monotonic()


def _open_loop(
    bench: Bench, path: str, make: Callable[[str], dict[str, Any]], count: int, rate: float
) -> dict[str, float]:
    """`count` creates at `rate`, each timed from when it was due; returns name -> due."""
    due: dict[str, float] = {}
    start = time.monotonic()
    pending = []
    for i in range(count):
        name = f"r{i:04d}"
        at = start + i / rate
        if (wait := at - time.monotonic()) > 0:
            time.sleep(wait)
        due[name] = at
        pending.append(bench.pool.submit(lambda n=name: raw(bench.cluster.api, "POST", path,
                                                             body=make(n)).data))  # fmt: skip
    for future in pending:
        future.result()
    return due


@contextlib.contextmanager
def controller_manager(qps: int) -> Iterator[None]:
    subprocess.run(
        [sys.executable, str(REPO / "hack" / "localcluster.py"), "controller-manager",
         f"--qps={qps}"],
        check=True,
    )  # fmt: skip
    time.sleep(5)  # its informers sync
    yield


WORKERS = "/apis/agentworkers.io/v1alpha1/namespaces/{namespace}/workers"
JOBS = "/apis/batch/v1/namespaces/{namespace}/jobs"


def side_by_side(bench: Bench, rates: list[float], args: argparse.Namespace) -> list[Phase]:
    """The Job controller throttled at the lowest rate, then Worker and Job unthrottled side
    by side at each rate, `--rounds` times, the first of each pair alternating: a shared
    machine's drift falls on both alike. A later round's labels end in `-r<round>`."""
    results = []

    def phase(label: str, make: Callable[[str], dict[str, Any]], path: str, rate: float) -> None:
        count = min(int(rate * args.seconds), args.max_objects)
        results.append(bench.run(label, make, path, count, rate))
        bench.drop(label)

    if not args.no_jobs and args.throttled:
        with controller_manager(0):  # throttled, it keeps up with less than the lowest rate
            phase(f"job-throttled-{int(rates[0])}", job, JOBS, rates[0])
    kinds = [k for k, on in (("worker", args.own), ("pooled", args.pooled), ("job", True)) if on]
    with controller_manager(5000):
        for k, (i, rate) in itertools.product(range(args.rounds), enumerate(rates)):
            suffix = f"-r{k}" if k else ""
            for kind in kinds[:: 1 if (i + k) % 2 == 0 else -1]:
                if kind in ("worker", "pooled") and not args.no_workers:
                    phase(f"{kind}-{int(rate)}{suffix}", worker, WORKERS, rate)
                elif kind == "job" and not args.no_jobs:
                    phase(f"job-unthrottled-{int(rate)}{suffix}", job, JOBS, rate)
    return results


def ratios(results: list[Phase], rates: list[float], rounds: int) -> None:
    """Each round's Worker p99 over the Job's, at each rate, and their median: the figure
    that carries over from a shared machine."""
    by_label = {p.label: p for p in results}
    print("\n== create->pod p99, Worker / Job unthrottled, each round (side by side)")
    for rate, kind in itertools.product(rates, ("worker", "pooled")):
        found = []
        for k in range(rounds):
            suffix = f"-{int(rate)}" + (f"-r{k}" if k else "")
            mine, job_ = by_label.get(kind + suffix), by_label.get("job-unthrottled" + suffix)
            if mine and job_:
                found.append(pct(mine.latencies, 0.99) / max(pct(job_.latencies, 0.99), 1e-9))
        if found:
            each = ", ".join(f"{r:.2f}" for r in found)
            print(f"  {rate:g}/s, {kind}: {each}; median {statistics.median(found):.2f}")


def _quiet(bench: Bench, timeout: float = 180) -> float:
    """Waits until the operator and the API server use less than a tenth of a core each
    over 2 s (what a held cluster's objects set going is done); the seconds waited."""
    began = time.monotonic()
    pids = {"operator": bench.pids["operator"], "apiserver": control_plane()["apiserver"]}
    while time.monotonic() - began < timeout:
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        time.sleep(2)
        if all(cpu_seconds(p) - before[k] < 0.2 for k, p in pids.items()):
            break
    return time.monotonic() - began


def alternating(bench: Bench, args: argparse.Namespace) -> None:
    """Workers with their own account and with pooled identities, `--ab-rounds` phases of
    each at `--held-rate` for `--ab-seconds`, one after the other, the first of each pair
    alternating: on a shared, loaded machine the drift falls on both, and the ratio of
    each pair is what carries over."""
    rate, rows = args.held_rate, []
    count = min(int(rate * args.ab_seconds), args.max_objects)
    with controller_manager(5000):
        for k in range(args.ab_rounds):
            pair = {}
            for kind in ("worker", "pooled")[:: 1 if k % 2 == 0 else -1]:
                label = f"{kind}-{int(rate)}-ab{k}"
                pair[kind] = bench.run(label, worker, WORKERS, count, rate)
                bench.drop(label)
            rows.append(pair)
    print(f"\n== own account vs pooled identity, {count} Workers at {rate:g}/s a phase: "
          "create->pod p50 / p99 ms, the operator's writes per Worker")  # fmt: skip
    ratios = []
    for k, pair in enumerate(rows):
        own, pooled = pair["worker"], pair["pooled"]
        ratio = pct(pooled.latencies, 0.99) / max(pct(own.latencies, 0.99), 1e-9)
        ratios.append(ratio)
        print(
            f"  round {k}: own {pct(own.latencies, 0.5) * 1000:.0f} / "
            f"{pct(own.latencies, 0.99) * 1000:.0f} ({own.own_writes.total() / own.count:.2f}), "
            f"pooled {pct(pooled.latencies, 0.5) * 1000:.0f} / "
            f"{pct(pooled.latencies, 0.99) * 1000:.0f} "
            f"({pooled.own_writes.total() / pooled.count:.2f}); p99 pooled/own {ratio:.2f}"
        )
    print(f"  median p99 pooled/own: {pct(ratios, 0.5):.2f}")


def on_a_held_cluster(bench: Bench, args: argparse.Namespace) -> list[Phase]:
    """The `--held-rate` phase again, Worker (per-run account, and pooled with --pooled)
    beside Job, on a cluster that already holds `--held` Workers and as many Jobs (their
    pods left by kwok as they are, never ended)."""
    held, rate = args.held, args.held_rate
    count = min(int(rate * args.seconds), args.max_objects)
    results = []
    with controller_manager(5000):
        began = time.monotonic()
        for label, make, path in (("held-w", worker, WORKERS), ("held-j", job, JOBS)):
            namespace = bench.namespace(label)
            if make is worker:
                bench.cluster.apply(namespace, CONFIG)
                first_revision(bench.cluster, namespace)
            _open_loop(bench, path.format(namespace=namespace), make, held, HOLD_RATE)
            wait_until(
                f"{held} pods in {namespace}",
                lambda ns=namespace: sum(k[0] == ns for k in list(bench.watch.seen)) >= held,
                timeout=600,
                interval=1,
            )
        placed = time.monotonic() - began
        settled = _quiet(bench)
        print(f"\n== held: {held} Workers and {held} Jobs in place after {placed:.0f} s, "
              f"the operator and the API server quiet {settled:.0f} s later")  # fmt: skip
        kinds = ("worker", "pooled", "job") if args.pooled else ("worker", "job")
        for kind in kinds:
            label = f"{'job-unthrottled' if kind == 'job' else kind}-{int(rate)}-held"
            make, path = (job, JOBS) if kind == "job" else (worker, WORKERS)
            results.append(bench.run(label, make, path, count, rate))
            bench.drop(label)
        bench.drop("held-w")
        bench.drop("held-j")
    return results


KINDS = ("worker", "pooled", "job-unthrottled", "job-throttled")


def summarize(results: list[Phase], rates: list[float]) -> None:
    print(
        "\n== summary (rate: Worker (its own account), Worker (pooled identity), Job "
        "unthrottled, Job throttled: create->pod p99 ms; the operator's writes per Worker)"
    )
    by_label = {p.label: p for p in results}
    held = sorted({p.label.rsplit("-", 2)[1] for p in results if p.label.endswith("-held")})
    for rate in [f"{int(r)}" for r in rates] + [f"{r}-held" for r in held]:
        row = []
        for kind in KINDS:
            p = by_label.get(f"{kind}-{rate}")
            if p:
                mark = "" if p.kept_up else "!"
                writes = (
                    f" ({p.own_writes.total() / p.count:.2f} writes)" if kind in KINDS[:2] else ""
                )
                row.append(f"{kind} {pct(p.latencies, 0.99) * 1000:.0f}{mark}{writes}")
        print(f"  {rate:>8}/s: " + ", ".join(row))
    for kind in KINDS:
        kept = [r for r in rates if (p := by_label.get(f"{kind}-{int(r)}")) and p.kept_up]
        if any(by_label.get(f"{kind}-{int(r)}") for r in rates):
            print(f"  highest rate kept up, {kind}: {max(kept, default=0):.0f}/s")
    if burst := by_label.get("worker-burst"):
        print(
            f"  burst of {burst.count} Workers: last pod after "
            f"{max(burst.latencies, default=float('nan')):.1f} s, admission p99 "
            f"{burst.admission_p99 * 1000:.0f} ms (in the operator {burst.review_p99 * 1000:.1f} "
            f"ms, asked directly {pct(burst.probe, 0.99) * 1000:.1f} ms), operator RSS "
            f"{burst.rss:.0f} MiB "
            f"at its end, {burst.settled_rss:.0f} MiB with its Workers in place and quiet"
        )
    print(f"  ('!' = not kept up: a pod later than {KEPT_UP:.0f} s, or none)")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,25,50,100")
    parser.add_argument("--seconds", type=float, default=10, help="per rate")
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument(
        "--settle", type=float, default=40, help="seconds after the burst before its RSS"
    )
    parser.add_argument("--no-jobs", action="store_true", help="Workers only")
    parser.add_argument(
        "--rounds", type=int, default=1, help="side-by-side rounds at each rate (alternating)"
    )
    parser.add_argument(
        "--own",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Workers with their own account (the pooled ones, if --pooled, run anyway)",
    )
    parser.add_argument(
        "--throttled",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the Job controller at its default client limits first (at the lowest rate)",
    )
    parser.add_argument("--no-workers", action="store_true", help="Jobs only")
    parser.add_argument("--max-objects", type=int, default=1000, help="per phase")
    parser.add_argument(
        "--runtime-runs",
        type=int,
        default=25,
        help="Workers cold, warm (a pool of as many) and Jobs timed to Running; 0: none",
    )
    parser.add_argument("--runtime-rate", type=float, default=25, help="their creates per s")
    parser.add_argument(
        "--pooled",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Workers with pooled identities too (spec.worker.identityPool), beside the rest",
    )
    parser.add_argument(
        "--held",
        type=int,
        default=1000,
        help="Workers and as many Jobs put in place before the --held-rate phase is run "
        "again; 0: not run",
    )
    parser.add_argument("--held-rate", type=float, default=25, help="that phase's rate")
    parser.add_argument(
        "--ab-rounds",
        type=int,
        default=0,
        help="pairs of phases, own account then pooled (alternating), at --held-rate",
    )
    parser.add_argument("--ab-seconds", type=float, default=5, help="each of their length")
    parser.add_argument(
        "--split",
        action="store_true",
        help="admission in a process of its own (--role=admission), beside the controller",
    )
    return parser.parse_args()


def main() -> int:
    args = arguments()
    rates = [float(r) for r in args.rates.split(",") if r]

    # Stopped early, it still stops its operators and takes their webhooks along: a
    # webhook left behind would refuse every write of agentworkers objects (fail closed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    cluster = local_cluster()
    install_crds(cluster)
    # A quiet start: no earlier run's namespaces still being emptied.
    wait_until(
        "earlier bench namespaces to go",
        lambda: "bench" not in cluster.kubectl("get", "namespaces", "-o", "name").stdout,
        timeout=600,
        interval=2,
    )
    prefix = f"bench{uuid.uuid4().hex[:4]}"
    webhook = f"agentworkers-{prefix}.io"
    results: list[Phase] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.ExitStack() as stack,
        PodWatch(cluster.api, prefix) as watch,
    ):
        scope = f"--namespace={prefix}-*"
        if args.split:
            for part in ("c", "a"):
                (Path(tmp) / part).mkdir()
            controller = stack.enter_context(
                Operator.start(cluster, Path(tmp) / "c", scope, "--role=controller", "--no-webhook")
            )
            admission = stack.enter_context(
                Operator.start(
                    cluster, Path(tmp) / "a", scope, "--role=admission", f"--webhook-name={webhook}"
                )
            )
            pids = {"operator": controller.process.pid, "admission": admission.process.pid}
            answering = admission
        else:
            operator = stack.enter_context(
                Operator.start(cluster, Path(tmp), scope, f"--webhook-name={webhook}")
            )
            pids = {"operator": operator.process.pid}
            answering = controller = operator
        bench = Bench(cluster, watch, pids, prefix, webhook, answering, controller)
        if not args.no_workers:
            bench.price_probe()
        results += side_by_side(bench, rates, args)
        running = to_running(bench, args) if args.runtime_runs and not args.no_workers else []
        if args.ab_rounds and not args.no_workers:
            alternating(bench, args)
        if args.held and not args.no_workers and not args.no_jobs:
            results += on_a_held_cluster(bench, args)
        if args.burst and not args.no_workers:
            burst = bench.run("worker-burst", worker, WORKERS, args.burst, 0)
            # What the operator holds with the burst's Workers in place, once it is quiet.
            time.sleep(args.settle)
            burst.settled_rss = rss_mib(pids["operator"])
            results.append(burst)
            bench.drop("worker-burst")
        subprocess.run(
            [sys.executable, str(REPO / "hack" / "localcluster.py"), "controller-manager"],
            check=True,
        )

    summarize(results, rates)
    ratios(results, rates, args.rounds)
    if running:
        print("\n== create -> Running p99 ms (the runtime's own report; the Job's pod's phase)")
        print("  " + ", ".join(f"{r.label} {pct(r.latencies, 0.99) * 1000:.0f}" for r in running))
    return 0


if __name__ == "__main__":
    sys.exit(main())
