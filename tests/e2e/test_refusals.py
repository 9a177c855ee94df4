"""Hundreds of generated invalid objects of every kind, through the API: each refused with a
message naming its field, none persisted, the operator healthy afterwards.

The generator is seeded (the seed is in the failure message), so a failure reproduces.
"""

from __future__ import annotations

import json
import os
import random
import string
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from agentworkers.api.agentconfig import BUILTIN_TOOLS
from agentworkers.virtualagent import MAX_MAX_STEPS
from tests.e2e.support import Cluster, Operator, wait_until

pytestmark = pytest.mark.usefixtures("operator")

COUNT = 520
DIGEST = "a" * 64
# A generated object: its body, and the field path its refusal must name.
Case = tuple[dict[str, Any], str]
Mutation = Callable[[random.Random, str], Case]


def _word(rng: random.Random, size: int = 8) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(size))


def _obj(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def _config(name: str, **spec: Any) -> dict[str, Any]:
    return _obj("AgentConfig", name, {"model": {"model": "m"}, **spec})


def _profile(name: str, **spec: Any) -> dict[str, Any]:
    return _obj("VirtualAgentProfile", name, {"agent": "planner", "key": "k", **spec})


def _worker(name: str, **spec: Any) -> dict[str, Any]:
    return _obj("Worker", name, {"agent": "planner", **spec})


def _provider(name: str, **spec: Any) -> dict[str, Any]:
    return _obj("ModelProvider", name, spec)


def _revision(name: str, **spec: Any) -> dict[str, Any]:
    base = {
        "agent": "planner",
        "revision": 1,
        "digest": DIGEST,
        "config": {"model": {"model": "m"}},
        "profileMap": {"owner": "planner", "maxProfiles": 8},
    }
    return _obj("AgentConfigRevision", name, {**base, **spec})


def _unknown(rng: random.Random) -> str:
    return "x" + _word(rng).capitalize()


MUTATIONS: dict[str, list[Mutation]] = {
    "AgentConfig": [
        lambda r, n: (
            _config(n, model={"model": "m", "temperature": r.uniform(2.01, 99)}),
            "spec.model.temperature",
        ),
        lambda r, n: (
            _config(n, model={"model": "m", "maxTokens": r.randint(-99, 0)}),
            "spec.model.maxTokens",
        ),
        lambda r, n: (_config(n, instructions="é" * r.randint(8193, 9000)), "spec.instructions"),
        lambda r, n: (
            _config(n, limits={"maxSteps": MAX_MAX_STEPS + r.randint(1, 99)}),
            "spec.limits.maxSteps",
        ),
        lambda r, n: (
            _config(n, revisionHistoryLimit=r.randint(-9, 0)),
            "spec.revisionHistoryLimit",
        ),
        lambda r, n: (
            _config(n, model={"model": "m", "reasoningEffort": _word(r)}),
            "spec.model.reasoningEffort",
        ),
        lambda r, n: (_config(n, skills=[r.randint(0, 9)]), "spec.skills[0]"),
        lambda r, n: (_config(n, skills=["ok", _word(r).upper()]), "spec.skills[1]"),
        lambda r, n: (_config(n, tools=["read_file", _word(r)]), "spec.tools[1]"),
        # An unknown provider: refused by the schema's enum, never a pod's traceback.
        lambda r, n: (
            _config(n, model={"model": "m", "provider": _word(r)}),
            "spec.model.provider",
        ),
        # Anthropic's thinking with another provider (the webhook).
        lambda r, n: (
            _config(n, model={"model": "m", "provider": "openai", "reasoningAPI": "enabled"}),
            "spec.model.reasoningAPI",
        ),
        lambda r, n: (
            _config(n, virtualAgents={"profiles": [{"key": "k", "overlay": {"maxSteps": 0}}]}),
            "spec.virtualAgents.profiles[0].overlay.maxSteps",
        ),
        lambda r, n: _with_unknown(_config(n), ["spec"], _unknown(r)),
        lambda r, n: (_config(n + "-" + "n" * r.randint(64, 90)), "metadata.name"),
    ],
    "VirtualAgentProfile": [
        lambda r, n: (_profile(n, key=_word(r).upper() + " x"), "spec.key"),
        lambda r, n: (_profile(n, label="é" * r.randint(101, 150)), "spec.label"),
        lambda r, n: (
            _profile(n, overlay={"temperature": r.uniform(2.01, 50)}),
            "spec.overlay.temperature",
        ),
        lambda r, n: (_profile(n, inputCount=r.randint(-99, -1)), "spec.inputCount"),
        lambda r, n: (
            _profile(n, overlay={"skills": [" " * r.randint(1, 5)]}),
            "spec.overlay.skills[0]",
        ),
        lambda r, n: (
            _profile(n, overlay={"maxSteps": MAX_MAX_STEPS + r.randint(1, 99)}),
            "spec.overlay.maxSteps",
        ),
        lambda r, n: _with_unknown(_profile(n, overlay={}), ["spec", "overlay"], _unknown(r)),
        lambda r, n: (_profile(n, agent=""), "spec.agent"),
    ],
    "Worker": [
        lambda r, n: (_worker(n, profile=_word(r)), "spec.profile needs spec.parent"),
        lambda r, n: (_worker(n, kind=_word(r)), "spec.kind"),
        lambda r, n: (_worker(n, kind="dynamic"), "spec.kind"),
        lambda r, n: (_worker(n, reasoning=_word(r)), "spec.reasoning"),
        lambda r, n: (_worker(n, provider=_word(r)), "spec.provider"),
        # Thinking with the Worker's own provider not anthropic (CEL), or with its agent's
        # (the webhook: the planner's is scripted).
        lambda r, n: (
            _worker(n, provider=r.choice(["openai", "scripted"]), reasoningAPI="adaptive"),
            "spec.reasoningAPI",
        ),
        lambda r, n: (_worker(n, reasoningAPI="enabled"), "spec.reasoningAPI"),
        lambda r, n: (_worker(n, deadlineSeconds=r.randint(-99, 0)), "spec.deadlineSeconds"),
        lambda r, n: (_worker(n + "-" + "n" * r.randint(64, 90)), "metadata.name"),
        lambda r, n: (
            _worker(n, initialMessage="é" * r.randint(32769, 33000)),
            "spec.initialMessage",
        ),
        lambda r, n: (_worker(n, parent="ghost-" + _word(r)), "spec.parent"),
        lambda r, n: (_worker(n, allowedSecrets=[_word(r)]), "spec.allowedSecrets"),
        lambda r, n: _with_unknown(_worker(n), ["spec"], _unknown(r)),
        lambda r, n: (
            _obj(
                "Worker",
                n,
                {"agent": "planner"},
                annotations={"agentworkers.io/binding": json.dumps({"key": _word(r)})},
            ),
            "metadata.annotations[agentworkers.io/binding]",
        ),
    ],
    "ModelProvider": [
        lambda r, n: (_provider(n, api=_word(r)), "spec.api"),
        lambda r, n: (_provider(n, endpoint=""), "spec.endpoint"),
    ],
    "AgentConfigRevision": [
        lambda r, n: (_revision(n, digest=_word(r, 64)), "spec.digest"),
        lambda r, n: (_revision(n, revision=r.randint(-9, 0)), "spec.revision"),
        lambda r, n: (_revision(n, config={"skills": []}), "spec.config.model"),
        # Well-formed, but only the operator cuts revisions.
        lambda r, n: (_revision(n, revision=r.randint(1, 999)), "AgentConfigRevision"),
    ],
}


def _with_unknown(body: dict[str, Any], path: list[str], field: str) -> Case:
    node = body
    for key in path:
        node = node[key]
    node[field] = 1
    return body, ".".join([*path, field])


PLURALS = {
    "AgentConfig": "agentconfigs",
    "VirtualAgentProfile": "virtualagentprofiles",
    "Worker": "workers",
    "ModelProvider": "modelproviders",
    "AgentConfigRevision": "agentconfigrevisions",
}


def generate(seed: int, count: int) -> list[Case]:
    rng = random.Random(seed)
    flat = [m for kind in MUTATIONS for m in MUTATIONS[kind]]
    return [flat[i % len(flat)](rng, f"gen-{i}") for i in range(count)]


def test_generated_invalid_objects_are_refused_by_field_and_never_persist(
    cluster: Cluster, namespace: str, planner: dict[str, Any], operator: Operator
) -> None:
    seed = int(os.environ.get("AGENTWORKERS_SEED", random.randrange(2**32)))
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    cases = generate(seed, COUNT)
    assert {c[0]["kind"] for c in cases} == set(PLURALS)
    problems = []
    for body, field in cases:
        plural = PLURALS[body["kind"]]
        try:
            custom.create_namespaced_custom_object(
                "agentworkers.io", "v1alpha1", namespace, plural, body
            )
        except ApiException as e:
            message = json.loads(e.body).get("message", "") if e.body else ""
            if not 400 <= e.status < 500 or field not in message:
                problems.append((body["metadata"]["name"], field, e.status, message[:300]))
        else:
            problems.append((body["metadata"]["name"], field, 201, "accepted"))
    assert not problems, f"seed {seed}: {len(problems)} of {COUNT}, e.g. {problems[:5]}"

    names = {c[0]["metadata"]["name"] for c in cases}
    for plural in PLURALS.values():
        found = custom.list_namespaced_custom_object(
            "agentworkers.io", "v1alpha1", namespace, plural
        )["items"]
        assert not names & {b["metadata"]["name"] for b in found}, plural

    # Healthy: serving, and a good change still goes through.
    assert operator.ready()
    cluster.kubectl(
        "patch", "ac", "planner", "-n", namespace, "--type=merge",
        "-p", '{"spec":{"description":"after the storm"}}',
    )  # fmt: skip
    wait_until(
        "revision 2",
        lambda: (
            cluster.kubectl_json("get", "ac", "planner", "-n", namespace)["status"][
                "activeRevision"
            ]["revision"]
            == 2
        ),
    )


def test_an_unknown_tool_is_refused_listing_the_tools_that_exist(
    cluster: Cluster, namespace: str
) -> None:
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    body = _config("searcher", tools=["read_file", "web_search"])
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "agentworkers.io", "v1alpha1", namespace, "agentconfigs", body
        )
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 422, message
    assert 'spec.tools[1]: Unsupported value: "web_search"' in message
    assert all(f'"{name}"' in message for name in BUILTIN_TOOLS), message
