"""The watch-fed store: trimmed copies, write-through that a late event cannot undo, indexes."""

from __future__ import annotations

from typing import Any

from agentworkers.kube.store import Store


def worker(name: str, rv: str, parent: str | None = None, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "agent": "planner",
        "queries": ["q" * 1000],
        "initialMessage": "hi",
        "inputs": [{"name": "a.md", "sha256": "0" * 64, "content": "eA==" * 1000}],
    }
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {
                "agentworkers.io/binding": "{}",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            },
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "recentEvents": [{"index": 1}],
            "output": "x" * 1000,
            **status,
        },
    }


def test_what_is_kept_is_what_a_reconcile_reads() -> None:
    store = Store()
    store.wrote("workers", worker("a", "5"))
    kept = store.get("workers", "ns", "a")
    assert kept is not None
    assert kept["spec"] == {"agent": "planner", "inputs": [{"name": "a.md", "sha256": "0" * 64}]}
    assert kept["status"] == {"phase": "Running"}
    assert kept["metadata"]["annotations"] == {"agentworkers.io/binding": "{}"}
    assert "managedFields" not in kept["metadata"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "6"},
        "spec": {"containers": [{"env": [{"name": "BIG", "value": "x" * 10000}]}]},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.2",
            "containerStatuses": [
                {
                    "name": "runtime",
                    "image": "agentworkers:0.1.0",
                    "state": {"running": {"startedAt": "2026-12-01T01:00:00Z"}},
                }
            ],
        },
    }
    store.wrote("pods", pod)
    running = {"name": "runtime", "state": {"running": {"startedAt": "2026-12-01T01:00:00Z"}}}
    assert store.get("pods", "ns", "a") == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "6"},
        "status": {"phase": "Running", "containerStatuses": [running]},
    }
    # Ended: how, for the run's error (`core.pods.failure`).
    pod["metadata"]["resourceVersion"] = "7"
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "runtime",
                "image": "agentworkers:0.1.0",
                "state": {
                    "terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "x"}
                },
            }
        ],
    }
    store.wrote("pods", pod)
    ended = {"name": "runtime", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
    assert store.get("pods", "ns", "a")["status"] == {  # type: ignore[index]
        "phase": "Failed",
        "containerStatuses": [ended],
    }


def test_a_late_event_does_not_undo_our_write() -> None:
    store = Store()
    store.wrote("workers", worker("a", "7", pod="a"))  # our status write, returned at 7
    store.wrote("workers", worker("a", "6"))  # the watch catches up late
    assert store.get("workers", "ns", "a")["status"]["pod"] == "a"  # type: ignore[index]
    store.wrote("workers", worker("a", "8"))
    assert "pod" not in store.get("workers", "ns", "a")["status"]  # type: ignore[index]


def test_indexes_follow_adds_moves_and_deletes() -> None:
    store = Store()
    for name, parent in (("p", None), ("c1", "p"), ("c2", "p"), ("g", "c1")):
        store.wrote("workers", worker(name, "1", parent))
    assert store.children("ns", "p") == ["c1", "c2"]
    assert store.children("ns", "c1") == ["g"]
    assert [w["metadata"]["name"] for w in store.of_agent("workers", "ns", "planner")] == [
        "c1", "c2", "g", "p",
    ]  # fmt: skip
    store.forget("workers", worker("c2", "2", "p"))
    assert store.children("ns", "p") == ["c1"]
    assert store.get("workers", "ns", "c2") is None
    store.forget("workers", worker("c1", "2", "p"))
    assert store.children("ns", "p") == []
    assert store.size("workers") == 2


def test_a_caller_cannot_change_what_is_kept() -> None:
    store = Store()
    store.wrote("workers", worker("a", "1"))
    copy = store.get("workers", "ns", "a")
    assert copy is not None
    copy["metadata"]["annotations"]["agentworkers.io/binding"] = "forged"
    copy["status"]["phase"] = "Done"
    kept = store.get("workers", "ns", "a")
    assert kept is not None
    assert kept["metadata"]["annotations"]["agentworkers.io/binding"] == "{}"
    assert kept["status"]["phase"] == "Running"


def test_an_event_is_news_unless_a_pass_has_seen_it_or_it_changes_nothing_kept() -> None:
    store = Store(judged=frozenset({"workers"}))
    store.observed("workers", worker("a", "5"))
    assert store.news("workers", "ns", "a")  # first heard of
    assert store.news("workers", "ns", "a")  # taken once: with none to judge, news
    # A change to what the store does not keep (the runtime's events and output): no news.
    store.observed("workers", worker("a", "6", output="more"))
    assert not store.news("workers", "ns", "a")
    # A pass writes version 7: its event is no news...
    store.wrote("workers", worker("a", "7", phase="Idle"))
    store.observed("workers", worker("a", "7", phase="Idle"))
    assert not store.news("workers", "ns", "a")
    # ... but what another writer did meanwhile is, even if the store has a later version.
    store.wrote("workers", worker("a", "9", phase="Done"))
    store.observed("workers", worker("a", "8", phase="Done", error="x"))
    assert store.news("workers", "ns", "a")
    store.observed("workers", worker("a", "9", phase="Done"))
    assert not store.news("workers", "ns", "a")
    store.observed("workers", worker("a", "10", phase="Failed"))
    assert store.news("workers", "ns", "a")


def test_every_version_a_pass_wrote_is_no_news_and_another_writer_s_between_is() -> None:
    store = Store(judged=frozenset({"workers"}))
    store.observed("workers", worker("a", "5"))
    store.wrote("workers", worker("a", "6", phase="Idle"))  # one pass, two writes
    store.wrote("workers", worker("a", "8", phase="Killed"))
    for version, phase, news in (("6", "Idle", False), ("7", "Idle", True), ("8", "Killed", False)):
        store.observed("workers", worker("a", version, phase=phase, error=version))
        assert store.news("workers", "ns", "a") is news, version


def test_only_judged_kinds_are_judged_and_forgetting_forgets_it_all() -> None:
    store = Store(judged=frozenset({"workers"}))
    config = {"metadata": {"name": "planner", "namespace": "ns", "resourceVersion": "1"}}
    store.wrote("agentconfigs", config)
    store.observed("agentconfigs", config)
    assert store.news("agentconfigs", "ns", "planner")  # never judged: always news
    store.observed("workers", worker("a", "5"))
    store.wrote("workers", worker("a", "6", phase="Idle"))
    store.forget("workers", worker("a", "6"))
    assert store.get("workers", "ns", "a") is None
    store.observed("workers", worker("a", "6", phase="Idle"))  # made again, same content
    assert store.news("workers", "ns", "a")


def test_a_pod_keeps_its_scheduling_gates_names_and_nothing_else_of_its_spec() -> None:
    store = Store()
    pod = {
        "metadata": {"name": "w", "namespace": "ns", "uid": "p", "resourceVersion": "1"},
        "spec": {
            "containers": [{"name": "agent", "env": [{"name": "X", "value": "y" * 1000}]}],
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        },
        "status": {"phase": "Pending"},
    }
    store.observed("pods", pod)
    assert store.get("pods", "ns", "w")["spec"] == {  # type: ignore[index]
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]
    }
    store.observed("pods", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"},
                            "spec": {"containers": []}})  # fmt: skip
    assert "spec" not in store.get("pods", "ns", "w")  # type: ignore[operator]


