"""GitOps: the Argo CD health checks (run in a real Lua runtime when lupa is installed),
kept the same in docs/gitops.md, health/*.lua and the argocd-cm patch; the kustomize
layout renders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
GITOPS = REPO / "examples" / "gitops"
HEALTH = GITOPS / "argocd" / "health"
DOC = REPO / "docs" / "gitops.md"
KINDS = {
    "Worker": "worker.lua",
    "AgentConfig": "agentconfig.lua",
    "VirtualAgentProfile": "virtualagentprofile.lua",
}


def script(kind: str) -> str:
    return (HEALTH / KINDS[kind]).read_text()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_same_script_everywhere(kind: str) -> None:
    cm = yaml.safe_load((GITOPS / "argocd" / "argocd-cm.yaml").read_text())
    key = f"resource.customizations.health.agentworkers.io_{kind}"
    assert cm["data"][key].strip() == script(kind).strip()
    doc = DOC.read_text()
    section = re.search(rf"### {re.escape(key)}\n+```lua\n(.*?)```", doc, re.S)
    assert section, f"docs/gitops.md has no Lua block for {key}"
    assert section.group(1).strip() == script(kind).strip()


# --- the scripts, run -------------------------------------------------------------


def health(kind: str, obj: dict[str, Any]) -> tuple[str, str]:
    lupa = pytest.importorskip("lupa", reason="the Lua runtime (pip install lupa)")
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)

    def convert(value: Any) -> Any:
        # Argo CD hands the script the object as Lua tables; lists are 1-indexed tables.
        if isinstance(value, dict):
            return lua.table_from({k: convert(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([convert(v) for v in value])
        return value

    lua.globals().obj = convert(obj)
    result = lua.execute(script(kind))
    return str(result["status"]), str(result["message"] or "")


def worker(phase: str | None = None, ready: str | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "w", "generation": 1}}
    if phase or ready or status:
        body["status"] = {"observedGeneration": 1, **status}
        if phase:
            body["status"]["phase"] = phase
        if ready:
            body["status"]["conditions"] = [
                {"type": "Ready", "status": ready, "reason": "Why", "message": "because"}
            ]
    return body


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (worker(), "Progressing"),
        (worker("Pending", "False"), "Progressing"),
        (worker("Running", "True"), "Healthy"),
        (worker("Idle", "True"), "Healthy"),
        (worker("Done", "False"), "Healthy"),
        (worker("Failed", "False", error="StaleProfilePin: the revision moved"), "Degraded"),
        (worker("Killed", "False", error="by alice: runaway"), "Degraded"),
        (worker(None, "True"), "Healthy"),
        ({**worker("Running", "True"), "metadata": {"generation": 2}}, "Progressing"),
    ],
)
def test_worker_health(obj: dict[str, Any], expected: str) -> None:
    status, message = health("Worker", obj)
    assert status == expected, message
    if "error" in obj.get("status", {}):
        assert obj["status"]["error"] in message


def config(ready: str | None, observed: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "planner", "generation": 1}}
    if ready:
        body["status"] = {
            "observedGeneration": observed,
            "conditions": [
                {"type": "RevisionCurrent", "status": ready, "reason": "X", "message": "x"},
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "RevisionActive" if ready == "True" else "InvalidOverlay",
                    "message": "revision 3 is active"
                    if ready == "True"
                    else "spec.virtualAgents.profiles[0].overlay.temperature: too high",
                },
            ],
        }
    return body


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (config(None), "Progressing"),
        (config("True"), "Healthy"),
        (config("False"), "Degraded"),
        (config("True", observed=0), "Progressing"),
        ({"metadata": {"name": "x"}, "status": {}}, "Progressing"),
    ],
)
def test_agent_config_health(obj: dict[str, Any], expected: str) -> None:
    status, message = health("AgentConfig", obj)
    assert status == expected, message
    if expected == "Degraded":
        assert "overlay.temperature" in message


@pytest.mark.parametrize(
    ("accepted", "reason", "expected"),
    [
        ("True", "Included", "Healthy"),
        ("False", "Overridden", "Healthy"),
        ("False", "InvalidOverlay", "Degraded"),
        (None, None, "Progressing"),
    ],
)
def test_profile_health(accepted: str | None, reason: str | None, expected: str) -> None:
    obj: dict[str, Any] = {"metadata": {"name": "p", "generation": 1}}
    if accepted:
        obj["status"] = {
            "observedGeneration": 1,
            "conditions": [{"type": "Accepted", "status": accepted, "reason": reason}],
        }
    assert health("VirtualAgentProfile", obj)[0] == expected


# --- kustomize ----------------------------------------------------------------------


def kubectl() -> str | None:
    """kubectl on PATH, or the local control plane's cached build (hack/build-binaries.sh)."""
    if found := shutil.which("kubectl"):
        return found
    versions = dict(
        line.split("=", 1)
        for line in (REPO / "hack" / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cache = Path(
        os.environ.get("AGENTWORKERS_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentworkers"
    )
    built = (
        cache
        / "bin"
        / (
            f"k8s-{versions['KUBERNETES_VERSION']}-etcd-{versions['ETCD_VERSION']}"
            f"-kwok-{versions['KWOK_VERSION']}"
        )
        / "kubectl"
    )
    return str(built) if built.exists() else None


def kustomize(overlay: str) -> list[dict[str, Any]]:
    binary = kubectl()
    if binary is None:
        pytest.skip("no kubectl (make cluster-up builds one)")
    result = subprocess.run(
        [binary, "kustomize", str(GITOPS / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize("overlay", ["staging", "production"])
def test_overlays_render(overlay: str) -> None:
    objects = kustomize(overlay)
    namespace = f"agents-{overlay}"
    kinds = sorted(o["kind"] for o in objects)
    assert kinds.count("AgentConfig") == 1 and "Namespace" in kinds
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == namespace
            assert obj["apiVersion"] == "agentworkers.io/v1alpha1"
        else:
            assert obj["metadata"]["name"] == namespace
            assert obj["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # Every profile belongs to the config the overlay ships.
    config = next(o for o in objects if o["kind"] == "AgentConfig")
    for profile in (o for o in objects if o["kind"] == "VirtualAgentProfile"):
        assert profile["spec"]["agent"] == config["metadata"]["name"]


def test_staging_tries_what_production_has_not_got() -> None:
    staging = {o["metadata"]["name"]: o for o in kustomize("staging")}
    production = {o["metadata"]["name"]: o for o in kustomize("production")}
    assert "planner-translator" in staging and "planner-translator" not in production
    assert (
        staging["planner"]["spec"]["model"]["model"]
        != production["planner"]["spec"]["model"]["model"]
    )


def test_the_examples_validate_against_the_models() -> None:
    """What the overlays apply parses with the operator's own models (the CRDs' source)."""
    from agentworkers.api import AgentConfigSpec, VirtualAgentProfileSpec  # noqa: PLC0415

    for overlay in ("staging", "production"):
        for obj in kustomize(overlay):
            if obj["kind"] == "AgentConfig":
                AgentConfigSpec.model_validate(obj["spec"])
            elif obj["kind"] == "VirtualAgentProfile":
                VirtualAgentProfileSpec.model_validate(obj["spec"])


def test_every_example_validates_against_its_model() -> None:
    """examples/*.yaml: each object parses with the model of its kind (the CRDs' source)."""
    from agentworkers.api import RESOURCES  # noqa: PLC0415

    specs = {r.kind: r.spec for r in RESOURCES}
    seen = set()
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                specs[obj["kind"]].model_validate(obj["spec"])
                seen.add(obj["kind"])
    assert {"AgentConfig", "VirtualAgentProfile", "ModelProvider"} <= seen
