"""GitOps: the Argo CD health checks, run in a real Lua runtime (lupa) over their
health_test.yaml fixtures and over the states a first install goes through; kept the same
in docs/gitops.md, resource_customizations/ and the argocd-cm patch; the kustomize layout
renders."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import argocd_health
from tests.builds import built, versions

REPO = Path(__file__).resolve().parents[3]
GITOPS = REPO / "examples" / "gitops"
# Argo CD's own layout (argoproj/argo-cd resource_customizations/<group>/<kind>/): each
# check with its health_test.yaml and testdata/, ready to propose upstream.
CUSTOMIZATIONS = GITOPS / "argocd" / "resource_customizations" / "agentworkers.io"
DOC = REPO / "docs" / "gitops.md"
KINDS = ("AgentConfig", "VirtualAgentProfile", "Worker")


def script(kind: str) -> str:
    return (CUSTOMIZATIONS / kind / "health.lua").read_text()


def test_every_kind_with_a_status_has_a_check() -> None:
    assert sorted(p.name for p in CUSTOMIZATIONS.iterdir()) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_script_everywhere(kind: str) -> None:
    cm = yaml.safe_load((GITOPS / "argocd" / "argocd-cm.yaml").read_text())
    key = f"resource.customizations.health.agentworkers.io_{kind}"
    assert cm["data"][key].strip() == script(kind).strip()
    doc = DOC.read_text()
    section = re.search(rf"### {re.escape(key)}\n+```lua\n(.*?)```", doc, re.S)
    assert section, f"docs/gitops.md has no Lua block for {key}"
    assert section.group(1).strip() == script(kind).strip()


def test_the_checks_are_as_their_templates_render_them() -> None:
    """One source: hack/argocd-health/ renders health.lua, the argocd-cm patch and the doc."""
    stale = sorted(
        str(path.relative_to(REPO))
        for path, text in argocd_health.rendered().items()
        if path.read_text() != text
    )
    assert not stale, f"edited by hand? render: python hack/argocd_health.py ({stale})"


# --- the scripts, run -------------------------------------------------------------


def health(kind: str, obj: dict[str, Any]) -> tuple[str, str]:
    """The script's verdict, run as Argo CD runs it: `obj` a global of Lua tables."""
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


def fixture_cases() -> list[tuple[str, dict[str, Any]]]:
    return [
        (kind, case)
        for kind in KINDS
        for case in yaml.safe_load((CUSTOMIZATIONS / kind / "health_test.yaml").read_text())[
            "tests"
        ]
    ]


@pytest.mark.parametrize(
    ("kind", "case"),
    fixture_cases(),
    ids=[f"{k}-{Path(c['inputPath']).stem}" for k, c in fixture_cases()],
)
def test_health_test_yaml(kind: str, case: dict[str, Any]) -> None:
    """Each case of health_test.yaml, as Argo CD's own test runs it: status and message."""
    obj = yaml.safe_load((CUSTOMIZATIONS / kind / case["inputPath"]).read_text())
    status, message = health(kind, obj)
    assert (status, message) == (case["healthStatus"]["status"], case["healthStatus"]["message"])
    # The file names say what they show: healthy_*, progressing_*, degraded_*.
    assert Path(case["inputPath"]).stem.split("_")[0] == status.lower()


def test_every_testdata_file_is_a_case() -> None:
    for kind in KINDS:
        used = {
            c["inputPath"]
            for c in yaml.safe_load((CUSTOMIZATIONS / kind / "health_test.yaml").read_text())[
                "tests"
            ]
        }
        files = {f"testdata/{p.name}" for p in (CUSTOMIZATIONS / kind / "testdata").glob("*.yaml")}
        assert used == files, kind


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


