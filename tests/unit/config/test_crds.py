"""The checked-in CRDs are exactly what the models generate, and say what users need."""

from __future__ import annotations

from pathlib import Path

import yaml

from agentworkers.api import crdgen
from agentworkers.api.crds import RESOURCES

CRDS = Path(__file__).resolve().parents[3] / "crds"


def test_checked_in_crds_match_the_models() -> None:
    generated = crdgen.files()
    on_disk = {p.name: p.read_text() for p in CRDS.glob("*.yaml")}
    assert sorted(on_disk) == sorted(generated), "run `make crds`"
    for name, text in generated.items():
        assert on_disk[name] == text, f"{name} drifted from the models; run `make crds`"


def test_check_mode_reports_drift(tmp_path: Path) -> None:
    assert crdgen.main([str(tmp_path)]) == 0
    assert crdgen.main(["--check", str(tmp_path)]) == 0
    victim = tmp_path / "agentworkers.io_agentconfigs.yaml"
    victim.write_text(victim.read_text().replace("maxLength: 128", "maxLength: 129"))
    assert crdgen.main(["--check", str(tmp_path)]) == 1


def _walk(schema: dict, path: str = ""):  # type: ignore[no-untyped-def]
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")


def test_every_spec_field_is_described_and_structural() -> None:
    for resource in RESOURCES:
        root = crdgen.crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _walk(root["properties"]["spec"], "spec"):
            assert "$ref" not in node and "anyOf" not in node, f"{resource.kind} {path}"
            assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields"), (
                f"{resource.kind} {path} has no type"
            )
            if not path.endswith("[]"):
                assert node.get("description"), f"{resource.kind} {path} has no description"


def test_overlay_schema_carries_the_seed_bounds() -> None:
    profile = yaml.safe_load(crdgen.render(RESOURCES[2]))
    spec = profile["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    overlay = spec["properties"]["overlay"]["properties"]
    assert overlay["maxTokens"]["minimum"] == 1 and overlay["maxTokens"]["maximum"] == 1_000_000
    assert overlay["maxSteps"]["maximum"] == 100_000
    assert overlay["tokenBudget"]["maximum"] == 10_000_000
    assert overlay["reasoningEffort"]["enum"] == ["off", "low", "medium", "high"]
    assert overlay["skills"]["maxItems"] == 100
    assert overlay["disabledTools"]["maxItems"] == 500
    assert spec["properties"]["key"]["pattern"] == "^[a-z0-9][a-z0-9._-]*$"
    assert set(spec["required"]) == {"agent", "key"}
    assert "providers" not in overlay and "memory" not in overlay


def test_revisions_are_immutable_by_cel() -> None:
    revision = crdgen.crd(RESOURCES[1])
    rules = revision["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert {
        "rule": "self.spec == oldSelf.spec",
        "message": "an AgentConfigRevision is immutable",
        "fieldPath": ".spec",
    } in rules


def test_every_cel_rule_names_its_field_and_says_why() -> None:
    """A refusal reads `spec.kill: Invalid value: ...: spec.kill cannot be changed`, never
    `<nil>: Invalid value`."""
    for resource in RESOURCES:
        schema = crdgen.crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for rule in schema.get("x-kubernetes-validations", []):
            assert rule.get("fieldPath", "").startswith(".spec"), (resource.kind, rule)
            assert rule.get("message"), (resource.kind, rule)
