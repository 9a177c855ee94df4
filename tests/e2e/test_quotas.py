"""TokenQuota on a real API server: a burst of sixteen spawns admits exactly what fits, the
refusal names the quota, its use, its limit and its reset; usage summed onto the quota's
status survives the collection of the runs that spent it and an operator SIGKILL."""

from __future__ import annotations

import json
import threading
from typing import Any

import kubernetes
import pytest

from agentworkers.api import GROUP, VERSION
from tests.e2e.support import CONFIG, Cluster, Operator, wait_until, worker
from tests.e2e.test_cli import cli, cli_json, report

pytestmark = pytest.mark.usefixtures("operator", "planner")

BUDGET = int(CONFIG["spec"]["limits"]["tokenBudget"])  # each planner run's own budget
LIMIT = 6 * BUDGET + BUDGET // 2  # room for six runs, not seven


def quota(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = kubernetes.client.CustomObjectsApi(
        cluster.api
    ).get_namespaced_custom_object(GROUP, VERSION, namespace, "tokenquotas", "team")
    return found


def spawn(cluster: Cluster, namespace: str, name: str) -> str | None:
    """Create a Worker as any client would; the refusal's message, or None."""
    try:
        kubernetes.client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "workers", worker(name, initialMessage="hi")
        )
    except kubernetes.client.exceptions.ApiException as e:
        return str(json.loads(e.body)["message"])
    return None


def test_a_quota_admits_what_fits_and_its_usage_outlives_runs_and_operator(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    cluster.apply(
        namespace,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TokenQuota",
            "metadata": {"name": "team"},
            "spec": {"tokens": LIMIT, "window": "Day"},
        },
    )
    wait_until(
        "the quota in the operator's store, its window summed",
        lambda: (quota(cluster, namespace).get("status") or {}).get("resetsAt"),
        timeout=30,
    )

    # Sixteen at once: exactly six fit (the store sees none of them while they are admitted).
    answers: list[str | None] = []
    gate = threading.Barrier(16)

    def one(i: int) -> None:
        gate.wait()
        answers.append(spawn(cluster, namespace, f"w{i:02d}"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    refusals = [a for a in answers if a]
    assert len(answers) == 16 and answers.count(None) == 6, refusals
    assert all("TokenQuotaExceeded" in a for a in refusals), refusals
    assert (
        f"TokenQuota 'team' has {BUDGET // 2} of its {LIMIT} tokens per day left "
        f"(0 used, {6 * BUDGET} held by live runs), less than this run's tokenBudget {BUDGET}"
    ) in refusals[0]
    assert "the window resets at " in refusals[0]
    admitted = sorted(w["name"] for w in cli_json(cluster, namespace, "list")["items"])
    assert len(admitted) == 6

    # Two runs report what they used and settle; the operator sums it onto the quota.
    spent = {admitted[0]: 1200, admitted[1]: 34}
    for name, tokens in spent.items():
        wait_until(
            f"{name} running",
            lambda n=name: (
                cli_json(cluster, namespace, "inspect", n)["worker"]["status"].get("phase")
                == "Running"
            ),
        )
        report(cluster, namespace, name, phase="Idle", output="ok", tokensUsed={"prompt": tokens})
    wait_until(
        "the quota to count what the two runs used",
        lambda: quota(cluster, namespace)["status"].get("used") == sum(spent.values()),
        timeout=30,
    )
    table = cluster.kubectl("get", "tokenquotas", "-n", namespace).stdout
    assert table.split()[:8] == [
        "NAME", "AGENT", "WINDOW", "LIMIT", "USED", "RESERVED", "REMAINING", "RESETS",
    ]  # fmt: skip
    assert "agentworkers_token_quota_tokens" in operator.metrics()

    # Collected: their tokens stay used, their reservations are freed.
    for name in spent:
        cli(cluster, namespace, "collect", name, "--timeout", "60")
    operator.crash(cluster)  # SIGKILL: nothing but the quota's status remembers
    wait_until(
        "the quota summed again after the restart, the collected runs dropped",
        lambda: (
            quota(cluster, namespace)["status"].get("counted") == {}
            and quota(cluster, namespace)["status"].get("reserved") == 4 * BUDGET
        ),
        timeout=60,
    )
    status = quota(cluster, namespace)["status"]
    assert status["used"] == sum(spent.values())
    shown = cli_json(cluster, namespace, "quota")["items"]
    assert [(q["name"], q["used"], q["reserved"]) for q in shown] == [
        ("team", sum(spent.values()), 4 * BUDGET)
    ]
    # What two collections freed, less what they used: two more fit, not three.
    left = LIMIT - sum(spent.values()) - 4 * BUDGET
    assert left // BUDGET == 2
    assert spawn(cluster, namespace, "again-1") is None
    assert spawn(cluster, namespace, "again-2") is None
    refused = spawn(cluster, namespace, "again-3")
    assert refused is not None and "TokenQuotaExceeded" in refused

    # The window runs out mid-run: no run is stopped (each holds its budget); spawns wait
    # for the next window.
    live = sorted(set(admitted) - set(spent))[0]
    report(cluster, namespace, live, tokensUsed={"prompt": BUDGET})
    wait_until(
        "the quota to count the run's whole budget",
        lambda: quota(cluster, namespace)["status"].get("used") == sum(spent.values()) + BUDGET,
        timeout=30,
    )
    assert cli_json(cluster, namespace, "inspect", live)["worker"]["status"]["phase"] == "Running"
    assert "kill" not in cli_json(cluster, namespace, "inspect", live)["worker"]["spec"]
    late = spawn(cluster, namespace, "late")
    assert late is not None and "the window resets at " in late
