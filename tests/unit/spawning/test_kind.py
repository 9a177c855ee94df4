"""A Worker's kind: static for a top-level run, dynamic for a parent's child (the seed's
worker Kind), following from `parent` and refused at creation when it disagrees."""

from __future__ import annotations

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.core.checks import check_kind
from agentworkers.errors import InvalidSpecError


def test_kind_follows_the_parent() -> None:
    assert WorkerSpec(agent="planner").kind == "static"
    assert WorkerSpec(agent="planner", parent="p").kind == "dynamic"
    assert WorkerSpec.model_validate({"agent": "planner", "parent": "p"}).wire()["kind"] == (
        "dynamic"
    )
    check_kind(WorkerSpec(agent="planner", parent="p"))
    check_kind(WorkerSpec(agent="planner", kind="static"))


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ({"kind": "dynamic"}, "'dynamic' needs spec.parent"),
        ({"kind": "static", "parent": "p"}, "'static' with spec.parent 'p'"),
    ],
)
def test_a_kind_that_disagrees_with_the_parent_is_refused(spec: dict[str, str], rule: str) -> None:
    # It still loads (a Worker 0.1.0 made for a parent says static): the check refuses it.
    worker = WorkerSpec.model_validate({"agent": "planner", **spec})
    with pytest.raises(InvalidSpecError) as refused:
        check_kind(worker)
    assert refused.value.field == "spec.kind" and rule in refused.value.rule
