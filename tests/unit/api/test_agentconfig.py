"""An AgentConfig's spec as the model reads it: what is refused, by name, and what an old
release wrote that still loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec
from agentworkers.api.workerpod import IMAGE_DEFAULT_0_1_0, WorkerPod, WorkerTemplate
from agentworkers.errors import describe

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CONFIG = yaml.safe_load((EXAMPLES / "agentconfig.yaml").read_text())


@pytest.mark.parametrize(
    ("worker_spec", "field"),
    [
        ({"runtimeClassName": "gVisor"}, "runtimeClassName"),
        ({"imagePullSecrets": ["Bad_Name"]}, "imagePullSecrets"),
        ({"tolerations": [{"operator": "Sometimes"}]}, "tolerations"),
        ({"affinity": {"nodeAfinity": {}}}, "nodeAfinity"),
        ({"resources": {"requests": {"cpu": "1"}, "limit": {}}}, "limit"),
    ],
)
def test_a_bad_worker_knob_is_refused_by_name(worker_spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        AgentConfigSpec.model_validate({**CONFIG["spec"], "worker": worker_spec})
    error = describe(refused.value)
    assert error.field.startswith("spec.worker.") and field in error.field


def test_the_image_0_1_0_filled_in_by_default_stands_for_the_install_s() -> None:
    """0.1.0's CRD wrote its default image into every AgentConfig that left it out; those
    agents follow the install's image like any other that names none."""
    stored = WorkerTemplate.model_validate({"image": IMAGE_DEFAULT_0_1_0})
    assert stored.image is None
    assert stored.over(WorkerPod(image="registry.example.com/aw:2")).image == (
        "registry.example.com/aw:2"
    )
    assert WorkerTemplate.model_validate({"image": "mine:1"}).over(WorkerPod(image="x")).image == (
        "mine:1"
    )


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"providerRef": "vllm", "baseURL": "http://x"}, "providerRef replaces baseURL"),
        ({"providerRef": "vllm", "provider": "openai"}, "providerRef replaces provider"),
        ({"temperature": 0.5}, "model is required unless a providerRef gives a defaultModel"),
    ],
)
def test_a_config_names_its_model_source_once(model: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        AgentConfigSpec.model_validate({**CONFIG["spec"], "model": model})
    error = describe(refused.value)
    assert error.field == "spec.model" and message in str(error)