def legacy(conditions: list[dict[str, str]]) -> dict[str, Any]:
    """A status from an operator that writes no Stalled/Reconciling (before 0.x)."""
    return {
        "metadata": {"name": "p", "generation": 1},
        "status": {"observedGeneration": 1, "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("kind", "condition", "expected"),
    [
        ("AgentConfig", {"type": "Ready", "status": "True", "reason": "RevisionActive"}, "Healthy"),
        ("AgentConfig", {"type": "Ready", "status": "False", "reason": "InvalidMap"}, "Degraded"),
        ("VirtualAgentProfile", {"type": "Accepted", "status": "True"}, "Healthy"),
        (
            "VirtualAgentProfile",
            {"type": "Accepted", "status": "False", "reason": "Overridden"},
            "Healthy",
        ),
        (
            "VirtualAgentProfile",
            {"type": "Accepted", "status": "False", "reason": "InvalidOverlay"},
            "Degraded",
        ),
    ],
)
def test_statuses_of_an_older_operator_still_read(
    kind: str, condition: dict[str, str], expected: str
) -> None:
    assert health(kind, legacy([condition]))[0] == expected


def test_a_first_install_with_sync_waves_never_waits_on_a_profile_for_its_config() -> None:
    """Argo CD applies wave -1 (profiles), waits until each is Healthy, then wave 0 (the
    AgentConfig). Each state here is what the operator's own reconcile writes (against the
    in-memory repository), judged by the shipped scripts, in the order a sync sees them."""
    from agentworkers.controller.passes import configs  # noqa: PLC0415
    from agentworkers.controller.passes.requeue import Later  # noqa: PLC0415
    from agentworkers.core.revisions import SettleWindow  # noqa: PLC0415
    from tests.unit.controller.test_config_reconcile import (  # noqa: PLC0415
        CONFIG,
        PROFILES,
        Clock,
        Memory,
        put,
    )

    memory, clock, window = Memory(), Clock(), SettleWindow(2.0)
    profiles = [p["metadata"]["name"] for p in PROFILES]

    def verdicts() -> dict[str, str]:
        seen = {
            name: health("VirtualAgentProfile", memory.find("virtualagentprofiles", name) or {})[0]
            for name in profiles
        }
        if config := memory.find("agentconfigs", "planner"):
            seen["planner"] = health("AgentConfig", config)[0]
        return seen

    def operator_pass() -> None:
        with contextlib.suppress(Later):
            configs.reconcile(memory, "ns", "planner", settle=window, clock=clock)

    # Wave -1: the profiles, before the operator has seen them.
    for profile in PROFILES:
        put(memory, "virtualagentprofiles", profile)
    assert set(verdicts().values()) == {"Progressing"}
    operator_pass()  # their AgentConfig does not exist: they say so, and are Healthy
    assert verdicts() == dict.fromkeys(profiles, "Healthy")
    # Wave 0: the AgentConfig; Progressing while its change set settles, then Healthy.
    put(memory, "agentconfigs", CONFIG)
    assert verdicts()["planner"] == "Progressing"
    operator_pass()
    assert verdicts()["planner"] == "Progressing"  # Reconciling=True: Settling
    clock.now += window.seconds
    operator_pass()
    assert verdicts() == dict.fromkeys([*profiles, "planner"], "Healthy")
    assert sorted(n for (p, _, n) in memory.objects if p == "agentconfigrevisions") == [
        "planner-r1"
    ]


# --- kustomize ----------------------------------------------------------------------


def kubectl() -> str | None:
    """kubectl on PATH, or the local control plane's cached build (hack/build-binaries.sh)."""
    if found := shutil.which("kubectl"):
        return found
    v = versions()
    control_plane = (
        f"k8s-{v['KUBERNETES_VERSION']}-etcd-{v['ETCD_VERSION']}-kwok-{v['KWOK_VERSION']}"
    )
    binary = built(control_plane, "kubectl")
    return str(binary) if binary else None


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
    from agentworkers.api.crds import RESOURCES  # noqa: PLC0415

    specs = {r.kind: r.spec for r in RESOURCES}
    seen = set()
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                specs[obj["kind"]].model_validate(obj["spec"])
                seen.add(obj["kind"])
    assert {"AgentConfig", "VirtualAgentProfile", "ModelProvider"} <= seen
