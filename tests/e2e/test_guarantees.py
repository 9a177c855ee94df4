"""The profile guarantee against every client: a child runs under exactly the profile it
was bound to or not at all, and a profile only narrows, whoever writes what.

`kubectl` here is the cluster's admin, a client like any other; the operator runs with an
identity of its own. `cluster.as_operator` writes with the operator's credentials, which
admission cannot tell from the operator's own: what a client with the webhook off could
do, so the handlers' second line is tested too.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

import pytest

from agentworkers.client import Client
from tests.e2e.support import CONFIG, Cluster, Operator, wait_until
from tests.e2e.support import worker as _worker

pytestmark = pytest.mark.usefixtures("operator")

BINDING = "agentworkers.io/binding"


def _get(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", kind, name, "-n", namespace))


def _exists(cluster: Cluster, namespace: str, kind: str, name: str) -> bool:
    return cluster.kubectl("get", kind, name, "-n", namespace, check=False).returncode == 0


def _phase(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any]:
    return wait_until(
        f"worker {name} to be {phase}",
        lambda: (
            (s := _get(cluster, namespace, "worker", name).get("status", {})).get("phase") == phase
            and s
        ),
    )


def _bound(cluster: Cluster, namespace: str, name: str) -> str:
    return wait_until(
        f"{name} to be bound",
        lambda: (_get(cluster, namespace, "worker", name)["metadata"].get("annotations") or {}).get(
            BINDING
        ),
    )


def _failed_loud(cluster: Cluster, namespace: str, name: str, reason: str) -> dict[str, Any]:
    """Failed with the reason in its Ready condition, one Warning Event, and no pod."""
    status = _phase(cluster, namespace, name, "Failed")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == reason, ready
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"reason={reason}"
    )["items"]
    mine = [e for e in events if e["involvedObject"]["name"] == name]
    assert len(mine) == 1 and mine[0]["type"] == "Warning", mine
    assert not _exists(cluster, namespace, "pod", name)
    return status


def _resume(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.kubectl(
        "patch", "worker", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )


def _parent_and_two_bound_children(cluster: Cluster, namespace: str) -> tuple[str, str]:
    cluster.apply(namespace, _worker("parent", initialMessage="plan"))
    _phase(cluster, namespace, "parent", "Running")
    for name, profile in (("a", "translator"), ("b", "researcher")):
        cluster.apply(namespace, _worker(name, parent="parent", profile=profile, suspend=True))
    return _bound(cluster, namespace, "a"), _bound(cluster, namespace, "b")


def test_nobody_but_the_operator_writes_a_binding(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _, b_binding = _parent_and_two_bound_children(cluster, namespace)
    field = f"metadata.annotations[{BINDING}]"

    copied = cluster.kubectl(
        "annotate", "worker", "a", "-n", namespace, "--overwrite", f"{BINDING}={b_binding}",
        check=False,
    )  # fmt: skip
    assert copied.returncode != 0 and "TamperedBinding" in copied.stderr, copied.stderr
    assert f"{field}: only the operator writes a Worker's binding" in copied.stderr

    removed = cluster.kubectl(
        "annotate", "worker", "a", "-n", namespace, f"{BINDING}-", check=False
    )
    assert removed.returncode != 0 and field in removed.stderr

    carrying = _worker("c", parent="parent", profile="researcher")
    carrying["metadata"]["annotations"] = {BINDING: b_binding}
    created = cluster.apply(namespace, carrying, check=False)
    assert created.returncode != 0 and "cannot be set at creation" in created.stderr
    assert not _exists(cluster, namespace, "worker", "c")

    # Other annotations and the spec stay the user's to change.
    cluster.kubectl("annotate", "worker", "a", "-n", namespace, "team=docs")
    _resume(cluster, namespace, "a")
    _phase(cluster, namespace, "a", "Running")


def test_a_binding_copied_from_a_sibling_fails_the_run_start(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _, b_binding = _parent_and_two_bound_children(cluster, namespace)
    cluster.as_operator(
        "annotate", "worker", "a", "-n", namespace, "--overwrite", f"{BINDING}={b_binding}"
    )
    _resume(cluster, namespace, "a")
    status = _failed_loud(cluster, namespace, "a", "TamperedBinding")
    assert "key is 'researcher', but this Worker's is 'translator'" in status["error"]

    # A Worker created already carrying a copy never runs either.
    carrying = _worker("c", parent="parent", profile="translator")
    carrying["metadata"]["annotations"] = {BINDING: b_binding}
    cluster.as_operator("apply", "-n", namespace, "-f", "-", stdin=json.dumps(carrying))
    status = _failed_loud(cluster, namespace, "c", "TamperedBinding")
    assert status.get("binding") is None  # nothing of the copy was taken for its own


def test_a_removed_binding_fails_loud_and_is_never_written_again(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    a_binding, _ = _parent_and_two_bound_children(cluster, namespace)
    cluster.as_operator("annotate", "worker", "a", "-n", namespace, f"{BINDING}-")
    # Fails while still suspended: no resume is needed to find out.
    status = _failed_loud(cluster, namespace, "a", "TamperedBinding")
    assert "the binding annotation is gone" in status["error"]
    body = _get(cluster, namespace, "worker", "a")
    assert BINDING not in (body["metadata"].get("annotations") or {})
    assert json.loads(a_binding)["key"] == status["binding"]["key"] == "translator"


def test_a_run_below_a_profile_run_never_gets_more_than_it(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    cluster.apply(namespace, _worker("parent", initialMessage="plan"))
    _phase(cluster, namespace, "parent", "Running")
    cluster.apply(namespace, _worker("researcher", parent="parent", profile="researcher"))
    _phase(cluster, namespace, "researcher", "Running")
    # The researcher's runtime spawns a helper with no profile, asking for everything.
    cluster.apply(
        namespace, _worker("helper", parent="researcher", skills=["research", "translate"])
    )
    status = _phase(cluster, namespace, "helper", "Running")
    assert status["inherited"] == {"worker": "researcher", "profile": "researcher"}

    pod = _get(cluster, namespace, "pod", "helper")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    effective = json.loads(env["AGENTWORKERS_EFFECTIVE_CONFIG"])
    assert effective["skills"] == ["research"]  # translate is not the researcher's
    assert "write_file" not in effective["tools"] and "write_file" in effective["disabledTools"]
    assert effective["maxSteps"] == 20 and effective["temperature"] == 0.3
    assert effective["inherited"] == {"worker": "researcher", "profile": "researcher"}

    header, row = cluster.kubectl("get", "workers", "helper", "-n", namespace).stdout.splitlines()
    at = header.index("INHERITS")
    assert row[at:].split()[0] == "researcher", (header, row)

    explained = Client(cluster.api, namespace).explain("helper")
    assert explained.inherits == "profile 'researcher' of worker researcher"
    layers = {f.field: f.layer for f in explained.fields}
    assert layers["maxSteps"] == layers["skills"] == layers["temperature"] == "inherited"

    # Below a profile run, no profile: the grandchild may not widen through one either.
    refused = cluster.apply(
        namespace, _worker("deeper", parent="helper", profile="reviewer"), check=False
    )
    assert refused.returncode != 0 and "ProfileRecursion" in refused.stderr
    assert "runs below the virtual-profile run researcher" in refused.stderr


def _profile(name: str, key: str) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "VirtualAgentProfile",
        "metadata": {"name": name},
        "spec": {"agent": "planner", "key": key, "overlay": {"maxSteps": 5}},
    }


def _accepted(body: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (c for c in body.get("status", {}).get("conditions", []) if c["type"] == "Accepted"), None
    )


def test_a_burst_of_profiles_fills_the_cap_oldest_first_and_the_agent_stays_ready(
    cluster: Cluster, namespace: str
) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["virtualAgents"]["maxProfiles"] = 3  # the section's reviewer is one
    cluster.apply(namespace, config)
    wait_until("revision 1", lambda: _get(cluster, namespace, "ac", "planner").get("status"))
    names = [f"burst-{i}" for i in range(10)]
    results: dict[str, int] = {}

    def create(name: str) -> None:
        results[name] = cluster.apply(namespace, _profile(name, name), check=False).returncode

    threads = [threading.Thread(target=create, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    persisted = [n for n in names if results[n] == 0]
    assert len(persisted) >= 2, results

    def settled() -> list[dict[str, Any]] | None:
        bodies = [_get(cluster, namespace, "vap", n) for n in persisted]
        return bodies if all(_accepted(b) for b in bodies) else None

    bodies = wait_until("every persisted profile to be told", settled)
    bodies.sort(key=lambda b: (b["metadata"]["creationTimestamp"], b["metadata"]["name"]))
    verdicts = [(_accepted(b) or {}).get("reason") for b in bodies]
    assert verdicts == ["Included", "Included"] + ["TooManyProfiles"] * (len(bodies) - 2)
    left_out = bodies[2:]
    for body in left_out:
        assert "maximum of 3 profiles" in (_accepted(body) or {})["message"]
    status = wait_until(
        "the agent on a full map",
        lambda: (
            (s := _get(cluster, namespace, "ac", "planner")["status"]).get("profiles") == 3 and s
        ),
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready


def test_a_lowered_cap_leaves_the_newest_profiles_out_until_one_goes(
    cluster: Cluster, namespace: str
) -> None:
    config = copy.deepcopy(CONFIG)  # the section's reviewer, plus four standalone profiles
    cluster.apply(namespace, config)
    for i in range(4):
        cluster.apply(namespace, _profile(f"p{i}", f"k{i}"))
        time.sleep(1.1)  # creation times a second apart: the order is theirs, not the names'
    wait_until("five profiles", lambda: _get(cluster, namespace, "ac", "planner")
               .get("status", {}).get("profiles") == 5)  # fmt: skip
    config["spec"]["virtualAgents"]["maxProfiles"] = 3
    cluster.apply(namespace, config)

    def verdicts(first: int = 0) -> dict[str, str | None]:
        return {
            f"p{i}": (_accepted(_get(cluster, namespace, "vap", f"p{i}")) or {}).get("reason")
            for i in range(first, 4)
        }

    expected = {
        "p0": "Included",
        "p1": "Included",
        "p2": "TooManyProfiles",
        "p3": "TooManyProfiles",
    }
    wait_until("the two newest left out", lambda: verdicts() == expected)
    status = _get(cluster, namespace, "ac", "planner")["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and status["profiles"] == 3
    assert "left out of its map: p2 (TooManyProfiles), p3 (TooManyProfiles)" in ready["message"]

    # Not blocked: deleting an included profile lets the next oldest in.
    cluster.kubectl("delete", "vap", "p0", "-n", namespace)
    wait_until("p2 to be included", lambda: verdicts(1).get("p2") == "Included")
    assert verdicts(1)["p3"] == "TooManyProfiles"


def test_names_too_long_for_a_label_are_refused_not_left_hanging(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    long_name = "w" * 70
    for body in (_worker(long_name), {**copy.deepcopy(CONFIG), "metadata": {"name": long_name}}):
        refused = cluster.apply(namespace, body, check=False)
        assert refused.returncode != 0
        assert "metadata.name: Too long: may not be more than 63" in refused.stderr, refused.stderr
    assert not _exists(cluster, namespace, "worker", long_name)
    assert not _exists(cluster, namespace, "ac", long_name)
    cluster.apply(namespace, _worker("w" * 63))
    _phase(cluster, namespace, "w" * 63, "Running")


def test_byte_bounds_count_utf8_bytes(cluster: Cluster, namespace: str) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["instructions"] = "é" * 8193  # 8,193 characters, 16,386 bytes
    refused = cluster.apply(namespace, config, check=False)
    assert refused.returncode != 0
    assert "spec.instructions" in refused.stderr and "16384 bytes" in refused.stderr
    config["spec"]["instructions"] = "é" * 8192  # exactly 16,384 bytes
    cluster.apply(namespace, config)


def test_a_graceful_restart_leaves_admission_closed_not_open(
    cluster: Cluster, namespace: str, planner: dict[str, Any], operator: Operator
) -> None:
    cluster.apply(namespace, _worker("parent", initialMessage="plan"))
    _phase(cluster, namespace, "parent", "Running")
    bad = [  # each passes the CRD schema; only admission refuses it
        lambda i: _worker(f"bad-{i}", parent="parent", profile="no-such-profile"),
        lambda i: {**_profile(f"bad-{i}", "k"), "spec": {"agent": "planner", "key": "k",
                                                            "overlay": {"providers": ["x"]}}},
    ]  # fmt: skip
    stop = threading.Event()
    submitted: list[str] = []
    accepted: list[str] = []

    def keep_submitting() -> None:
        i = 0
        while not stop.is_set():
            body = bad[i % len(bad)](i)
            submitted.append(body["metadata"]["name"])
            if cluster.apply(namespace, body, check=False).returncode == 0:
                accepted.append(body["metadata"]["name"])
            i += 1

    client = threading.Thread(target=keep_submitting)
    client.start()
    try:
        for _ in range(3):
            operator.restart(cluster)
            time.sleep(0.5)
    finally:
        stop.set()
        client.join()
    assert len(submitted) > 10 and not accepted, accepted
    hooks = cluster.kubectl_json("get", "validatingwebhookconfiguration", operator.webhook_name)
    assert hooks["webhooks"] and all(h["failurePolicy"] == "Fail" for h in hooks["webhooks"])
    persisted = {
        b["metadata"]["name"]
        for kind in ("workers", "vap")
        for b in cluster.kubectl_json("get", kind, "-n", namespace)["items"]
    }
    assert not persisted & set(submitted)
