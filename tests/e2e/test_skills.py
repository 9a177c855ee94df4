"""Skills and run_command in real runs: the example skills shipped as ConfigMaps
(`kubectl apply -k examples/skills`), mounted in the sandbox of the runs that keep them,
and a skill's script run by a scripted model through run_command."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import Client
from tests.e2e.support import (
    CONFIG,
    PROFILES,
    Cluster,
    apply_example_skills,
    first_revision,
    reached,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("operator", "podrunner")

DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1 +1,2 @@\n-x = 1\n+x = 2\n+y = 3\n"


def skill_volumes(cluster: Cluster, namespace: str, pod: str) -> dict[str, str]:
    """Each ConfigMap the pod mounts, by where its container sees it."""
    spec = cluster.kubectl_json("get", "pod", pod, "-n", namespace)["spec"]
    maps = {v["name"]: v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
    mounts = spec["containers"][0]["volumeMounts"]
    return {maps[m["name"]]: m["mountPath"] for m in mounts if m["name"] in maps}


def results(client: Client, name: str, tool: str) -> list[str]:
    events = client.get(name).status.recent_events
    return [e.summary for e in events if e.kind == "tool_result" and e.summary.startswith(tool)]


def test_a_run_executes_a_skill_script_and_a_narrowed_child_has_only_its_skill(
    cluster: Cluster, namespace: str
) -> None:
    apply_example_skills(cluster, namespace)
    config = copy.deepcopy(CONFIG)
    # A skill without a ConfigMap: reported by the run, which goes on without it.
    config["spec"]["skills"] = [*config["spec"]["skills"], "ghost"]
    # Children follow the agent's script: the reviewer lists its skills, then answers.
    config["spec"]["model"]["script"] = [
        {"tool": "run_command", "args": {"command": ["ls", "-A", "skills"]}},
        {"reply": '{"verdict": "approve"}'},
    ]
    cluster.apply(namespace, *PROFILES, config)
    first_revision(cluster, namespace)
    client = Client(cluster.api, namespace)
    lead_script = [
        {"tool": "write_file", "args": {"path": "change.diff", "content": DIFF}},
        {
            "tool": "run_command",
            "args": {"command": ["sh", "skills/code-review/diffstat.sh", "change.diff"]},
        },
        {"tool": "run_command", "args": {"command": "./skills/research/search.sh 'y = 3'"}},
        {"tool": "read_file", "args": {"path": "skills/code-review/SKILL.md"}},
        {
            "tool": "spawn_worker",
            "args": {"name": "reviewer-1", "message": "review change.diff", "profile": "reviewer"},
        },
        {"reply": "reviewed"},
    ]
    client.spawn(
        "lead",
        WorkerSpec(agent="planner", initial_message="go", script=lead_script, interactive=True),
    )
    lead = wait_until(
        "the lead to be Idle",
        lambda: (info := client.get("lead")).status.phase in ("Idle", "Failed") and info,
        timeout=90,
    )
    assert (lead.status.phase, lead.status.output) == ("Idle", "reviewed"), lead.status.error

    # The script ran from the read-only mount, its output came back to the model.
    diffstat, search = results(client, "lead", "run_command")
    assert '"exit_code":0' in diffstat
    assert '"stdout":"app.py +2 -1\\n1 files, +2 -1\\n"' in diffstat
    assert '"stdout":"./change.diff:6:+y = 3\\n"' in search  # run as an executable (0555)
    (skill_md,) = results(client, "lead", "read_file")
    assert "name: code-review" in skill_md
    notices = [e.summary for e in lead.status.recent_events if e.kind == "notice"]
    assert len(notices) == 1 and notices[0].startswith("skill 'ghost' not loaded: no skills/ghost")
    assert skill_volumes(cluster, namespace, "lead") == {
        name: f"/sandbox/skills/{name}"
        for name in ("research", "summarise", "code-review", "translate", "ghost")
    }

    # The reviewer profile keeps code-review only: no other skill is in its pod or sandbox.
    reached(client, "reviewer-1", "Done")
    (listing,) = results(client, "reviewer-1", "run_command")
    assert '"stdout":"code-review\\n"' in listing, listing
    assert skill_volumes(cluster, namespace, "reviewer-1") == {
        "code-review": "/sandbox/skills/code-review"
    }
    logs = cluster.kubectl("logs", "reviewer-1", "-n", namespace).stdout
    kinds = [json.loads(line)["kind"] for line in logs.splitlines() if line.startswith("{")]
    assert "notice" not in kinds  # its one skill loaded


def test_run_command_is_not_offered_unless_listed(cluster: Cluster, namespace: str) -> None:
    config: dict[str, Any] = copy.deepcopy(CONFIG)
    config["spec"]["tools"] = ["read_file"]
    cluster.apply(namespace, *PROFILES, config)
    first_revision(cluster, namespace)
    client = Client(cluster.api, namespace)
    script = [{"tool": "run_command", "args": {"command": ["id"]}}, {"reply": "tried"}]
    client.spawn("plain", WorkerSpec(agent="planner", initial_message="go", script=script))
    reached(client, "plain", "Done")
    events = client.get("plain").status.recent_events
    (refused,) = [e.summary for e in events if e.kind == "tool_result"]
    assert refused == "run_command error: tool 'run_command' is not available to this run"
