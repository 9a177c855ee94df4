"""The config plane on a real API server: revisions, both profile doors, admission."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes
import pytest
import yaml

from agentworkers.api import AgentConfigSpec, VirtualAgentProfileSpec
from agentworkers.core.revisions import Standalone, digest, effective_map
from agentworkers.virtualagent import Overlay
from tests.e2e.support import CONFIG, PROFILES, REPO, Cluster, Operator, wait_until

pytestmark = pytest.mark.usefixtures("operator")


def active_revision(
    cluster: Cluster, namespace: str, name: str = "planner"
) -> dict[str, Any] | None:
    status = cluster.kubectl_json("get", "agentconfig", name, "-n", namespace).get("status", {})
    return status.get("activeRevision")


def revisions(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return cluster.kubectl_json("get", "agentconfigrevisions", "-n", namespace)["items"]


def wait_for_revision(cluster: Cluster, namespace: str, number: int) -> dict[str, Any]:
    return wait_until(
        f"revision {number} to be active",
        lambda: (a := active_revision(cluster, namespace)) and a["revision"] == number and a,
    )


def expected_digest(config: dict[str, Any], profiles: list[dict[str, Any]]) -> str:
    spec = AgentConfigSpec.model_validate(config["spec"])
    standalone = [
        Standalone(p["metadata"]["name"], VirtualAgentProfileSpec.model_validate(p["spec"]))
        for p in profiles
    ]
    return digest(spec, effective_map(config["metadata"]["name"], spec, standalone).frozen())


def test_revisions_follow_changes_and_only_changes(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    cluster.apply(namespace, *PROFILES, CONFIG)
    first = wait_for_revision(cluster, namespace, 1)
    assert first["digest"] == expected_digest(CONFIG, PROFILES)
    revision = cluster.kubectl_json("get", "agentconfigrevision", first["name"], "-n", namespace)
    frozen = revision["spec"]["profileMap"]
    assert [p["profile"]["key"] for p in frozen["profiles"]] == [
        "researcher",
        "reviewer",
        "translator",
    ]
    assert {p["profile"]["key"]: p["source"] for p in frozen["profiles"]} == {
        "researcher": "VirtualAgentProfile/planner-researcher",
        "reviewer": "AgentConfig",
        "translator": "VirtualAgentProfile/planner-translator",
    }
    assert revision["metadata"]["ownerReferences"][0]["kind"] == "AgentConfig"

    # Editing a profile the map includes cuts revision 2.
    edited = copy.deepcopy(PROFILES[0])
    edited["spec"]["overlay"]["maxSteps"] = 15
    cluster.apply(namespace, edited)
    second = wait_for_revision(cluster, namespace, 2)
    assert second["digest"] == expected_digest(CONFIG, [edited, PROFILES[1]])
    profile = wait_until(
        "the profile's status to name revision 2",
        lambda: (
            (p := cluster.kubectl_json("get", "vap", "planner-researcher", "-n", namespace))
            .get("status", {})
            .get("revision")
            == second["name"]
            and p
        ),
    )
    frozen = cluster.kubectl_json("get", "acr", second["name"], "-n", namespace)["spec"][
        "profileMap"
    ]
    assert profile["status"]["hash"] == next(
        p["hash"] for p in frozen["profiles"] if p["profile"]["key"] == "researcher"
    )

    # Re-applying the same YAML, or restarting the operator (every object resumed),
    # changes nothing: still revision 2, no new object, no new Event.
    created = "reason=RevisionCreated"
    events_before = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", created, "-o", "name"
    ).stdout
    assert "unchanged" in cluster.apply(namespace, CONFIG, edited, PROFILES[1]).stdout
    operator.restart(cluster)
    wait_until(
        "the restarted operator to pass over every AgentConfig it lists",
        lambda: operator.passed_every("agentconfig", "agentconfigs"),
    )
    assert active_revision(cluster, namespace) == second
    assert len(revisions(cluster, namespace)) == 2
    events_after = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", created, "-o", "name"
    ).stdout
    assert events_after == events_before

    # Deleting the AgentConfig takes its revisions with it (garbage collection).
    cluster.kubectl("delete", "agentconfig", "planner", "-n", namespace)
    wait_until("the revisions to be garbage-collected", lambda: not revisions(cluster, namespace))


def test_the_operator_leaves_no_mark_of_kopf_on_the_users_objects(
    cluster: Cluster, namespace: str
) -> None:
    """The operator writes an AgentConfig's and a profile's status, nothing else of them:
    no annotation of kopf's (its copy of the last handled spec, its progress), no
    finalizer, after a create and an update each took a pass."""
    cluster.apply(namespace, *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    changed = copy.deepcopy(CONFIG)
    changed["spec"]["instructions"] = "Plan first, then delegate."
    cluster.apply(namespace, changed)
    second = wait_for_revision(cluster, namespace, 2)
    wait_until(
        "each profile's status to name revision 2",
        lambda: all(
            cluster.kubectl_json("get", "vap", p["metadata"]["name"], "-n", namespace)
            .get("status", {})
            .get("revision")
            == second["name"]
            for p in PROFILES
        ),
    )
    kubectl_s = {"kubectl.kubernetes.io/last-applied-configuration"}
    for kind, body in (("agentconfig", changed), *(("vap", p) for p in PROFILES)):
        meta = cluster.kubectl_json("get", kind, body["metadata"]["name"], "-n", namespace)[
            "metadata"
        ]
        applied = set(body["metadata"].get("annotations") or {})
        assert set(meta.get("annotations") or {}) - applied <= kubectl_s, (kind, meta)
        assert not meta.get("finalizers"), (kind, meta)
        assert not meta.get("labels") or meta["labels"] == body["metadata"].get("labels"), meta


def test_a_section_profile_wins_over_a_standalone_one(cluster: Cluster, namespace: str) -> None:
    shadow = copy.deepcopy(PROFILES[1])
    shadow["metadata"]["name"] = "planner-reviewer"
    shadow["spec"]["key"] = "reviewer"
    cluster.apply(namespace, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    result = cluster.apply(namespace, shadow)
    assert "wins over VirtualAgentProfile/planner-reviewer" in result.stderr  # admission warning
    condition = wait_until(
        "the shadowed profile to say it is overridden",
        lambda: next(
            (
                c
                for c in cluster.kubectl_json("get", "vap", "planner-reviewer", "-n", namespace)
                .get("status", {})
                .get("conditions", [])
                if c["reason"] == "Overridden"
            ),
            None,
        ),
    )
    assert condition["status"] == "False"
    # The shadowed profile changes no content, so no new revision either.
    assert active_revision(cluster, namespace)["revision"] == 1  # type: ignore[index]


def _profile(**overrides: Any) -> dict[str, Any]:
    profile = copy.deepcopy(PROFILES[1])
    profile["metadata"]["name"] = "bad"
    profile["spec"]["key"] = "bad"
    profile["spec"].update(overrides)
    return profile


BAD_PROFILES = {
    "max tokens below its minimum": (
        _profile(overlay={"maxTokens": 0}),
        "spec.overlay.maxTokens",
    ),
    "max steps above its maximum": (
        _profile(overlay={"maxSteps": 100_001}),
        "spec.overlay.maxSteps",
    ),
    "temperature above 2": (_profile(overlay={"temperature": 2.5}), "spec.overlay.temperature"),
    "unknown reasoning effort": (
        _profile(overlay={"reasoningEffort": "extreme"}),
        "spec.overlay.reasoningEffort",
    ),
    "key outside the charset": (_profile(key="Bad_Key"), "spec.key"),
    # 70 three-byte characters: within 200 characters, over 200 bytes. Only the webhook sees it.
    "label over 200 bytes": (_profile(label="語" * 70), "spec.label"),
    "blank skill": (_profile(overlay={"skills": ["  "]}), "spec.overlay.skills"),
    "instructions over 16 KiB": (
        _profile(overlay={"instructions": "é" * 8193}),
        "spec.overlay.instructions",
    ),
    "an overlay field that would widen: providers": (
        _profile(overlay={"providers": ["openai"]}),
        "spec.overlay.providers: unknown field",
    ),
    "an overlay field that would widen: memory": (
        _profile(overlay={"memory": {"enabled": True}}),
        "spec.overlay.memory: unknown field",
    ),
    "duplicate key across standalone profiles": (
        _profile(key="researcher"),
        "DuplicateKey: VirtualAgentProfile/bad: spec.key: key 'researcher' is already declared",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PROFILES), ids=list(BAD_PROFILES))
def test_kubectl_apply_refuses_a_bad_profile_naming_the_field(
    cluster: Cluster, namespace: str, case: str
) -> None:
    bad, field = BAD_PROFILES[case]
    cluster.apply(namespace, *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    refused = cluster.apply(namespace, bad, check=False)
    assert refused.returncode != 0, f"{case} was accepted"
    assert field in refused.stderr, refused.stderr
    assert cluster.kubectl("get", "vap", "bad", "-n", namespace, check=False).returncode != 0


def test_a_profile_cannot_move_to_another_agent(cluster: Cluster, namespace: str) -> None:
    """Moving it would leave it in the first agent's map; delete and create instead."""
    cluster.apply(namespace, *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    moved = copy.deepcopy(PROFILES[0])
    moved["spec"]["agent"] = "other"
    refused = cluster.apply(namespace, moved, check=False)
    assert refused.returncode != 0
    assert "spec.agent is immutable" in refused.stderr, refused.stderr
    name = PROFILES[0]["metadata"]["name"]
    kept = cluster.kubectl_json("get", "vap", name, "-n", namespace)
    assert kept["spec"]["agent"] == "planner"


def test_the_profile_cap_is_enforced_across_both_doors(cluster: Cluster, namespace: str) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["virtualAgents"]["maxProfiles"] = 3
    cluster.apply(namespace, *PROFILES, config)  # 1 in the section + 2 standalone = 3
    wait_for_revision(cluster, namespace, 1)
    refused = cluster.apply(namespace, _profile(key="fourth"), check=False)
    assert refused.returncode != 0
    assert "TooManyProfiles" in refused.stderr, refused.stderr
    assert "maximum of 3 profiles (spec.virtualAgents.maxProfiles)" in refused.stderr


def test_kubectl_shows_useful_columns_and_explains_the_overlay(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(namespace, *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    wait_until(
        "both profiles to be accepted",
        lambda: (
            "Included"
            in cluster.kubectl("get", "vap", "planner-translator", "-n", namespace).stdout
        ),
    )
    table = cluster.kubectl("get", "agentworkers", "-n", namespace).stdout
    assert "agentconfig.agentworkers.io/planner" in table
    assert "virtualagentprofile.agentworkers.io/planner-researcher" in table
    assert "agentconfigrevision.agentworkers.io/planner-r1" in table
    configs = cluster.kubectl("get", "ac", "-n", namespace).stdout.splitlines()
    assert configs[0].split()[:7] == [
        "NAME", "MODEL", "REVISION", "PROFILES", "WARM", "READY", "REASON"
    ]  # fmt: skip
    # WARM is blank: the agent keeps no warm pool.
    assert configs[1].split()[:6] == ["planner", "demo-large", "1", "3", "True", "RevisionActive"]
    warm = configs[0].index("WARM")
    assert not configs[1][warm : configs[0].index("READY")].strip()

    explained = cluster.kubectl("explain", "virtualagentprofile.spec.overlay").stdout
    for name in (field.alias or key for key, field in Overlay.model_fields.items()):
        assert f"  {name}\t" in explained or f"  {name} " in explained, name
    assert (
        "intersection"
        in cluster.kubectl("explain", "virtualagentprofile.spec.overlay.skills").stdout.lower()
    )


def test_revisions_are_immutable(cluster: Cluster, namespace: str) -> None:
    cluster.apply(namespace, CONFIG)
    first = wait_for_revision(cluster, namespace, 1)
    refused = cluster.kubectl(
        "patch",
        "acr",
        first["name"],
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"digest": "0" * 64}}),
        check=False,
    )
    assert refused.returncode != 0
    assert "an AgentConfigRevision is immutable" in refused.stderr


