"""A Worker's kind: static for a top-level run, dynamic for a parent's child (the seed's
worker Kind), following from `parent` and refused when it disagrees."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentworkers.api import WorkerSpec
from agentworkers.errors import describe


def test_kind_follows_the_parent_and_a_disagreeing_one_is_refused() -> None:
    assert WorkerSpec(agent="planner").kind == "static"
    assert WorkerSpec(agent="planner", parent="p").kind == "dynamic"
    assert WorkerSpec.model_validate({"agent": "planner", "parent": "p"}).wire()["kind"] == (
        "dynamic"
    )
    for spec in ({"kind": "dynamic"}, {"kind": "static", "parent": "p"}):
        with pytest.raises(ValidationError) as refused:
            WorkerSpec.model_validate({"agent": "planner", **spec})
        assert describe(refused.value).field == "spec.kind"
