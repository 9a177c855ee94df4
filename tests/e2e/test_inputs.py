"""Inputs end to end: a parent's runtime writes a file, spawns children under profiles with
it as an input, and each child takes it as its profile says; spawns past a profile's
inputCount or inputPatterns are refused at admission, naming the rule. Real runs: the
runtime in worker pods (the local pod runner), scripted models."""

from __future__ import annotations

import copy

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import Client
from tests.e2e.support import CONFIG, PROFILES, Cluster, first_revision, reached, wait_until

pytestmark = pytest.mark.usefixtures("operator", "podrunner")

PLAN = "# The plan\nstep one: gather the sources\n"
# Standalone profile of the planner that gives its one Markdown input inline.
DIGEST = {
    "apiVersion": "agentworkers.io/v1alpha1",
    "kind": "VirtualAgentProfile",
    "metadata": {"name": "planner-digest"},
    "spec": {
        "agent": "planner",
        "key": "digest",
        "inputPatterns": ["*.md"],
        "inputCount": 1,
        "inputDisposition": "inline",
    },
}
# What every child runs: given its input inline, it says so at once; given it as a file,
# it reads it.
CHILD_SCRIPT = [
    {"match": "<input name='plan.md'>", "reply": "saw the plan inline"},
    {"tool": "read_file", "args": {"path": "inputs/plan.md"}},
    {"reply": "read the plan"},
]
PARENT_SCRIPT = [
    {"tool": "write_file", "args": {"path": "notes/plan.md", "content": PLAN}},
    {"tool": "write_file", "args": {"path": "run.sh", "content": "echo hi\n"}},
    {
        "tool": "spawn_worker",
        "args": {
            "name": "kid-files",
            "message": "research this",
            "profile": "researcher",
            "inputs": ["notes/plan.md"],
        },
    },
    {
        "tool": "spawn_worker",
        "args": {
            "name": "kid-script",
            "message": "run this",
            "profile": "researcher",
            "inputs": ["run.sh"],
        },
    },
    {
        "tool": "spawn_worker",
        "args": {
            "name": "kid-translate",
            "message": "translate this",
            "profile": "translator",
            "inputs": ["notes/plan.md"],
        },
    },
    {
        "tool": "spawn_worker",
        "args": {
            "name": "kid-inline",
            "message": "digest this",
            "profile": "digest",
            "inputs": ["notes/plan.md"],
        },
    },
    {"reply": "done"},
]


def test_a_parent_hands_a_file_to_its_children_within_their_profiles(
    cluster: Cluster, namespace: str
) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["model"]["script"] = CHILD_SCRIPT
    cluster.apply(namespace, *PROFILES, DIGEST, config)
    wait_until(
        "the digest profile in the map",
        lambda: (
            first_revision(cluster, namespace)
            and any(
                p["profile"]["key"] == "digest"
                for r in cluster.kubectl_json("get", "acr", "-n", namespace)["items"]
                for p in r["spec"]["profileMap"].get("profiles", [])
            )
        ),
    )
    client = Client(cluster.api, namespace)
    client.spawn("lead", WorkerSpec(agent="planner", initial_message="plan", script=PARENT_SCRIPT))
    lead = reached(client, "lead", "Done")
    results = [e.summary for e in lead.status.recent_events if e.kind == "tool_result"]

    # Past the bounds: refused at admission, by rule and profile; nothing persisted.
    assert any(
        "InputNotAllowed" in r
        and "'run.sh' (application/x-sh) matches no inputPatterns of profile 'researcher'" in r
        for r in results
    ), results
    assert any(
        "InputNotAllowed" in r and "1 inputs exceeds inputCount 0 of profile 'translator'" in r
        for r in results
    ), results
    for refused in ("kid-script", "kid-translate"):
        gone = cluster.kubectl("get", "worker", refused, "-n", namespace, check=False)
        assert gone.returncode != 0, refused

    # Within them: the file, as a file (attachment, the normal policy) ...
    files = reached(client, "kid-files", "Done")
    assert files.spec.kind == "dynamic"
    assert [i.name for i in files.spec.inputs] == ["plan.md"]
    assert files.status.output == "read the plan"
    # The run's events reach its status in batches: the last may land just after Done.
    wait_until(
        "kid-files's read of its input in its events",
        lambda: any(
            e.kind == "tool_result" and "step one: gather the sources" in e.summary
            for e in client.get("kid-files").status.recent_events
        ),
        timeout=30,
    )
    # ... and inline, in the first message.
    assert reached(client, "kid-inline", "Done").status.output == "saw the plan inline"