def test_with_the_webhook_down_a_bad_profile_gets_a_condition_and_an_event(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    cluster.apply(namespace, *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    edited = copy.deepcopy(PROFILES[0])
    edited["spec"]["overlay"]["maxSteps"] = 15
    cluster.apply(namespace, edited)
    second = wait_for_revision(cluster, namespace, 2)

    saved = cluster.kubectl_json("get", "validatingwebhookconfiguration", operator.webhook_name)
    cluster.kubectl("delete", "validatingwebhookconfiguration", operator.webhook_name)
    try:
        # Passes the schema (70 characters), breaks the 200-byte rule only the model knows.
        bad = _profile(label="語" * 70, key="wide")
        cluster.apply(namespace, bad)
    finally:
        for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            saved["metadata"].pop(key, None)
        cluster.apply("default", saved)

    def refused_condition() -> dict[str, Any] | None:
        status = cluster.kubectl_json("get", "agentconfig", "planner", "-n", namespace).get(
            "status", {}
        )
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        # Settling (the change waits for the rest of its change set) comes first.
        return (
            ready
            if ready and ready["status"] == "False" and ready["reason"] != "Settling"
            else None
        )

    ready = wait_until("the AgentConfig to report the bad profile", refused_condition)
    assert ready["reason"] == "InvalidProfile"
    assert "VirtualAgentProfile/bad: spec.label" in ready["message"]
    assert active_revision(cluster, namespace) == second
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=InvalidProfile"
    )
    assert {e["involvedObject"]["kind"] for e in events["items"]} == {
        "AgentConfig",
        "VirtualAgentProfile",
    }
    assert all(e["type"] == "Warning" for e in events["items"])
    bad_status = cluster.kubectl_json("get", "vap", "bad", "-n", namespace)["status"]
    assert bad_status["conditions"][0]["reason"] == "InvalidProfile"


def test_two_server_side_appliers_and_the_operator_never_fight(
    cluster: Cluster, namespace: str
) -> None:
    """kubectl and a GitOps controller both apply; the operator owns no field of any spec."""

    def ssa(manager: str, *objects: dict[str, Any]) -> None:
        cluster.kubectl(
            "apply",
            "--server-side",
            f"--field-manager={manager}",
            "-n",
            namespace,
            "-f",
            "-",
            stdin="\n---\n".join(json.dumps(o) for o in objects),
        )

    ssa("argocd-controller", *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    # A person adds a label with kubectl; GitOps applies the same manifests again.
    labelled = copy.deepcopy(CONFIG)
    labelled["metadata"]["labels"] = {"team": "search"}
    ssa(
        "kubectl",
        {k: labelled[k] for k in ("apiVersion", "kind")} | {"metadata": labelled["metadata"]},
    )
    ssa(
        "argocd-controller", *PROFILES, CONFIG
    )  # no conflict: the label is kubectl's, the spec ours
    for kind, name in [
        ("agentconfig", "planner"),
        *(("vap", p["metadata"]["name"]) for p in PROFILES),
    ]:
        body = cluster.kubectl_json("get", kind, name, "-n", namespace, "--show-managed-fields")
        spec_owners = {
            m["manager"]
            for m in body["metadata"]["managedFields"]
            if "f:spec" in m.get("fieldsV1", {})
        }
        assert spec_owners == {"argocd-controller"}, (kind, name, spec_owners)
    assert cluster.kubectl_json("get", "ac", "planner", "-n", namespace)["metadata"]["labels"] == {
        "team": "search"
    }
    assert active_revision(cluster, namespace)["revision"] == 1  # type: ignore[index]


def test_an_unknown_field_is_refused_for_any_client_not_pruned(
    cluster: Cluster, namespace: str
) -> None:
    """Not only kubectl (strict field validation): a client that does not ask for it too."""
    cluster.apply(namespace, *PROFILES, CONFIG)
    wait_for_revision(cluster, namespace, 1)
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    widening = _profile(overlay={"maxSteps": 5, "capabilities": ["shell"]})
    with pytest.raises(kubernetes.client.ApiException) as refused:
        custom.create_namespaced_custom_object(
            "agentworkers.io", "v1alpha1", namespace, "virtualagentprofiles", widening
        )
    assert refused.value.status == 422
    assert "spec.overlay.capabilities: unknown field" in json.loads(refused.value.body)["message"]
    assert cluster.kubectl("get", "vap", "bad", "-n", namespace, check=False).returncode != 0


def test_a_gitops_render_applied_as_is_cuts_one_revision(cluster: Cluster, namespace: str) -> None:
    """examples/gitops keeps profiles before their config (kustomize's fifo order), so
    applying what an overlay renders, as `kubectl apply` or Flux does, cuts one revision
    that has every profile; not a first one without them."""
    rendered = cluster.kubectl("kustomize", str(REPO / "examples/gitops/overlays/staging")).stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "Namespace"]
    assert [o["kind"] for o in objects][-1] == "AgentConfig"
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    cluster.apply(namespace, *objects)
    first = wait_for_revision(cluster, namespace, 1)
    standalone = [o for o in objects if o["kind"] == "VirtualAgentProfile"]
    assert first["digest"] == expected_digest(objects[-1], standalone)
    status = cluster.kubectl_json("get", "agentconfig", "planner", "-n", namespace)["status"]
    assert status["profiles"] >= len(standalone) == 3
    assert [r["spec"]["revision"] for r in revisions(cluster, namespace)] == [1]
