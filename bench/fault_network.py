"""Scenario "network faults": the operator and the worker runtimes reach the API server
only through a faulty network (hack/faultproxy.py, TLS passed through untouched).

    python bench/faults.py --only network [--net-spawns 300] [--net-faults 10]
                           [--net-seconds 90] [--net-runs 9]

The operator runs as its own process with a kubeconfig whose server is the proxy; the
runtimes of interactive runs (local processes, hack/podrunner.py) get the proxy too. The
workload itself (spawns, queries, kills, and what checks them) talks to the API server
directly: the faults are between the operator, the runtimes and the API server.

While the operator-crash workload spawns Workers (a third of them profiled children),
queries and kills go to interactive runs, and faults are injected at random moments, in
turn:

- drop: every connection through the proxy reset at once;
- blackhole: nothing forwarded either way for a few seconds, then it all flows on;
- silent: a blackhole after which the connections it held stay dead without a word (a
  NAT entry gone): only a client's own idle detection notices (kopf: 70 s without an event
  or bookmark; `kube.watch.observe`: `SILENCE_SECONDS`) and resumes from the last
  resourceVersion it saw;
- latency: every chunk held 300 ms each way for 5 s;
- gone: the API server restarted behind a blackhole: every watch resumes from a version
  older than the new server's watch cache and is answered 410 Gone, so it lists again.

Each queried run gets one more query once the faults are over, so a watch that a fault
left silent is noticed or counted. Invariants: those of the operator's scenarios, and for
the runs: each query delivered once (`status.queriesDelivered`, and one answer each in
the runtime's log), each kill done once (Killed, one Event), no run disturbed (every
other stays Idle).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from bench.faults import (
    INVARIANTS,
    REPO,
    Bindings,
    Report,
    _check,
    _converged,
    _events,
    _items,
    _revisions,
    _spawn_while_faulting,
    _spawned,
    _status,
    _worker,
)
from tests.e2e.support import CONFIG, PROFILES, Cluster, Operator, pod_runner, wait_until

from agentworkers import kube
from agentworkers.client import Client
from agentworkers.errors import AgentWorkersError, ApiError
from agentworkers.kube.api import Api
from agentworkers.kube.watch import observe

sys.path.insert(0, str(REPO / "hack"))
try:
    from faultproxy import FaultProxy
finally:
    sys.path.remove(str(REPO / "hack"))

RUN_INVARIANTS = (
    "query lost",
    "query delivered twice",
    "kill lost",
    "Events per kill not 1",
    "run disturbed",
)
NETWORK_INVARIANTS = (*INVARIANTS, *RUN_INVARIANTS)
FAULTS = ("drop", "blackhole", "silent", "latency", "gone")
BLACKHOLE_SECONDS = 4.0
LATENCY_MS = 300
LATENCY_SECONDS = 5.0
# Time for every run to settle after the last fault: kopf's 70 s of inactivity before it
# reconnects a silent watch, then the reconcile, with room.
SETTLE_SECONDS = 150.0


def network_faults(
    cluster: Cluster,
    spawns: int,
    faults: int,
    seconds: float,
    runs: int = 8,
    kinds: tuple[str, ...] = FAULTS,
) -> Report:
    """`spawns` Workers over `seconds` and `runs` interactive runs receiving queries and
    kills, while `faults` network faults (of `kinds`, in turn) hit the operator's and the
    runtimes' connections to the API server."""
    api = Api(cluster.api)
    prefix = f"faults{uuid.uuid4().hex[:4]}"
    spawn_ns, run_ns = f"{prefix}-faults", f"{prefix}-runs"
    parents = [f"parent-{i}" for i in range(max(1, spawns // 30))]
    names = [f"run-{i:02d}" for i in range(runs)]
    victims = names[: max(1, runs // 3)]  # killed at a random moment; the others get queries
    talkers = names[len(victims) :]
    report = Report(
        "network faults",
        f"{spawns} spawns over {seconds:.0f} s ({spawns // 3} profiled children of "
        f"{len(parents)} parents), {runs} interactive runs ({len(victims)} killed, the others "
        f"queried), {faults} network faults ({', '.join(kinds)}) between the operator, the "
        "runtimes and the API server",
        NETWORK_INVARIANTS,
    )
    for namespace in (spawn_ns, run_ns):
        cluster.kubectl("create", "namespace", namespace)
    server = _server(cluster)
    with (
        tempfile.TemporaryDirectory() as tmp,
        FaultProxy(server) as proxy,
    ):
        proxied = dataclasses.replace(
            cluster, operator_kubeconfig=_kubeconfig(cluster, proxy.url, Path(tmp))
        )
        logs = Path(tmp) / "pods"
        with (
            Operator.of_own(proxied, Path(tmp), prefix),
            pod_runner(cluster, run_ns, logs, pod_server=proxy.url),
        ):
            config = copy.deepcopy(CONFIG)
            config["spec"]["tree"] = {"maxChildren": spawns, "maxLiveDescendants": spawns}
            # An answer to the first message, then one to each query, however many.
            config["spec"]["model"]["script"] = [
                {"match": "question", "reply": "noted"},
                {"reply": "ready"},
            ]
            for namespace in (spawn_ns, run_ns):
                cluster.apply(namespace, *PROFILES, config)
                wait_until("revision 1", partial(_one_revision, api, namespace))
            for name in parents:
                api.create("workers", spawn_ns, _worker(name))
            for name in names:
                api.create("workers", run_ns, _worker(name, interactive=True))
            wait_until(
                "the parents to start and the runs to be Idle",
                lambda: (
                    all(_status(api, spawn_ns, p).get("frozenRevision") for p in parents)
                    and all(_status(api, run_ns, n).get("phase") == "Idle" for n in names)
                ),
                timeout=60 + runs,
            )
            pods = {
                p["metadata"]["name"]: p["metadata"]["uid"] for p in _items(api, run_ns, "pods")
            }
            bindings = Bindings(api, spawn_ns)
            witness = Witness(Api(_client(proxied)), run_ns)
            client = Client(api, run_ns)
            sent: dict[str, int] = dict.fromkeys(talkers, 0)
            actions = _Actions(client, talkers, victims, seconds, sent, report)
            fault = _injector(cluster, proxy, kinds)
            accepted = _spawn_while_faulting(
                api, spawn_ns, parents, (spawns, faults, seconds), lambda _: fault(), report
            )
            actions.join()
            last_fault = time.monotonic()
            actions.last_round()
            expected = {*parents, *accepted}

            def settled() -> bool:
                workers = _spawned(api, spawn_ns)
                spawned = all(_converged(w) for w in workers) and len(workers) >= len(expected)
                return spawned and all(
                    _run_settled(_status(api, run_ns, n), n in victims, sent.get(n, 0))
                    for n in names
                )

            with contextlib.suppress(AssertionError):  # what did not settle is counted below
                wait_until("every Worker and run to settle", settled, SETTLE_SECONDS + spawns / 5)
            report.converged_seconds = time.monotonic() - last_fault
            bindings.stop()
            witness.stop()
            _check(api, spawn_ns, expected, bindings, report)
            _check_runs(api, run_ns, talkers, victims, sent, pods, logs, report)
            report.keep_logs(Path(tmp))
            report.notes.append(
                f"proxy: {proxy.counts.accepted} connections, {proxy.counts.dropped} "
                f"dropped, {proxy.counts.forgotten} left silent; a watch through it was "
                f"broken {witness.broken} times, listed again after 410 Gone "
                f"{witness.relists} times and reopened {witness.reopened} times"
            )
    for namespace in (spawn_ns, run_ns):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    return report


def _server(cluster: Cluster) -> tuple[str, int]:
    """The API server's host and port, from the cluster's kubeconfig."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    url = config["clusters"][0]["cluster"]["server"]
    host, _, port = url.removeprefix("https://").partition(":")
    return host, int(port or 443)


def _kubeconfig(cluster: Cluster, server: str, workdir: Path) -> Path:
    """The operator's kubeconfig, its server the proxy (the API server's certificate names
    127.0.0.1, so TLS verifies through it as it does direct)."""
    source = cluster.operator_kubeconfig or cluster.kubeconfig
    config = yaml.safe_load(source.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = server
    path = workdir / "proxied.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _client(cluster: Cluster) -> kube.ApiClient:
    assert cluster.operator_kubeconfig is not None
    return kube.connect(str(cluster.operator_kubeconfig)).api


def _injector(cluster: Cluster, proxy: FaultProxy, kinds: tuple[str, ...]) -> Callable[[], str]:
    """The faults, in turn; each call injects one and says what it did."""
    turn = itertools.cycle(kinds)

    def inject() -> str:
        kind = next(turn)
        if kind == "drop":
            return f"drop ({proxy.drop()} connections)"
        if kind == "blackhole":
            proxy.blackhole(BLACKHOLE_SECONDS)
            return f"blackhole {BLACKHOLE_SECONDS:.0f} s"
        if kind == "silent":
            proxy.blackhole(BLACKHOLE_SECONDS, forget=True)
            return f"silent {BLACKHOLE_SECONDS:.0f} s"
        if kind == "latency":
            proxy.latency(LATENCY_MS)
            threading.Timer(LATENCY_SECONDS, proxy.latency, (0,)).start()
            return f"latency {LATENCY_MS} ms for {LATENCY_SECONDS:.0f} s"
        if kind == "gone":
            # The watches resume after the restart from versions the new server's watch
            # cache does not hold: 410 Gone, each.
            proxy.blackhole(120)
            try:
                subprocess.run(
                    [
                        sys.executable,
                        str(REPO / "hack" / "localcluster.py"),
                        "restart",
                        "apiserver",
                    ],
                    check=True,
                    capture_output=True,
                )
            finally:
                proxy.heal()
            return "API server restarted behind a blackhole (410 Gone)"
        raise ValueError(f"no such fault: {kind}")

    return inject


class _Actions:
    """Queries to the talkers and kills of the victims at random moments of the window,
    from a thread of their own; `sent` counts each talker's queries accepted."""

    def __init__(
        self,
        client: Client,
        talkers: list[str],
        victims: list[str],
        seconds: float,
        sent: dict[str, int],
        report: Report,
    ) -> None:
        plan = [(random.uniform(0, seconds), "kill", v) for v in victims]
        plan += [(random.uniform(0, seconds), "query", t) for t in talkers for _ in range(3)]
        self.plan = sorted(plan)
        self.client, self.sent, self.report, self.talkers = client, sent, report, talkers
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        for at, what, name in self.plan:
            time.sleep(max(0.0, started + at - time.monotonic()))
            self._act(what, name)

    def _act(self, what: str, name: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the API server may be restarting
            try:
                if what == "kill":
                    self.client.kill(name, reason="network faults")
                else:
                    self.client.query(name, f"question {self.sent[name] + 1}")
                    self.sent[name] += 1
                return
            except ApiError as e:
                if e.status is not None and e.status < 500 and e.status != 429:
                    self.report.violations["run disturbed"].append(f"{name}: {what}: {e}")
                    return
                time.sleep(0.5)
            except AgentWorkersError as e:  # refused: the run ended meanwhile
                self.report.violations["run disturbed"].append(f"{name}: {what}: {e}")
                return

    def join(self) -> None:
        self.thread.join()

    def last_round(self) -> None:
        """One more query to each talker once the faults are over: a runtime whose watch
        a fault left dead without a word must notice by itself to hear it."""
        for name in self.talkers:
            self._act("query", name)


class Witness:
    """A watch of the runs through the proxy, as a runtime's (`observe`): how often it
    listed again after a 410 Gone, was reopened (a silent watch, or its end) and was
    broken (a reset: the watch is started again, with a listing)."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.relists = self.reopened = self.broken = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(api, namespace), daemon=True)
        self._thread.start()

    def _run(self, api: Api, namespace: str) -> None:
        listed = False
        while not self._stop.is_set():
            try:
                for kind, _ in observe(api, "workers", namespace, heartbeat=300):
                    if self._stop.is_set():
                        return
                    if kind == "SYNCED":
                        self.relists += listed
                        listed = True
                    elif kind == "IDLE":
                        self.reopened += 1
            except ApiError:
                self.broken += 1
                listed = False  # the next listing is not a 410's
                time.sleep(1)

    def stop(self) -> None:
        self._stop.set()


def _one_revision(api: Api, namespace: str) -> bool:
    return _revisions(api, namespace) == 1


def _run_settled(status: dict[str, Any], victim: bool, queries: int) -> bool:
    if victim:
        return status.get("phase") == "Killed"
    return status.get("phase") == "Idle" and status.get("queriesDelivered", 0) >= queries


def _answers(logs: Path, namespace: str, name: str) -> int:
    """The run's answers, from its runtime's log (one JSON event a line)."""
    path = logs / f"{namespace}_{name}.log"
    if not path.exists():
        return 0
    return sum('"kind": "assistant_message"' in line for line in path.read_text().splitlines())


def _check_runs(
    api: Api,
    namespace: str,
    talkers: list[str],
    victims: list[str],
    sent: dict[str, int],
    pods: dict[str, str],
    logs: Path,
    r: Report,
) -> None:
    v = r.violations
    events = _events(api, namespace, victims, lambda e: e.get("reason") == "Killed")
    for name in talkers:
        status = _status(api, namespace, name)
        delivered = status.get("queriesDelivered", 0)
        answers = _answers(logs, namespace, name)  # the initial message's, then one a query
        if status.get("phase") != "Idle":
            v["run disturbed"].append(f"{name}: {status.get('phase')}")
        if delivered < sent[name] or answers < 1 + sent[name]:
            v["query lost"].append(f"{name}: {sent[name]} sent, {delivered} delivered")
        if delivered > sent[name] or answers > 1 + sent[name]:
            v["query delivered twice"].append(f"{name}: {sent[name]} sent, {answers - 1} answered")
    for name in victims:
        status = _status(api, namespace, name)
        if status.get("phase") != "Killed":
            v["kill lost"].append(f"{name}: {status.get('phase')}")
        killed = [
            e for e in events
            if e["involvedObject"].get("name") == name and e.get("reason") == "Killed"
        ]  # fmt: skip
        if len(killed) != 1:
            v["Events per kill not 1"].append(f"{name}: {len(killed)}")
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _items(api, namespace, "pods")}
    v["run disturbed"] += sorted(
        f"{n}: a second pod" for n, uid in now.items() if n in pods and uid != pods[n]
    )