def _workload(name: str, rv: str, pod: str, created: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "creationTimestamp": created,
            "ownerReferences": [{"kind": "Pod", "name": pod, "uid": f"uid-{pod}"}],
        },
        "spec": {"podSets": [{"template": {"spec": {"containers": [{"name": "agent"}]}}}]},
        "status": status,
    }


def test_a_workload_is_kept_by_its_pod_with_only_kueue_s_word_on_it() -> None:
    store = Store()
    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "m"}
    noise = {"type": "PodsReady", "status": "False", "reason": "PodsReady", "message": "x"}
    store.observed(
        "workloads",
        _workload("pod-w-1", "1", "w", "2030-01-01T00:00:00Z", conditions=[pending, noise],
                  resourceRequests=[{"name": "main"}]),
    )  # fmt: skip
    kept = store.workload_of("ns", "w")
    assert kept is not None and kept["status"] == {"conditions": [pending]}
    assert "spec" not in kept
    assert store.workload_of("ns", "other") is None
    # Another pod of that name later (a new run of a name): the newest is the one.
    store.observed(
        "workloads",
        _workload("pod-w-2", "2", "w", "2030-01-01T00:01:00Z", admission={"clusterQueue": "cq"}),
    )
    assert store.workload_of("ns", "w")["status"]["admission"] == {"clusterQueue": "cq"}  # type: ignore[index]
    store.forget("workloads", _workload("pod-w-2", "3", "w", ""))
    store.forget("workloads", _workload("pod-w-1", "3", "w", ""))
    assert store.workload_of("ns", "w") is None


def test_a_deletion_forgets_only_what_is_no_newer_than_it() -> None:
    """A DELETED event given for an object a relisting no longer lists (kopf_fixes, 9)
    may arrive after a pass made a new one of its name: the new one stays."""
    store = Store()
    store.wrote("workers", worker("a", "10"))
    store.forget("workers", worker("a", "10"))
    assert store.get("workers", "ns", "a") is None
    store.wrote("workers", worker("a", "30"))
    store.forget("workers", worker("a", "20"))
    assert store.get("workers", "ns", "a") is not None


def test_what_a_listing_did_not_list_is_the_store_s_older_objects_it_lacks() -> None:
    store = Store()
    for name, rv in (("listed", "5"), ("gone", "6"), ("newer", "11"), ("opaque", "x")):
        store.wrote("workers", worker(name, rv))
    names = {
        b["metadata"]["name"] for b in store.unlisted("workers", "ns", {("ns", "listed")}, "10")
    }
    assert names == {"gone"}
    assert store.unlisted("workers", "other", set(), "10") == []
    assert {b["metadata"]["name"] for b in store.unlisted("workers", None, set(), "10")} == {
        "listed",
        "gone",
    }
    assert store.unlisted("workers", "ns", set(), "not-etcd") == []
    assert store.unlisted("namespaces", None, set(), "10") == []
