#!/usr/bin/env python3
"""Faults, injected while a workload runs, then invariants checked: nothing lost or doubled.

    python bench/faults.py [--spawns 1000] [--kills 20] [--seconds 120]
                           [--restarts 6] [--runs 60] [--runtime-kills 10] [--pod-deletes 5]
                           [--model-runs 40] [--net-spawns 300] [--net-faults 10]
                           [--net-seconds 90] [--net-runs 9]
                           [--only operator|control-plane|runtimes|model|network]

Scenario "operator crashes": spawns Workers at a steady pace (a third of them profiled
children of running parents) while the operator is SIGKILLed at random moments and
restarted each time. Spawns refused while no operator answers its webhook (writes fail
closed) are retried, as a client would. Once every Worker has converged, it counts every
invariant's violations (all expected 0):

- a valid spawn refused (by a rule: not "try again" while the operator restarts);
- an invalid spawn stored: one in ten spawns has a twin naming a profile its parent's
  agent does not have, sent the same way; while no operator answers it fails closed, and
  once one does it must be refused by its rule (UnknownProfile), never stored;
- a Worker with no pod, or more than one, or a pod that is not its Worker's;
- a Worker that did not reach the phase its inputs imply (started with its pod: Running,
  or Pending while its pod waits for a node or for kwok);
- a spawn the API server accepted that is gone;
- a binding annotation rewritten once written;
- an AgentConfigRevision cut twice for one config.

Scenario "control plane restarts": the same workload (half of it) while the API server
and etcd are restarted in turn, their data kept: the operator, the workload and the
watches reconnect and resume; the same invariants.

Scenario "worker runtimes killed": interactive runs whose runtimes run as local
processes (hack/podrunner.py); some runtimes are SIGKILLed (an OOM kill, say) and some
pods deleted behind the operator's back. Invariants: no run hangs after its runtime died;
each such run is Failed with its reason (what its container's end says, or PodLost), one
Warning Event, and the same reason to whoever collects it; every other run stays Idle; no
run gets a second pod.

Scenario "model endpoint faults" (`--model-runs 40`, no cluster needed:
`bench/fault_model_endpoint.py`): runs of the worker runtime's agent loop and openai driver,
in process, against a fake chat-completions server that answers 429 with Retry-After, 500,
400, nothing (hangs), a stream cut half-way, a stream that stalls half-way, a stream that
comes slowly (each event within the timeout, the whole past it: it must succeed).
Invariants: each run ends as its faults imply (Done with its answer, or Failed naming the
cause), retries bounded and spaced by Retry-After (capped) or the backoff (the SDK's or,
after a cut, the runtime's), tokens counted once per reply received, no call past the
token budget, no run hung.

Scenario "network faults" (`bench/fault_network.py`): the operator and the runtimes reach
the API server through a proxy that drops connections, blackholes them (healing, or leaving
them silent for good), adds latency, and hides an API server restart (410 Gone on every
watch resumed); the operator's workload plus interactive runs receiving queries and kills.
Invariants: the operator's, and each query delivered once, each kill done once.

`--only NAME` (repeatable) runs only that scenario: operator, control-plane, runtimes, model,
network.

Bounded in count and time, loopback only; run it alone on the local control plane.
`tests/e2e/test_faults.py` runs a short version in `make test`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.support import (  # noqa: E402
    CONFIG,
    PROFILES,
    Cluster,
    Operator,
    install_crds,
    local_cluster,
    pod_runner,
    process_with,
    wait_until,
)

from agentworkers.api.names import BINDING_ANNOTATION, WORKER_LABEL  # noqa: E402
from agentworkers.client import Client  # noqa: E402
from agentworkers.errors import AgentWorkersError, ApiError  # noqa: E402
from agentworkers.kube.api import Api  # noqa: E402
from agentworkers.kube.watch import observe  # noqa: E402

INVARIANTS = (
    "valid spawn refused",
    "invalid spawn stored",
    "pods per Worker not 1",
    "pod not its Worker's",
    "Worker not converged",
    "accepted spawn lost",
    "binding rewritten",
    "revision cut twice",
)
# A profile key no agent of the workload has: a spawn naming it is invalid (UnknownProfile).
UNKNOWN_PROFILE = "no-such-profile"
RUNTIME_INVARIANTS = (
    "run hung after its runtime died",
    "failure without its reason",
    "Events per failed run not 1",
    "collect without the reason",
    "untouched run disturbed",
    "second pod",
)


@dataclass
class Report:
    scenario: str
    workload: str
    invariants: tuple[str, ...] = INVARIANTS
    faults: list[str] = field(default_factory=list)
    converged_seconds: float = float("nan")
    violations: dict[str, list[str]] = field(default_factory=dict)
    # Where the scenario's logs (the operator's, the runtimes') were kept, when not clean.
    logs: Path | None = None
    # What else the scenario saw, a line each, shown after its counts.
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.violations = {name: [] for name in self.invariants}

    def show(self) -> None:
        print(f"\n== {self.scenario}: {self.workload}")
        print(f"   faults injected: {len(self.faults)} ({', '.join(self.faults[:3])}, ...)")
        print(f"   converged {self.converged_seconds:.1f} s after the last fault")
        for name, found in self.violations.items():
            example = f"  e.g. {found[0]}" if found else ""
            print(f"   {name:28s} {len(found)}{example}")
        for note in self.notes:
            print(f"   ({note})")
        if self.logs is not None:
            print(f"   logs kept in {self.logs}")

    def keep_logs(self, directory: Path) -> None:
        """Not clean: a copy of the scenario's logs (its temporary directory) under
        .faults/, for the next look at what happened."""
        if self.clean:
            return
        slug = self.scenario.replace(" ", "-")
        self.logs = REPO / ".faults" / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}"
        shutil.copytree(directory, self.logs, ignore=shutil.ignore_patterns("*.sock"))

    @property
    def clean(self) -> bool:
        return not any(self.violations.values())


def _worker(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name},
        "spec": {"agent": "planner", "initialMessage": "go", **spec},
    }


class Bindings:
    """Every binding annotation each Worker ever had, from a watch."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.seen: defaultdict[str, set[str]] = defaultdict(set)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(api, namespace), daemon=True)
        self._thread.start()

    def _run(self, api: Api, namespace: str) -> None:
        while not self._stop.is_set():
            try:
                for kind, body in observe(api, "workers", namespace, heartbeat=1):
                    if self._stop.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED") and body is not None:
                        meta = body["metadata"]
                        binding = (meta.get("annotations") or {}).get(BINDING_ANNOTATION)
                        if binding:
                            self.seen[meta["name"]].add(binding)
            except ApiError:
                time.sleep(0.5)  # the API server's trouble: watch again

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def operator_crashes(cluster: Cluster, spawns: int, kills: int, seconds: float) -> Report:
    """`spawns` Workers over `seconds`, with `kills` SIGKILLs of the operator meanwhile."""

    def crash(operator: Operator, while_down: Callable[[], None]) -> str:
        operator.crash(cluster, while_down)
        return "SIGKILL"

    what = f"{kills} SIGKILLs of the operator"
    return _under_faults(cluster, "operator crashes", what, (spawns, kills, seconds), crash)


