"""The binding is the Worker's own, written once, by the operator: the pure checks."""

from __future__ import annotations

from typing import Any

import pytest

from agentworkers.api import AgentConfigRevisionSpec, AgentConfigSpec, WorkerSpec
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import BINDING_ANNOTATION
from agentworkers.api.worker import InheritedBounds
from agentworkers.core.revisions import digest, effective_map
from agentworkers.core.spawning import (
    ParentRun,
    ancestor_profile,
    check_binding,
    check_binding_write,
    check_spawn,
    encode_binding,
    summary,
    verify_run_start,
)
from agentworkers.virtualagent import (
    Binding,
    ProfileRecursionError,
    TamperedBindingError,
)

AGENT = "planner"
CONFIG = AgentConfigSpec.model_validate(
    {
        "model": {"model": "m"},
        "virtualAgents": {"profiles": [{"key": "translator"}, {"key": "researcher"}]},
    }
)
MAP = effective_map(AGENT, CONFIG, []).frozen()
REVISION = AgentConfigRevisionSpec(
    agent=AGENT, revision=1, digest=digest(CONFIG, MAP), config=CONFIG, profile_map=MAP
)
LIVE = RevisionRef(name="planner-r1", revision=1, digest=REVISION.digest)
PARENT = ParentRun(name="lead", agent=AGENT, frozen=LIVE)


def child(profile: str = "translator", **extra: Any) -> WorkerSpec:
    return WorkerSpec(agent=AGENT, parent="lead", profile=profile, **extra)


def bind(profile: str) -> Binding:
    return check_spawn(child(profile), PARENT, REVISION, LIVE)


def test_a_worker_never_bound_is_bound_now() -> None:
    assert check_binding(child(), None, None, PARENT) is None


def test_its_own_binding_passes_and_starts_the_run() -> None:
    own = bind("translator")
    found, profile = verify_run_start(child(), encode_binding(own), summary(own), PARENT, REVISION)
    assert found == own and profile.key == "translator"


@pytest.mark.parametrize(
    ("annotation", "recorded", "parent", "message"),
    [
        # 1. A sibling's binding copied over: the key is not the one the spec asks for.
        (
            encode_binding(bind("researcher")),
            summary(bind("translator")),
            PARENT,
            "the binding's key is 'researcher', but this Worker's is 'translator'",
        ),
        # ... also on a Worker created with a copied annotation (nothing recorded yet).
        (
            encode_binding(bind("researcher")),
            None,
            PARENT,
            "the binding's key is 'researcher'",
        ),
        # 2. Bound, then the annotation removed: never written again.
        (None, summary(bind("translator")), PARENT, "the binding annotation is gone"),
        # A binding cut from another parent's revision.
        (
            encode_binding(bind("translator")),
            None,
            ParentRun(name="lead", agent=AGENT, frozen=LIVE.model_copy(update={"revision": 2})),
            "the binding's revision is '1', but this Worker's is '2'",
        ),
        # Edited after the operator recorded it.
        (
            encode_binding(bind("translator")),
            summary(bind("translator")).model_copy(update={"revision": "7"}),
            PARENT,
            "the binding changed after the operator bound profile 'translator'",
        ),
        ("{not json", None, PARENT, "not a readable binding"),
    ],
)
def test_a_binding_that_is_not_its_own_fails_loud(
    annotation: str | None, recorded: Any, parent: ParentRun, message: str
) -> None:
    with pytest.raises(TamperedBindingError, match=message) as refused:
        verify_run_start(child(), annotation, recorded, parent, REVISION)
    assert refused.value.reason == "TamperedBinding"
    assert str(refused.value).startswith(BINDING_ANNOTATION)


def test_another_agent_s_binding_is_not_this_worker_s() -> None:
    other = bind("translator").model_copy(update={"agent_id": "other", "parent": "other"})
    with pytest.raises(TamperedBindingError, match="agent is 'other', but this Worker's is"):
        check_binding(child(), encode_binding(other), None, PARENT)


BINDING = encode_binding(bind("translator"))


def body(annotation: str | None) -> dict[str, Any]:
    annotations = {BINDING_ANNOTATION: annotation} if annotation is not None else {}
    return {"metadata": {"annotations": annotations}}


@pytest.mark.parametrize(
    ("new", "old", "by_operator", "refused"),
    [
        (BINDING, None, False, "cannot be set at creation"),
        (BINDING, None, True, None),
        (None, None, False, None),
        (BINDING, body(BINDING), False, None),  # an update that leaves it alone
        (BINDING + " ", body(BINDING), False, "cannot be changed or removed"),
        (None, body(BINDING), False, "cannot be changed or removed"),
        (BINDING, body(None), False, "cannot be changed or removed"),
        (BINDING, body(None), True, None),  # the operator binding it
    ],
)
def test_only_the_operator_writes_a_binding(
    new: str | None, old: dict[str, Any] | None, by_operator: bool, refused: str | None
) -> None:
    annotations = body(new)["metadata"]["annotations"]
    if refused is None:
        check_binding_write(annotations, old, by_operator)
        return
    with pytest.raises(TamperedBindingError, match=refused) as error:
        check_binding_write(annotations, old, by_operator)
    assert str(error.value).startswith(f"metadata.annotations[{BINDING_ANNOTATION}]: ")


@pytest.mark.parametrize(
    ("bounded_by", "message"),
    [
        (InheritedBounds(worker="lead", profile="r"), "parent lead is itself a virtual-profile"),
        (
            InheritedBounds(worker="boss", profile="r"),
            "parent lead runs below the virtual-profile run boss \\(profile 'r'\\)",
        ),
    ],
)
def test_no_profile_below_a_profile_run(bounded_by: InheritedBounds, message: str) -> None:
    parent = ParentRun(name="lead", agent=AGENT, frozen=LIVE, bounded_by=bounded_by)
    with pytest.raises(ProfileRecursionError, match=message):
        check_spawn(child(), parent, REVISION, LIVE)


def test_what_a_descendant_inherits_is_the_ancestor_s_sealed_profile() -> None:
    own = bind("researcher")
    spec = child("researcher")
    assert ancestor_profile(spec, encode_binding(own), summary(own)) == own.profile
    assert ancestor_profile(spec, None, None) is None  # not bound yet: the descendant waits
    with pytest.raises(TamperedBindingError, match="gone"):
        ancestor_profile(spec, None, summary(own))
    forged = own.model_copy(update={"profile": bind("translator").profile})
    with pytest.raises(TamperedBindingError):
        ancestor_profile(spec, encode_binding(forged), None)
