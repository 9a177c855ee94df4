"""Admission, one row per rule, against the in-memory repository: what is refused, with which
reason and field, and what passes (with its warnings)."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

import kopf
import pytest

from agentworkers.api.names import BINDING_ANNOTATION
from agentworkers.controller.admission import admission
from agentworkers.controller.admission.admission_server import answer
from agentworkers.controller.kopf import webhooks
from agentworkers.core.inputs import encode
from agentworkers.errors import ApiError
from agentworkers.kube.api import Api
from agentworkers.kube.repository import Storage
from agentworkers.kube.store import TRIM, Store
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import (
    CONFIG,
    bound_child,
    planner,
    started,
    worker,
)

OPERATOR = "system:serviceaccount:agentworkers-system:agentworkers"
USER = "alice"


def scene() -> Memory:
    """The example agent at revision 1, a running parent and a bound child `child`."""
    memory = Memory()
    planner(memory)
    started(memory, "parent")
    bound_child(memory, "child", "translator")
    return memory


@dataclass(frozen=True)
class Case:
    body: dict[str, Any]
    refused: str | None  # "Reason: field" the message starts with, or None: allowed
    old: dict[str, Any] | None = None
    user: str = USER
    warning: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _with_binding(body: dict[str, Any], binding: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["annotations"] = {BINDING_ANNOTATION: binding}
    return body


def _child_binding(memory: Memory) -> str:
    child = memory.find("workers", "child")
    assert child is not None
    return str(child["metadata"]["annotations"][BINDING_ANNOTATION])


def worker_cases(memory: Memory) -> dict[str, Case]:
    binding = _child_binding(memory)
    child = memory.find("workers", "child")
    assert child is not None
    finished = copy.deepcopy(child)
    finished["status"]["phase"] = "Done"
    queried = copy.deepcopy(finished)
    queried["spec"]["queries"] = ["one more"]
    return {
        "a plain top-level run": Case(worker("w"), None),
        "an unknown agent waits, with a warning": Case(
            {**worker("w"), "spec": {"agent": "nosuch"}}, None, warning="does not exist (yet)"
        ),
        "an unknown field": Case(worker("w", colour="red"), "InvalidSpec: spec.colour"),
        "a secret the agent does not allow": Case(
            worker("w", allowedSecrets=["root"]), "SecretNotAllowed: spec.allowedSecrets"
        ),
        "an unknown parent": Case(worker("w", parent="ghost"), "UnknownWorker: spec.parent"),
        "a dynamic run without a parent": Case(
            worker("w", kind="dynamic"), "InvalidSpec: spec.kind: 'dynamic' needs spec.parent"
        ),
        "a static run with a parent": Case(
            worker("w", parent="parent", kind="static"),
            "InvalidSpec: spec.kind: 'static' with spec.parent 'parent'",
        ),
        "a child that says it is dynamic": Case(worker("w", parent="parent", kind="dynamic"), None),
        "a profile unknown to the parent's map": Case(
            worker("w", parent="parent", profile="nope"), "UnknownProfile: spec.profile"
        ),
        "a profile below a profile run": Case(
            worker("w", parent="child", profile="reviewer"), "ProfileRecursion: spec.profile"
        ),
        "a good profiled spawn": Case(worker("w", parent="parent", profile="reviewer"), None),
        "a binding set at creation": Case(
            _with_binding(worker("w", parent="parent", profile="translator"), binding),
            f"TamperedBinding: metadata.annotations[{BINDING_ANNOTATION}]",
        ),
        "the operator binding a child": Case(
            _with_binding(child, binding), None, old={**child, "metadata": {}}, user=OPERATOR
        ),
        "a user removing a binding": Case(
            {**child, "metadata": {**child["metadata"], "annotations": {}}},
            f"TamperedBinding: metadata.annotations[{BINDING_ANNOTATION}]",
            old=child,
        ),
        "a user changing something else": Case(
            {**child, "spec": {**child["spec"], "suspend": False}}, None, old=child
        ),
        "a runtime spawning for another parent": Case(
            worker("w", parent="parent"),
            "NotYourChild: spec.parent",
            user="system:serviceaccount:ns:worker-child",
        ),
        "a runtime spawning its own child": Case(
            worker("w", parent="child"), None, user="system:serviceaccount:ns:worker-child"
        ),
        "a query to a finished run": Case(queried, "WorkerFinished: spec.queries", old=finished),
        "an unknown provider": Case(worker("w", provider="gemini"), "InvalidSpec: spec.provider"),
        "reasoningAPI with its own provider not anthropic": Case(
            worker("w", provider="openai", reasoningAPI="enabled"),
            "InvalidSpec: spec.reasoningAPI: Value error, reasoningAPI is Anthropic's thinking",
        ),
        "reasoningAPI on an agent whose provider is not anthropic": Case(
            worker("w", reasoningAPI="adaptive"),
            "ReasoningAPIUnsupported: spec.reasoningAPI: reasoningAPI is Anthropic's thinking: "
            "it needs provider anthropic, and this run's provider is scripted",
        ),
        "reasoningAPI with provider anthropic": Case(
            worker("w", provider="anthropic", reasoningAPI="enabled"), None
        ),
        # researcher: inputPatterns *.md, text/*; inputCount 4. translator: no inputs.
        "inputs the profile allows": Case(
            worker("w", parent="parent", profile="researcher", inputs=_inputs("a.md", "b.csv")),
            None,
        ),
        "inputs past the profile's inputCount": Case(
            worker("w", parent="parent", profile="researcher", inputs=_inputs(*NOTES[:5])),
            "InputNotAllowed: spec.inputs: 5 inputs exceeds inputCount 4 of profile 'researcher'",
        ),
        "an input no inputPattern matches": Case(
            worker("w", parent="parent", profile="researcher", inputs=_inputs("a.md", "run.sh")),
            "InputNotAllowed: spec.inputs[1].name: 'run.sh' (application/x-sh) matches no "
            "inputPatterns of profile 'researcher' (*.md, text/*)",
        ),
        "an input to a profile that takes none": Case(
            worker("w", parent="parent", profile="translator", inputs=_inputs("a.md")),
            "InputNotAllowed: spec.inputs: 1 inputs exceeds inputCount 0 of profile 'translator'",
        ),
        "an input below a profile run is bounded by its profile": Case(
            worker("w", parent="child", inputs=_inputs("a.md")),
            "InputNotAllowed: spec.inputs: 1 inputs exceeds inputCount 0 of profile "
            "'translator' (of child, which this run runs below)",
        ),
        "inputs to a run no profile bounds": Case(worker("w", inputs=_inputs(*NOTES[:16])), None),
        "an input whose digest differs": Case(
            worker("w", inputs=[{**_inputs("a.md")[0], "sha256": "0" * 64}]),
            "InvalidInput: spec.inputs[0].sha256: the content's SHA-256 is",
        ),
        "inputs changed after creation": Case(
            {**child, "spec": {**child["spec"], "inputs": _inputs("a.md")}},
            "InvalidSpec: spec.inputs: is immutable",
            old=child,
        ),
    }


NOTES = [f"note-{i}.md" for i in range(16)]


def _inputs(*names: str) -> list[dict[str, Any]]:
    return [encode(name, f"# {name}\n".encode()).wire() for name in names]


def _review(memory: Memory, case: Case) -> list[str]:
    warnings: list[str] = []
    body = copy.deepcopy(case.body)
    body["metadata"].setdefault("namespace", "ns")
    admission.validate_worker(memory, body, case.old, warnings, case.user, OPERATOR)
    return warnings


CASES = worker_cases(scene())


@pytest.mark.parametrize("name", CASES)
def test_a_worker_review(name: str) -> None:
    memory = scene()
    case = worker_cases(memory)[name]
    if case.refused is None:
        warnings = _review(memory, case)
        assert (case.warning is None) == (not warnings), warnings
        if case.warning:
            assert case.warning in warnings[0]
        return
    with pytest.raises(kopf.AdmissionError) as refused:
        _review(memory, case)
    assert str(refused.value).startswith(case.refused), str(refused.value)
    assert refused.value.code == 422


def _profile(key: str, **spec: Any) -> dict[str, Any]:
    return {"agent": "planner", "key": key, **spec}


@pytest.mark.parametrize(
    ("spec", "refused"),
    [
        (_profile("fresh"), None),
        (_profile("Bad Key"), "InvalidKey: spec.key"),
        (_profile("k", overlay={"providers": ["x"]}), "InvalidSpec: spec.overlay.providers"),
        (_profile("k", label="é" * 101), "InvalidProfile: spec.label"),
        (_profile("researcher"), "DuplicateKey: VirtualAgentProfile/p: spec.key"),
    ],
)
def test_a_profile_review(spec: dict[str, Any], refused: str | None) -> None:
    memory = scene()
    warnings: list[str] = []
    if refused is None:
        admission.validate_profile(memory, spec, "p", "ns", warnings)
        return
    with pytest.raises(kopf.AdmissionError) as error:
        admission.validate_profile(memory, spec, "p", "ns", warnings)
    assert str(error.value).startswith(refused), str(error.value)


def test_a_profile_past_the_cap_is_refused_and_one_the_section_overrides_is_warned() -> None:
    memory = scene()
    config = memory.objects[("agentconfigs", "ns", "planner")]
    config["spec"]["virtualAgents"]["maxProfiles"] = 3  # reviewer + researcher + translator
    with pytest.raises(kopf.AdmissionError, match="TooManyProfiles: VirtualAgentProfile/p"):
        admission.validate_profile(memory, _profile("fourth"), "p", "ns", [])
    warnings: list[str] = []
    admission.validate_profile(memory, _profile("reviewer"), "p", "ns", warnings)
    assert "virtualAgents section declares key 'reviewer'; it wins" in warnings[0]


def test_an_agent_config_review() -> None:
    memory = scene()
    spec = copy.deepcopy(CONFIG["spec"])
    admission.validate_agent_config(memory, spec, "planner", "ns")
    spec["instructions"] = "é" * 8193
    with pytest.raises(kopf.AdmissionError, match=r"InvalidSpec: spec\.instructions: .*16384"):
        admission.validate_agent_config(memory, spec, "planner", "ns")


def test_reasoning_api_is_refused_on_a_run_that_is_not_anthropic() -> None:
    """Through a ModelProvider too: its api is the run's provider."""
    memory = scene()
    memory.put(
        "modelproviders",
        {"metadata": {"name": "claude"}, "spec": {"api": "anthropic", "defaultModel": "c"}},
    )
    memory.put("modelproviders", {"metadata": {"name": "vllm"}, "spec": {"api": "openai"}})
    spec = copy.deepcopy(CONFIG["spec"])
    spec["model"] = {"providerRef": "claude", "reasoningAPI": "enabled"}
    admission.validate_agent_config(memory, spec, "planner", "ns")
    spec["model"]["providerRef"] = "vllm"
    with pytest.raises(
        kopf.AdmissionError,
        match=r"ReasoningAPIUnsupported: spec\.model\.reasoningAPI: .*provider is openai "
        r"\(ModelProvider vllm\)",
    ):
        admission.validate_agent_config(memory, spec, "planner", "ns")
    spec["model"] = {"provider": "openai", "model": "m", "reasoningAPI": "adaptive"}
    with pytest.raises(
        kopf.AdmissionError, match=r"InvalidSpec: spec\.model\.reasoningAPI: .*is openai"
    ):
        admission.validate_agent_config(memory, spec, "planner", "ns")
    spec["model"] = {"provider": "mistral", "model": "m"}
    with pytest.raises(kopf.AdmissionError, match=r"InvalidSpec: spec\.model\.provider"):
        admission.validate_agent_config(memory, spec, "planner", "ns")

    # A Worker of an agent whose ModelProvider is anthropic may ask for thinking.
    memory.objects[("agentconfigs", "ns", "planner")]["spec"]["model"] = {"providerRef": "claude"}
    thinking = {**worker("w", reasoningAPI="enabled"), "metadata": {"name": "w", "namespace": "ns"}}
    admission.validate_worker(memory, thinking, None, [], USER, OPERATOR)


