"""Fair-share queueing through Kueue (v0.17.0, built from its module) on the local control
plane: two teams, a LocalQueue each, two ClusterQueues in one cohort with a nominal quota
of two runs each. Team A's burst borrows team B's idle quota; B's spawns, when it comes
back, are admitted before A's next (they are within B's nominal quota, A's would borrow);
every waiting Worker names its queue and Kueue's reason; a killed queued run frees its
place; no run loses its pod or gets two. Runs hold their pods (kwok runs them) until killed."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from agentworkers.api import GROUP, VERSION
from agentworkers.client import Client
from tests.e2e.conftest import SESSION
from tests.e2e.kueue import GROUP as KUEUE
from tests.e2e.kueue import VERSION as KUEUE_VERSION
from tests.e2e.kueue import Kueue
from tests.e2e.support import Cluster, Operator, first_revision, wait_until
from tests.e2e.test_cli import cli

pytestmark = pytest.mark.usefixtures("operator")

CPU_PER_RUN = "500m"
NOMINAL = "1"  # two runs' worth per team
DEADLINE = 600
AGENT: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "AgentConfig",
    "metadata": {"name": "agents"},
    "spec": {
        "model": {
            "provider": "scripted",
            "model": "demo",
            "script": [{"match": ".", "reply": "ok"}],
        },
        "worker": {
            "queueName": "agents",
            "resources": {"requests": {"cpu": CPU_PER_RUN}},
            "deadlineSeconds": DEADLINE,
        },
    },
}


@pytest.fixture(scope="module")
def kueue(
    cluster: Cluster, operator: Operator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Kueue, managing the pods of namespaces labelled with this session's label; the
    session's operator restarted after it, as docs/multitenancy.md asks of a platform team
    that installs Kueue after the operator (it looks for Kueue's Workloads as it starts)."""
    label = {"agentworkers.io/kueue": SESSION}
    workdir = tmp_path_factory.mktemp("kueue")
    with Kueue.start(cluster, workdir, label) as running:
        operator.restart(cluster)
        try:
            yield label
        except BaseException:
            print(running.tail())
            raise


@pytest.fixture
def teams(cluster: Cluster, kueue: dict[str, str]) -> Iterator[tuple[str, str, str]]:
    """Two teams' namespaces (the session operator's), each with its LocalQueue `agents`
    pointing at its own ClusterQueue, both in one cohort; and the tag of the test's
    cluster-scoped objects."""
    tag = uuid.uuid4().hex[:6]
    core = kubernetes.client.CoreV1Api(cluster.api)
    names = (f"{SESSION}-kueue-{tag}-a", f"{SESSION}-kueue-{tag}-b")
    cluster_scoped = [
        {
            "apiVersion": f"{KUEUE}/{KUEUE_VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"default-{tag}"},
        },
        *(cluster_queue(f"team-{t}-{tag}", f"agents-{tag}", f"default-{tag}") for t in "ab"),
    ]
    for name in names:
        core.create_namespace(
            {"metadata": {"name": name, "labels": {"agentworkers.io/test": "e2e", **kueue}}}
        )
    try:
        cluster.kubectl("apply", "-f", "-", stdin=_yaml(*cluster_scoped))
        for name, team in zip(names, "ab", strict=True):
            wait_until(
                f"{name}'s default service account",
                lambda n=name: core.list_namespaced_service_account(n).items,
                timeout=30,
            )
            local = {
                "apiVersion": f"{KUEUE}/{KUEUE_VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": "agents"},
                "spec": {"clusterQueue": f"team-{team}-{tag}"},
            }
            cluster.apply(name, local, copy.deepcopy(AGENT))
            first_revision(cluster, name, agent="agents")
        yield (*names, tag)
    finally:
        # While Kueue runs: it holds finalizers on the pods, Workloads and ClusterQueues it
        # manages, and lets them go only as they are done with.
        for name in names:
            core.delete_namespace(name)
        for name in names:
            cluster.kubectl("wait", "--for=delete", f"namespace/{name}", "--timeout=90s")
        for obj in reversed(cluster_scoped):
            cluster.kubectl(
                "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found",
                "--timeout=60s",
            )  # fmt: skip


def cluster_queue(name: str, cohort: str, flavor: str) -> dict[str, Any]:
    """A team's ClusterQueue: two runs' CPU of its own, lent to its cohort while idle,
    borrowed from it without limit; no preemption (docs/multitenancy.md says why)."""
    return {
        "apiVersion": f"{KUEUE}/{KUEUE_VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": NOMINAL}]}
                    ],
                }
            ],
            "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"},
        },
    }


def _yaml(*objects: dict[str, Any]) -> str:
    return "\n---\n".join(json.dumps(o) for o in objects)


def spawn(cluster: Cluster, namespace: str, name: str, **spec: Any) -> None:
    kubernetes.client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "workers",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Worker",
            "metadata": {"name": name},
            "spec": {"agent": "agents", "initialMessage": "hi", **spec},
        },
    )