def control_plane_restarts(cluster: Cluster, spawns: int, restarts: int, seconds: float) -> Report:
    """`spawns` Workers over `seconds`, with `restarts` restarts of the API server and of
    etcd in turn (their data kept): the operator and the workload reconnect and resume
    their watches from where they were."""
    components = itertools.cycle(("apiserver", "etcd"))

    def restart(_: Operator, __: Callable[[], None]) -> str:
        component = next(components)
        subprocess.run(
            [sys.executable, str(REPO / "hack" / "localcluster.py"), "restart", component],
            check=True,
            capture_output=True,
        )
        return f"{component} restarted"

    what = f"{restarts} restarts of the API server and etcd, in turn"
    return _under_faults(
        cluster, "control plane restarts", what, (spawns, restarts, seconds), restart
    )


def _under_faults(
    cluster: Cluster,
    scenario: str,
    what: str,
    plan: tuple[int, int, float],
    fault: Callable[[Operator, Callable[[], None]], str],
) -> Report:
    """The workload of the operator's scenarios: spawns at a steady pace, a third of them
    profiled children of running parents, with `fault` injected `plan[1]` times (it may
    call its second argument while the operator is down: an invalid spawn sent then)."""
    spawns, _, seconds = plan
    api = Api(cluster.api)
    prefix = f"faults{uuid.uuid4().hex[:4]}"
    namespace = f"{prefix}-faults"
    parents = [f"parent-{i}" for i in range(max(1, spawns // 30))]
    report = Report(
        scenario,
        f"{spawns} spawns over {seconds:.0f} s ({spawns // 3} profiled children of "
        f"{len(parents)} parents), {what}",
    )
    cluster.kubectl("create", "namespace", namespace)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Operator.of_own(cluster, Path(tmp), prefix) as operator,
    ):
        config = copy.deepcopy(CONFIG)
        # The workload stays within the agent's tree limits: a refusal is a violation.
        config["spec"]["tree"] = {"maxChildren": spawns, "maxLiveDescendants": spawns}
        cluster.apply(namespace, *PROFILES, config)
        wait_until("revision 1", lambda: _revisions(api, namespace) == 1)
        for name in parents:
            api.create("workers", namespace, _worker(name))
        wait_until(
            "the parents to start",
            lambda: all(_status(api, namespace, p).get("frozenRevision") for p in parents),
        )
        bindings = Bindings(api, namespace)
        accepted = _spawn_while_faulting(
            api, namespace, parents, plan, lambda while_down: fault(operator, while_down), report
        )
        last_fault = time.monotonic()
        expected = {*parents, *accepted}

        def converged() -> bool:
            workers = _spawned(api, namespace)
            return all(_converged(w) for w in workers) and len(workers) >= len(expected)

        with contextlib.suppress(AssertionError):  # what did not converge is counted below
            wait_until("every Worker to converge", converged, timeout=120 + spawns / 5)
        report.converged_seconds = time.monotonic() - last_fault
        bindings.stop()
        _check(api, namespace, expected, bindings, report)
        report.keep_logs(Path(tmp))
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    return report


def _spawn_while_faulting(
    api: Api,
    namespace: str,
    parents: list[str],
    plan: tuple[int, int, float],
    fault: Callable[[Callable[[], None]], str],
    report: Report,
) -> set[str]:
    """Spawn at a steady pace, injecting `fault` (it returns what it did) at random
    moments; the names the API server accepted. A fault may call the function it is
    given while the webhook is down: an invalid spawn is sent at that moment."""
    spawns, kills, seconds = plan
    accepted: set[str] = set()
    started = time.monotonic()

    def spawn(i: int) -> None:
        name = f"w{i:05d}"
        parent = parents[i % len(parents)]
        body = _worker(name, parent=parent, profile="reviewer") if i % 3 == 0 else _worker(name)
        if (cause := _create(body)) is None:
            accepted.add(name)
        else:
            report.violations["valid spawn refused"].append(f"{name}: {cause}")
        if i % 10 == 0:
            spawn_invalid(f"x{i:05d}", parent)

    def spawn_invalid(name: str, parent: str) -> None:
        invalid = _worker(name, parent=parent, profile=UNKNOWN_PROFILE)
        # Stored, it is counted once the workload has converged (`_check`).
        if (cause := _create(invalid)) is not None and cause.reason != "UnknownProfile":
            report.violations["invalid spawn stored"].append(f"{name}: refused as {cause}")

    def _create(body: dict[str, Any]) -> AgentWorkersError | None:
        """Create until the API server stores it (None) or a rule refuses it (the cause)."""
        deadline = time.monotonic() + seconds + 120
        while time.monotonic() < deadline:
            try:
                api.create("workers", namespace, body)
            except ApiError as e:
                if e.cause is not None:  # a rule refused it
                    return e.cause
                if e.status != 409:  # 409: an earlier try went through after all
                    # No operator answers its webhook yet: writes fail closed; try again.
                    time.sleep(0.2)
                    continue
            return None
        return None

    def crash() -> None:
        at = time.monotonic() - started
        name = f"x-down-{len(report.faults):03d}"

        def while_down() -> None:
            futures.append(pool.submit(spawn_invalid, name, parents[0]))

        report.faults.append(f"{fault(while_down)} at {at:.1f} s")

    moments = sorted(random.uniform(0, seconds) for _ in range(kills))
    with ThreadPoolExecutor(16) as pool:
        futures = []
        for i in range(spawns):
            if (wait := started + i * seconds / spawns - time.monotonic()) > 0:
                time.sleep(wait)
            while moments and time.monotonic() - started >= moments[0]:
                moments.pop(0)
                crash()
            futures.append(pool.submit(spawn, i))
        for moment in moments:  # the window's last kills
            time.sleep(max(0.0, started + moment - time.monotonic()))
            crash()
        for future in futures:
            future.result()
    return accepted


def _check(api: Api, namespace: str, expected: set[str], bindings: Bindings, r: Report) -> None:
    everything = _items(api, namespace, "workers")
    workers = {w["metadata"]["name"]: w for w in everything if not _invalid(w)}
    pods = _items(api, namespace, "pods")
    per_worker = Counter(p["metadata"]["labels"].get(WORKER_LABEL) for p in pods)
    v = r.violations
    v["invalid spawn stored"] += sorted(
        f"{w['metadata']['name']}: stored" for w in everything if _invalid(w)
    )
    for name, body in workers.items():
        if per_worker[name] != 1:
            v["pods per Worker not 1"].append(f"{name}: {per_worker[name]}")
        if not _converged(body):
            v["Worker not converged"].append(f"{name}: {(body.get('status') or {}).get('phase')}")
    for pod in pods:
        owner = pod["metadata"]["labels"].get(WORKER_LABEL)
        uids = {o["uid"] for o in pod["metadata"].get("ownerReferences") or []}
        if owner not in workers or workers[owner]["metadata"]["uid"] not in uids:
            v["pod not its Worker's"].append(pod["metadata"]["name"])
    v["accepted spawn lost"] += sorted(expected - workers.keys())
    v["binding rewritten"] += sorted(n for n, seen in bindings.seen.items() if len(seen) > 1)
    if (count := _revisions(api, namespace)) != 1:
        v["revision cut twice"].append(f"{count} revisions for one config")


def _spawned(api: Api, namespace: str) -> list[dict[str, Any]]:
    """The namespace's Workers but invalid ones (those count as `invalid spawn stored`)."""
    return [w for w in _items(api, namespace, "workers") if not _invalid(w)]


def _invalid(worker: dict[str, Any]) -> bool:
    return bool((worker.get("spec") or {}).get("profile") == UNKNOWN_PROFILE)


def _converged(worker: dict[str, Any]) -> bool:
    """Started, with its pod: Running, or Pending while the pod waits for a node (or for
    kwok to run it)."""
    status = worker.get("status") or {}
    return bool(status.get("pod")) and status.get("phase") in ("Pending", "Running")


def _items(api: Api, namespace: str, plural: str) -> list[dict[str, Any]]:
    labels = WORKER_LABEL if plural == "pods" else ""
    return list(api.list(plural, namespace, labels=labels).get("items", []))


def _events(
    api: Api, namespace: str, names: list[str], match: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """The namespace's Events that `match`, once each of `names` has one (an Event follows
    its run's status write by a moment), or after 10 s."""

    def matching() -> list[dict[str, Any]]:
        return [e for e in api.list("events", namespace).get("items", []) if match(e)]

    with contextlib.suppress(AssertionError):  # a missing one is counted by the caller
        wait_until(
            "an Event for each run",
            lambda: set(names) <= {e["involvedObject"].get("name") for e in matching()},
            timeout=10,
        )
    return matching()


def _status(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return dict((api.get("workers", namespace, name) or {}).get("status") or {})


def _revisions(api: Api, namespace: str) -> int:
    return len(_items(api, namespace, "agentconfigrevisions"))


def runtimes_killed(cluster: Cluster, runs: int, kills: int, deletes: int) -> Report:
    """`runs` interactive runs, their runtimes in local processes (hack/podrunner.py); then
    `kills` runtimes SIGKILLed and `deletes` pods deleted behind the operator's back. Each
    such run must fail loud (its reason in status, one Event, the same reason to whoever
    collects it); every other run goes on untouched; no run gets a second pod."""
    api = Api(cluster.api)
    prefix = f"faults{uuid.uuid4().hex[:4]}"
    namespace = f"{prefix}-runtimes"
    names = [f"run-{i:03d}" for i in range(runs)]
    report = Report(
        "worker runtimes killed",
        f"{runs} interactive runs, {kills} runtimes SIGKILLed, {deletes} pods deleted",
        RUNTIME_INVARIANTS,
    )
    cluster.kubectl("create", "namespace", namespace)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Operator.of_own(cluster, Path(tmp), prefix),
        pod_runner(cluster, namespace, Path(tmp) / "pods"),
    ):
        config = copy.deepcopy(CONFIG)
        config["spec"]["model"]["script"] = [{"reply": "waiting for more"}]
        cluster.apply(namespace, *PROFILES, config)
        wait_until("revision 1", lambda: _revisions(api, namespace) == 1)
        for name in names:
            api.create("workers", namespace, _worker(name, interactive=True))
        wait_until(
            "every run to be Idle",
            lambda: all(_status(api, namespace, n).get("phase") == "Idle" for n in names),
            timeout=60 + runs,
        )
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _items(api, namespace, "pods")}
        victims = random.sample(names, kills + deletes)
        killed, deleted = victims[:kills], victims[kills:]
        for name in killed:
            pid = process_with(
                {"AGENTWORKERS_WORKER": name, "AGENTWORKERS_NAMESPACE": namespace}, "run"
            )
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                report.faults.append(f"SIGKILL {name}")
        for name in deleted:
            cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=false")
            report.faults.append(f"pod of {name} deleted")
        last_fault = time.monotonic()

        def ended() -> bool:
            return all(_status(api, namespace, n).get("phase") == "Failed" for n in victims)

        with contextlib.suppress(AssertionError):  # what hung is counted below
            wait_until("every victim to fail", ended, timeout=60)
        report.converged_seconds = time.monotonic() - last_fault
        _check_runtimes(cluster, namespace, names, victims, pods, report)
        report.keep_logs(Path(tmp))
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    return report


def _check_runtimes(
    cluster: Cluster,
    namespace: str,
    names: list[str],
    victims: list[str],
    pods: dict[str, str],
    r: Report,
) -> None:
    v = r.violations
    api = Api(cluster.api)
    # The run's own Events: its pod's (the scheduler's FailedScheduling, say) are not its.
    events = _events(
        api,
        namespace,
        victims,
        lambda e: e.get("type") == "Warning" and e["involvedObject"].get("kind") == "Worker",
    )
    errors: dict[str, str] = {}
    for name in names:
        status = _status(api, namespace, name)
        if name not in victims:
            if status.get("phase") != "Idle":
                v["untouched run disturbed"].append(f"{name}: {status.get('phase')}")
            continue
        if status.get("phase") != "Failed":
            v["run hung after its runtime died"].append(f"{name}: {status.get('phase')}")
            continue
        error = errors[name] = status.get("error") or ""
        if not error or error == "the pod failed":
            v["failure without its reason"].append(f"{name}: {error!r}")
        warned = [
            e for e in events
            if e["involvedObject"].get("name") == name and e.get("type") == "Warning"
        ]  # fmt: skip
        if len(warned) != 1:
            said = ", ".join(
                f"{e['involvedObject'].get('kind')} {e.get('reason')} x{e.get('count') or 1}"
                for e in warned
            )
            v["Events per failed run not 1"].append(f"{name}: {len(warned)} ({said})")
    client = Client(cluster.api, namespace)
    for name, error in errors.items():
        result = client.collect(name, timeout=10)
        if (result.phase, result.error) != ("Failed", error):
            v["collect without the reason"].append(f"{name}: {result.phase} {result.error!r}")
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _items(api, namespace, "pods")}
    v["second pod"] += sorted(n for n, uid in now.items() if n in pods and uid != pods[n])


SCENARIOS = ("operator", "control-plane", "runtimes", "model", "network")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=120, help="the spawning window")
    parser.add_argument(
        "--restarts", type=int, default=6, help="API server and etcd restarts, in turn"
    )
    parser.add_argument("--runs", type=int, default=60, help="runs whose runtimes are killed")
    parser.add_argument("--runtime-kills", type=int, default=10)
    parser.add_argument("--pod-deletes", type=int, default=5)
    parser.add_argument(
        "--model-runs", type=int, default=40, help="runs against a faulty model endpoint"
    )
    parser.add_argument("--net-spawns", type=int, default=300, help="network faults: spawns")
    parser.add_argument("--net-faults", type=int, default=10, help="network faults injected")
    parser.add_argument("--net-seconds", type=float, default=90, help="network faults: window")
    parser.add_argument("--net-runs", type=int, default=9, help="network faults: runs")
    parser.add_argument(
        "--only", action="append", choices=SCENARIOS, help="run only this scenario (repeatable)"
    )
    args = parser.parse_args()
    only = set(args.only or SCENARIOS)
    # Stopped early, it still stops its operator and takes its webhook along (a webhook left
    # behind would refuse every write of agentworkers objects: it fails closed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    reports = []
    if only - {"model"}:  # the model endpoint's scenario needs no cluster
        cluster = local_cluster()
        install_crds(cluster)
        if "operator" in only:
            reports.append(operator_crashes(cluster, args.spawns, args.kills, args.seconds))
        if "control-plane" in only:
            reports.append(
                control_plane_restarts(cluster, args.spawns // 2, args.restarts, args.seconds / 2)
            )
        if "runtimes" in only:
            reports.append(
                runtimes_killed(cluster, args.runs, args.runtime_kills, args.pod_deletes)
            )
        if "network" in only:
            # Imported here: it takes Report from this module.
            from bench.fault_network import network_faults  # noqa: PLC0415

            reports.append(
                network_faults(
                    cluster, args.net_spawns, args.net_faults, args.net_seconds, args.net_runs
                )
            )
    if "model" in only:
        # Imported here: it takes Report from this module.
        from bench.fault_model_endpoint import model_endpoint_faults  # noqa: PLC0415

        reports.append(model_endpoint_faults(args.model_runs))
    for report in reports:
        report.show()
    clean = all(r.clean for r in reports)
    print(json.dumps({"clean": clean}))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