def test_only_the_operator_writes_revisions() -> None:
    admission.validate_revision(OPERATOR, OPERATOR)
    with pytest.raises(kopf.AdmissionError, match="RevisionWriteRefused"):
        admission.validate_revision(USER, OPERATOR)


def test_no_review_is_answered_before_the_store_has_listed_everything() -> None:
    """Right after a (re)start the store is still filling: a parent would look missing and
    a tree empty. Until it is synced every review is refused as not ready (503: retry)."""
    memory = scene()
    synced = threading.Event()
    answering = webhooks.checks(memory, OPERATOR, synced)
    request = {"uid": "1", "object": {**worker("w", parent="parent"), "metadata": {
        "name": "w", "namespace": "ns"}}, "userInfo": {"username": USER}}  # fmt: skip
    refused = answer(request, answering, "worker")
    assert refused["allowed"] is False and refused["status"]["code"] == 503
    assert "has not read every object yet" in refused["status"]["message"]
    synced.set()
    assert answer(request, answering, "worker")["allowed"] is True


class _CountedApi(Api):
    """An API server with nothing the store lacks, counting what is asked of it."""

    def __init__(self) -> None:
        super().__init__(client=None)  # type: ignore[arg-type]
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.requests.append((method, url))
        raise ApiError("404 Not Found", 404)


def test_admission_answers_from_the_store_with_no_api_read() -> None:
    """docs/architecture.md: admission reads the store. The operator's Storage over a store
    holding the scene: every kind of review is answered with no request to the API server
    (a LIST per review of a profile or an AgentConfig, as there was, grows with the
    namespace and loads the API server with each write)."""
    memory = scene()
    store = Store()
    for (plural, _, _), body in memory.objects.items():
        if plural in TRIM:
            store.observed(plural, body)
    api = _CountedApi()
    answering = webhooks.checks(Storage(api, store), OPERATOR)
    config = memory.find("agentconfigs", "planner")
    assert config is not None
    config["spec"]["instructions"] = "plan, then delegate"
    profile = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "VirtualAgentProfile",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": _profile("fresh"),
    }
    spawn = worker("w", parent="parent", profile="researcher", inputs=_inputs("a.md"))
    spawn["metadata"]["namespace"] = "ns"
    reviews = {
        "agentconfig": config,
        "virtualagentprofile": profile,
        "worker": spawn,
    }
    for check, body in reviews.items():
        request = {"uid": check, "object": body, "userInfo": {"username": USER}}
        assert answer(request, answering, check)["allowed"] is True, check
    assert api.requests == []