class Runs:
    """The Workers and pods of the two teams, read as a user would (the API), and every pod
    each Worker ever had (by uid): a second pod of one run is a doubled run."""

    def __init__(self, cluster: Cluster, namespaces: tuple[str, str]) -> None:
        self.objects = kubernetes.client.CustomObjectsApi(cluster.api)
        self.core = kubernetes.client.CoreV1Api(cluster.api)
        self.namespaces = namespaces
        self.pods_seen: dict[str, set[str]] = {}

    def workers(self) -> dict[str, dict[str, Any]]:
        found = {}
        for namespace in self.namespaces:
            listing = self.objects.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "workers"
            )
            found.update({w["metadata"]["name"]: w for w in listing["items"]})
        return found

    def pods(self) -> dict[str, list[Any]]:
        """The pods of each Worker, by its name; each pod remembered by uid."""
        found: dict[str, list[Any]] = {}
        for namespace in self.namespaces:
            for pod in self.core.list_namespaced_pod(
                namespace, label_selector="agentworkers.io/worker"
            ).items:
                run = pod.metadata.labels["agentworkers.io/worker"]
                found.setdefault(run, []).append(pod)
                self.pods_seen.setdefault(run, set()).add(pod.metadata.uid)
        return found

    def standing(self) -> dict[str, str]:
        """Each run as `Running`, `Queued`, `Killed` or its phase; checks one pod at most."""
        pods = self.pods()
        assert all(len(p) == 1 for p in pods.values()), {r: len(p) for r, p in pods.items()}
        out = {}
        for name, body in self.workers().items():
            status = body.get("status") or {}
            queued = _condition(status, "Queued")
            if status.get("phase") == "Pending" and queued and queued["status"] == "True":
                out[name] = "Queued"
            else:
                out[name] = status.get("phase") or "None"
        return out

    def describe(self, names: list[str]) -> str:
        """What a user would look at for runs not where they should be: each Worker's
        conditions and its pod's phase, gates and node."""
        workers, pods = self.workers(), self.pods()
        out = []
        for name in names:
            status = workers.get(name, {}).get("status") or {}
            conditions = [
                (c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []
            ]
            pod = [
                (p.status.phase, [g.name for g in p.spec.scheduling_gates or []], p.spec.node_name)
                for p in pods.get(name, [])
            ]
            out.append(f"{name}: {status.get('lastEvent')!r} {conditions} pod {pod}")
        return "; ".join(out)

    def settle(self, what: str, wanted: dict[str, str], timeout: float = 90) -> None:
        seen: list[dict[str, str]] = []

        def reached() -> bool:
            seen[:] = [self.standing()]
            return seen[0] == wanted

        try:
            wait_until(what, reached, timeout=timeout, interval=0.5)
        except AssertionError as e:
            off = [n for n, s in seen[0].items() if wanted.get(n) != s] if seen else []
            raise AssertionError(
                f"{e}: {seen} while waiting for {wanted}; {self.describe(off)}"
            ) from None
        time.sleep(3)  # and nothing more happens: no further admission, no second pod
        assert self.standing() == wanted


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def test_teams_share_a_cohort_fairly_through_kueue(
    cluster: Cluster, teams: tuple[str, str, str]
) -> None:
    team_a, team_b, tag = teams
    runs = Runs(cluster, (team_a, team_b))

    # A's burst of six, one by one (Kueue's queues are FIFO by creation): two runs within
    # A's nominal quota, two on B's idle quota, two wait.
    burst = [f"a{i}" for i in range(6)]
    for name in burst:
        spawn(cluster, team_a, name)
        time.sleep(1.1)  # creation timestamps are to the second
    state = {"a0": "Running", "a1": "Running", "a2": "Running", "a3": "Running",
             "a4": "Queued", "a5": "Queued"}  # fmt: skip
    runs.settle("A's burst: four running (two borrowed), two queued", state)

    shows_where_it_waits(cluster, runs, team_a, tag)

    # B comes back: its two spawns wait (A holds the whole cohort), naming their queue.
    for name in ("b0", "b1"):
        spawn(cluster, team_b, name)
    state |= {"b0": "Queued", "b1": "Queued"}
    runs.settle("B's spawns queued behind A's borrowed runs", state)
    assert _condition(runs.workers()["b0"]["status"], "Queued")["message"].startswith(  # type: ignore[index]
        "waiting in LocalQueue agents: "
    )

    # A's runs end one at a time: each freed place goes to B (within its nominal quota)
    # before A's queued runs (which would borrow again).
    cli(cluster, team_a, "kill", "a0", "--reason", "done with it")
    state |= {"a0": "Killed"}
    first = wait_until(
        "one of B's runs admitted",
        lambda: next((n for n in ("b0", "b1") if runs.standing().get(n) == "Running"), None),
        interval=0.5,
    )
    state |= {first: "Running"}
    runs.settle("the first freed place went to B", state)
    cli(cluster, team_a, "kill", "a1", "--reason", "done with it")
    state |= {"a1": "Killed", "b0": "Running", "b1": "Running"}
    runs.settle("the second too: B runs its nominal quota, A its own", state)
    admitted = [
        e
        for e in cluster.kubectl_json("get", "events", "-n", team_b)["items"]
        if e["reason"] == "Admitted" and e["involvedObject"]["kind"] == "Worker"
    ]  # (Kueue posts its own on its Workloads)
    assert sorted(e["involvedObject"]["name"] for e in admitted) == ["b0", "b1"]
    assert "from LocalQueue agents into ClusterQueue team-b-" in admitted[0]["message"]
    # Admitted after a wait: its pod has what is left of the run's deadline, not all of it.
    pod = runs.core.read_namespaced_pod("b0", team_b)
    assert pod.spec.active_deadline_seconds < DEADLINE
    assert not pod.spec.scheduling_gates

    # A kill of a queued run frees its place: the next in A's queue runs instead.
    cli(cluster, team_a, "kill", "a4", "--reason", "not needed any more")
    state |= {"a4": "Killed"}
    runs.settle("the queued run killed, its pod gone", state)
    killed = _condition(runs.workers()["a4"]["status"], "Queued")
    assert killed is not None and (killed["status"], killed["reason"]) == ("False", "Killed")
    cli(cluster, team_a, "kill", "a2", "--reason", "done with it")
    state |= {"a2": "Killed", "a5": "Running"}
    runs.settle("a5 takes the place a4 left", state)

    # The cohort is full again: a run whose deadline passes while it waits leaves the queue.
    spawn(cluster, team_a, "late", deadlineSeconds=6)
    runs.settle("a run with a short deadline queued", state | {"late": "Queued"}, timeout=5)
    state |= {"late": "Failed"}
    runs.settle("its deadline passed in the queue", state, timeout=30)
    late = runs.workers()["late"]["status"]
    assert _condition(late, "Ready")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    assert "passed while it waited in LocalQueue agents" in late["error"]
    assert "late" not in runs.pods()  # its pod, and with it its Workload, are gone
    pending = cluster.kubectl_json("get", "clusterqueue", f"team-a-{tag}")["status"]
    assert pending.get("pendingWorkloads", 0) == 0

    # No run lost its pod or got a second one: one pod each, ever, for every run that ran.
    assert {name: len(uids) for name, uids in runs.pods_seen.items()} == dict.fromkeys(
        runs.pods_seen, 1
    )
    failed = [n for n, s in runs.standing().items() if s == "Failed"]
    assert failed == ["late"]  # no PodLost


def test_a_queue_name_is_refused_at_admission_naming_the_field_and_rule(
    cluster: Cluster, namespace: str
) -> None:
    bad = copy.deepcopy(AGENT)
    bad["spec"]["worker"]["queueName"] = "Team_A"
    refused = cluster.apply(namespace, bad, check=False)
    assert refused.returncode != 0 and "spec.worker.queueName" in refused.stderr, refused.stderr
    no_requests = copy.deepcopy(AGENT)
    del no_requests["spec"]["worker"]["resources"]
    refused = cluster.apply(namespace, no_requests, check=False)
    assert refused.returncode != 0
    assert "spec.worker.resources.requests: a queued run (queueName) needs cpu or memory" in (
        refused.stderr
    ), refused.stderr


def shows_where_it_waits(cluster: Cluster, runs: Runs, team_a: str, tag: str) -> None:
    """A queued run of A's, as its Worker's status and kubectl's table show it."""
    waiting = runs.workers()["a4"]["status"]
    queued = _condition(waiting, "Queued")
    assert queued is not None and queued["reason"] == "Pending", queued
    assert queued["message"].startswith("waiting in LocalQueue agents: Pending: "), queued
    assert "insufficient unused quota for cpu" in queued["message"], queued
    assert waiting["queue"] == "agents" and waiting.get("startedAt") is None
    table = cluster.kubectl("get", "workers", "-n", team_a).stdout.splitlines()
    row = next(line for line in table if line.startswith("a4 "))

    def cell(column: str) -> str:
        """The row's cell under `column` (kubectl aligns cells under their header)."""
        start = table[0].index(column)
        return row[start:].split("  ")[0].strip()

    assert (cell("PHASE"), cell("QUEUE")) == ("Pending", "agents")
    assert cell("LAST EVENT").startswith("waiting in LocalQueue agents: Pending: ")
    shown = {f.field: f for f in Client(cluster.api, team_a).explain("a4").pod}
    assert (shown["pod.queueName"].value, shown["pod.queueName"].layer) == (
        "agents",
        "AgentConfig/agents",
    )
    # Kueue's own view: A's ClusterQueue uses more than its nominal quota.
    usage = cluster.kubectl_json("get", "clusterqueue", f"team-a-{tag}")["status"]
    assert usage["flavorsUsage"][0]["resources"][0]["borrowed"] == NOMINAL
