#!/usr/bin/env python3
"""The demo: agentworkers on a real local control plane, start to finish.

    make demo

1. Brings the local control plane up (building it on first use) and installs the CRDs.
2. Runs the operator (with its admission webhook) and the local pod runner.
3. Applies the example skills, and the example agent "planner" with virtual-agent
   profiles through both doors.
4. Runs a planner worker that runs a skill's script with run_command, spawns two children
   with different profiles, collects their outputs, and answers; kills another worker
   with a reason.
5. Runs a worker that calls an MCP tool: the published mcp-server-time behind mcp-proxy
   on loopback, as a stdio server runs behind a Service.
6. Prints a summary: workers, phases, profile hashes, the kill Event.

The workers use the scripted model by default. With an OpenAI-compatible endpoint
(AGENTWORKERS_OPENAI_BASE_URL, AGENTWORKERS_OPENAI_MODEL, and AGENTWORKERS_API_KEY if
it needs one) the same agents talk to a real model instead.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.e2e.support: the same operator launcher the tests use

from tests.e2e.support import (  # noqa: E402
    Cluster,
    Operator,
    first_revision,
    local_cluster,
    pod_runner,
)
from tests.mcp_servers import time_server  # noqa: E402

from agentworkers.api import WorkerSpec  # noqa: E402
from agentworkers.client import Client, WorkerFinishedError  # noqa: E402

NAMESPACE = "agentworkers-demo"
BOLD, DIM, RESET = "\033[1m", "\033[2m", "\033[0m"

CHILD_SCRIPT = [
    {"match": "review", "reply": '{"verdict": "approve"}'},
    {"match": "research", "reply": "Three sources agree: the cache is the bottleneck."},
    {"reply": "working on it"},
]
CACHE_DIFF = (
    "--- a/cache.py\n+++ b/cache.py\n@@ -1,2 +1,3 @@\n-TTL = 60\n+TTL = 300\n"
    "+MAX_ENTRIES = 10_000\n"
)
PLANNER_SCRIPT = [
    {"thought": "First the shape of the change, with the code-review skill's script."},
    {"tool": "write_file", "args": {"path": "cache.diff", "content": CACHE_DIFF}},
    {
        "tool": "run_command",
        "args": {"command": ["sh", "skills/code-review/diffstat.sh", "cache.diff"]},
    },
    {"thought": "Two specialists: a reviewer and a researcher."},
    {
        "tool": "spawn_worker",
        "args": {
            "name": "demo-reviewer",
            "message": "review the cache diff",
            "profile": "reviewer",
        },
    },
    {
        "tool": "spawn_worker",
        "args": {
            "name": "demo-researcher",
            "message": "research cache misses",
            "profile": "researcher",
        },
    },
    {"tool": "collect_worker", "args": {"name": "demo-reviewer", "timeout": 120}},
    {"tool": "collect_worker", "args": {"name": "demo-researcher", "timeout": 120}},
    {"reply": "Plan done: the diff is approved, and research points at the cache."},
]


def step(title: str) -> None:
    print(f"\n{BOLD}== {title}{RESET}", flush=True)


def main() -> int:
    step("Local control plane")
    cluster = local_cluster()

    def kubectl(*args: str, stdin: str | None = None) -> str:
        print(f"{DIM}$ kubectl {' '.join(args)}{RESET}", flush=True)
        out = cluster.kubectl(*args, stdin=stdin).stdout.rstrip()
        if out:
            print(out, flush=True)
        return out

    kubectl("get", "nodes")
    kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "-f", str(REPO / "crds"))
    cluster.kubectl(
        "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s"
    )
    cluster.kubectl("create", "namespace", NAMESPACE)

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        step("Operator and local pod runner")
        containers = in_containers()
        with (
            Operator.start(cluster, workdir, f"--namespace={NAMESPACE}") as operator,
            pod_runner(cluster, NAMESPACE, workdir / "pods", None, containers) as runner,
        ):
            where = (
                "in runc containers from the image hack/image.py builds"
                if containers
                else "as local processes (containers need root, runc and nftables)"
            )
            print(
                f"operator pid {operator.process.pid}, metrics {operator.metrics_url}; "
                f"pod runner pid {runner.pid}: workers run {where}"
            )
            return demo(cluster, kubectl)


def in_containers() -> bool:
    """Whether the workers run in containers (docs/guarantees.md): where this machine can
    (root, runc, nftables) and the model is the scripted one (a real model's endpoint is
    off this machine, where the local pod network leads nowhere)."""
    tools = all(shutil.which(t) for t in ("runc", "nft"))
    return os.geteuid() == 0 and tools and not os.environ.get("AGENTWORKERS_OPENAI_BASE_URL")


def configured(cluster: Cluster, config: dict[str, Any]) -> dict[str, Any]:
    """The example agent, scripted, or pointed at a real model when the environment says so
    (its key goes into a Secret, which every worker pod of the agent mounts)."""
    config = copy.deepcopy(config)
    base_url = os.environ.get("AGENTWORKERS_OPENAI_BASE_URL")
    if base_url:
        config["spec"]["model"].update(
            provider="openai",
            baseURL=base_url,
            model=os.environ.get("AGENTWORKERS_OPENAI_MODEL", "gpt-4o-mini"),
        )
        key = os.environ.get("AGENTWORKERS_API_KEY")
        if key:
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "model-key"},
                "stringData": {"apiKey": key},
            }
            cluster.apply(NAMESPACE, secret)
            config["spec"]["model"]["apiKeySecret"] = "model-key"
    else:
        config["spec"]["model"]["script"] = CHILD_SCRIPT
    return config


def _worker(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name},
        "spec": spec,
    }


def budget_demo(cluster: Cluster, client: Client, config: dict[str, Any], kubectl: Any) -> None:
    step("A tree stopped by its token budget (a second agent, spec.tree.tokenBudget: 1500)")
    spender = copy.deepcopy(config)
    spender["metadata"] = {"name": "spender"}
    spender["spec"].pop("virtualAgents", None)
    spender["spec"].update(
        # Scripted, whatever the planner talks to: each call reads 300 words of instructions.
        model={
            "provider": "scripted",
            "model": "demo-small",
            "script": [{"match": ".", "reply": "noted"}],
        },
        instructions="ponder " * 300,
        skills=[],  # no skills listed in the prompt: every call reads the 300 words only
        limits={"maxSteps": 10},
        tree={"tokenBudget": 1500},
    )
    kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(spender))
    first_revision(cluster, NAMESPACE, "spender")
    client.spawn("demo-lead", WorkerSpec(agent="spender", initial_message="lead", interactive=True))
    client.wait("demo-lead", frozenset({"Idle"}), timeout=60)
    for name in ("demo-helper-1", "demo-helper-2"):
        spec = WorkerSpec(
            agent="spender", parent="demo-lead", initial_message="go", interactive=True
        )
        client.spawn(name, spec)
        client.wait(name, frozenset({"Idle"}), timeout=60)
    for i in range(6):  # each query's call reads the whole conversation again
        try:
            client.query("demo-helper-1", f"and more {i}")
            client.wait("demo-helper-1", frozenset({"Idle", "Killed"}), timeout=60)
        except WorkerFinishedError:
            break
    client.wait("demo-helper-2", frozenset({"Killed"}), timeout=60)
    kubectl(
        "get", "events", "-n", NAMESPACE, "--field-selector", "reason=TreeBudgetExhausted",
        "-o", "custom-columns=OBJECT:.involvedObject.name,MESSAGE:.message",
    )  # fmt: skip
    tree = client.get("demo-lead").status.tree
    if tree is not None:
        print(f"demo-lead's tree: {tree.tokens_used} of {tree.token_budget} tokens used")


def mcp_demo(cluster: Cluster, client: Client, config: dict[str, Any], kubectl: Any) -> bool:
    step("A worker calls an MCP tool (mcp-server-time, a stdio server, behind mcp-proxy)")
    with time_server() as url:
        clock = copy.deepcopy(config)
        clock["metadata"] = {"name": "clock"}
        clock["spec"].pop("virtualAgents", None)
        clock["spec"].update(
            model={"provider": "scripted", "model": "demo-small"},
            mcpServers=[{"name": "time", "url": url, "tools": ["get_current_time"]}],
        )
        kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(clock))
        first_revision(cluster, NAMESPACE, "clock")
        script = [
            {"tool": "time__get_current_time", "args": {"timezone": "Europe/Paris"}},
            {"reply": "That is the time in Paris."},
        ]
        ask = "What time is it in Paris?"
        client.spawn("demo-clock", WorkerSpec(agent="clock", initial_message=ask, script=script))
        found = client.wait("demo-clock", frozenset({"Done", "Failed"}), timeout=120)
    for event in found.status.recent_events:
        print(f"  {DIM}#{event.index:<3} {event.kind:18} {event.summary[:110]}{RESET}")
    for row in client.explain("demo-clock").mcp:
        print(f"explain: {row.field} = {row.value}")
    return found.status.phase == "Done"


def demo(cluster: Cluster, kubectl: Any) -> int:
    examples = REPO / "examples"
    step("Profiles through both doors: two standalone VirtualAgentProfiles, one in the AgentConfig")
    config = configured(cluster, yaml.safe_load((examples / "agentconfig.yaml").read_text()))
    config["spec"]["tree"] = {"maxDepth": 1, "maxChildren": 8, "maxLiveDescendants": 20}
    kubectl("apply", "-n", NAMESPACE, "-k", str(examples / "skills"))
    kubectl("apply", "-n", NAMESPACE, "-f", str(examples / "virtualagentprofiles.yaml"))
    kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(config))
    first_revision(cluster, NAMESPACE)
    time.sleep(1)
    kubectl("get", "agentworkers", "-n", NAMESPACE)

    step("A profile that would widen is refused at the door")
    bad = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "VirtualAgentProfile",
        "metadata": {"name": "planner-rogue"},
        "spec": {"agent": "planner", "key": "rogue", "overlay": {"providers": ["anything"]}},
    }
    refused = cluster.kubectl(
        "apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(bad), check=False
    )
    print(refused.stderr.strip())

    client = Client(cluster.api, NAMESPACE)
    step("A planner runs a skill's script, then spawns two children with different profiles")
    script = None if os.environ.get("AGENTWORKERS_OPENAI_BASE_URL") else PLANNER_SCRIPT
    client.spawn(
        "demo-planner",
        WorkerSpec(
            agent="planner", initial_message="Review and research the cache change.", script=script
        ),
    )
    client.spawn(
        "demo-idler", WorkerSpec(agent="planner", initial_message="stand by", interactive=True)
    )
    planner = client.wait("demo-planner", frozenset({"Done", "Failed"}), timeout=180)
    print(f"planner: {planner.status.phase}: {planner.status.output or planner.status.error}")
    for event in planner.status.recent_events:
        print(f"  {DIM}#{event.index:<3} {event.kind:18} {event.summary[:110]}{RESET}")

    step("A tree refused past its depth (the AgentConfig's spec.tree.maxDepth: 1)")
    for name, parent in (("demo-root", None), ("demo-child", "demo-root")):
        spec = {
            "agent": "planner",
            "initialMessage": "delegate",
            **({"parent": parent} if parent else {}),
        }
        kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(_worker(name, spec)))
    deep = _worker("demo-grandchild", {"agent": "planner", "parent": "demo-child"})
    refused = cluster.kubectl(
        "apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(deep), check=False
    )
    print(refused.stderr.strip())

    budget_demo(cluster, client, config, kubectl)
    called = mcp_demo(cluster, client, config, kubectl)

    step("Kill a worker with a reason")
    client.wait("demo-idler", frozenset({"Idle"}), timeout=60)
    client.kill("demo-idler", reason="the demo no longer needs it", by="demo")
    killed = client.collect("demo-idler", timeout=60)
    print(f"collect demo-idler -> phase {killed.phase}, error {killed.error!r}")

    step("Summary")
    revision = cluster.kubectl_json("get", "ac", "planner", "-n", NAMESPACE)["status"][
        "activeRevision"
    ]
    print(
        f"AgentConfig planner: revision {revision['revision']} ({revision['name']}), "
        f"digest {revision['digest'][:16]}…"
    )
    frozen = cluster.kubectl_json("get", "acr", revision["name"], "-n", NAMESPACE)["spec"][
        "profileMap"
    ]["profiles"]
    for p in frozen:
        print(f"  profile {p['profile']['key']:11} hash {p['hash'][:16]}…  from {p['source']}")
    kubectl("get", "workers", "-n", NAMESPACE, "-o", "wide")
    events = cluster.kubectl_json(
        "get", "events", "-n", NAMESPACE, "--field-selector", "reason=Killed"
    )["items"]
    for e in events:
        print(
            f"Event {e['type']} {e['reason']} on "
            f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['message']}"
        )
    print(
        f"\nThe cluster keeps running: export KUBECONFIG={cluster.kubeconfig}; "
        f"kubectl is in {cluster.bin_dir}. `make cluster-down` stops it."
    )
    return 0 if planner.status.phase == "Done" and killed.phase == "Killed" and called else 1


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"{DIM}(demo took {time.monotonic() - started:.0f}s){RESET}")
    sys.exit(code)
