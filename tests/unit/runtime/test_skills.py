"""Skills: the pod mounts exactly the kept ones, the runtime reads their front matter,
and the system prompt lists them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.api import AgentConfigSpec
from agentworkers.api.worker import WorkerSpec
from agentworkers.core.effective import resolve
from agentworkers.core.pods import build_pod
from agentworkers.runtime.loop import system_prompt
from agentworkers.runtime.skills import Skill, SkillError, load_skills, parse_front_matter
from agentworkers.virtualagent import Overlay, Profile

CONFIG = AgentConfigSpec.model_validate(
    {
        "model": {"provider": "scripted", "model": "m"},
        "skills": ["research", "summarise", "code-review"],
        "tools": ["read_file", "run_command"],
    }
)
BODY = {
    "apiVersion": "agentworkers.io/v1alpha1",
    "kind": "Worker",
    "metadata": {"name": "w", "namespace": "team", "uid": "u"},
}


def skill_mounts(pod: dict[str, Any]) -> dict[str, str]:
    """ConfigMap name -> where the container sees it, for every ConfigMap volume."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    found = {}
    for mount in pod["spec"]["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            assert mount["readOnly"] is True
            assert volume["configMap"]["defaultMode"] == 0o555
            assert volume["configMap"]["optional"] is True
            found[volume["configMap"]["name"]] = mount["mountPath"]
    assert len(found) == sum("configMap" in v for v in volumes.values())
    return found


def test_the_pod_mounts_exactly_the_kept_skills_inside_the_sandbox() -> None:
    spec = WorkerSpec(agent="planner")
    pod = build_pod(BODY, spec, CONFIG, resolve(CONFIG, spec))
    assert skill_mounts(pod) == {
        "research": "/sandbox/skills/research",
        "summarise": "/sandbox/skills/summarise",
        "code-review": "/sandbox/skills/code-review",
    }
    # A Worker keeps fewer; a profile fewer still: the others are not in the pod at all.
    narrower = WorkerSpec(agent="planner", skills=("research", "summarise"))
    pod = build_pod(BODY, narrower, CONFIG, resolve(CONFIG, narrower))
    assert set(skill_mounts(pod)) == {"research", "summarise"}
    profile = Profile(parent="planner", key="r", overlay=Overlay(skills=("summarise",)))
    child = WorkerSpec(agent="planner", parent="p", profile="r")
    pod = build_pod(BODY, child, CONFIG, resolve(CONFIG, child, profile))
    assert skill_mounts(pod) == {"summarise": "/sandbox/skills/summarise"}
    none = Profile(parent="planner", key="r", overlay=Overlay(skills=()))
    assert skill_mounts(build_pod(BODY, child, CONFIG, resolve(CONFIG, child, none))) == {}


@pytest.mark.parametrize(
    ("text", "meta"),
    [
        (
            "---\nname: a\ndescription: does a\n---\n# A\nbody",
            {"name": "a", "description": "does a"},
        ),
        ("---\r\nname: a\r\n---\r\n", {"name": "a"}),
        (
            "---\nname: a\ndescription: >\n  two\n  lines\n---",
            {"name": "a", "description": "two lines\n"},
        ),
    ],
)
def test_front_matter_is_the_yaml_between_the_fences(text: str, meta: dict[str, Any]) -> None:
    assert parse_front_matter(text) == meta


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("# no front matter\n", "does not start with YAML front matter"),
        ("---\nname: a\n", "does not start with YAML front matter"),  # never closed
        ("---\nname: [a\n---\n", "is not valid YAML"),
        ("---\n- a\n---\n", "is not a mapping"),
    ],
)
def test_bad_front_matter_says_why(text: str, why: str) -> None:
    with pytest.raises(SkillError, match=why):
        parse_front_matter(text)


def mounted(root: Path, name: str, files: dict[str, str]) -> None:
    """A skill as a kubelet mounts a ConfigMap: each key a link through ..data."""
    folder = root / "skills" / name
    (folder / "..2026_12_02_08_00_00.1").mkdir(parents=True)
    for key, text in files.items():
        (folder / "..2026_12_02_08_00_00.1" / key).write_text(text)
    os.symlink("..2026_12_02_08_00_00.1", folder / "..data")
    for key in files:
        os.symlink(f"..data/{key}", folder / key)


def test_skills_load_from_their_front_matter_and_problems_are_named(tmp_path: Path) -> None:
    mounted(
        tmp_path, "research", {"SKILL.md": "---\nname: research\ndescription: Find  out.\n---\n"}
    )
    mounted(tmp_path, "summarise", {"SKILL.md": "---\nname: summary\ndescription: x\n---\n"})
    mounted(tmp_path, "code-review", {"SKILL.md": "---\nname: code-review\n---\n"})
    (tmp_path / "skills" / "empty").mkdir()  # its ConfigMap is missing: mounted empty
    mounted(tmp_path, "escape", {})
    os.symlink("/etc/hostname", tmp_path / "skills" / "escape" / "SKILL.md")

    names = ["research", "summarise", "code-review", "empty", "escape", "absent"]
    skills, problems = load_skills(str(tmp_path), names)

    assert skills == [Skill("research", "Find out.")]
    assert problems == {
        "summarise": "the name in skills/summarise/SKILL.md is 'summary'; it must be 'summarise'",
        "code-review": "skills/code-review/SKILL.md has no description",
        "empty": "no skills/empty/SKILL.md (is there a ConfigMap 'empty' with a key SKILL.md "
        "in the agent's namespace?)",
        "escape": "skills/escape/SKILL.md: path 'skills/escape/SKILL.md' is outside the sandbox",
        "absent": "no skills/absent/SKILL.md (is there a ConfigMap 'absent' with a key "
        "SKILL.md in the agent's namespace?)",
    }


def test_the_prompt_lists_each_skill_with_its_folder_and_the_tools_to_use() -> None:
    config = resolve(CONFIG, WorkerSpec(agent="planner"))
    assert "## skills" not in system_prompt(config)
    skills = [Skill("research", "Find things out."), Skill("code-review", "Review a diff.")]
    prompt = system_prompt(config, skills)
    assert prompt[prompt.index("## skills") :] == (
        "## skills\n\nSkills are folders of instructions and scripts, read-only in your "
        'sandbox. Before you use one, read its SKILL.md (read_file "skills/research/SKILL.md"). '
        "Run its scripts with run_command, by their path from the sandbox.\n\n"
        "- research (skills/research/): Find things out.\n"
        "- code-review (skills/code-review/): Review a diff."
    )
    # A run without run_command (a profile disabled it) is not told to use it.
    profile = Profile(parent="planner", key="r", overlay=Overlay(disabled_tools=("run_command",)))
    child = resolve(CONFIG, WorkerSpec(agent="planner", parent="p", profile="r"), profile)
    assert "run_command" not in system_prompt(child, skills)
    assert "read_file" in system_prompt(child, skills)


def test_the_example_skills_load_and_cover_every_skill_the_examples_name(tmp_path: Path) -> None:
    examples = Path(__file__).parents[3] / "examples"
    kustomization = yaml.safe_load((examples / "skills" / "kustomization.yaml").read_text())
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
    generated = {g["name"]: g["files"] for g in kustomization["configMapGenerator"]}
    for name, files in generated.items():
        on_disk = sorted(p.name for p in (examples / "skills" / name).iterdir())
        assert sorted(f.removeprefix(f"{name}/") for f in files) == on_disk, name
        mounted(tmp_path, name, {f: (examples / "skills" / name / f).read_text() for f in on_disk})
    skills, problems = load_skills(str(tmp_path), generated)
    assert problems == {} and [s.name for s in skills] == list(generated)

    named = set()
    for path in examples.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") if isinstance(doc, dict) else None
            if isinstance(spec, dict):
                named |= set(spec.get("skills") or ())
                named |= set((spec.get("overlay") or {}).get("skills") or ())
                for profile in (spec.get("virtualAgents") or {}).get("profiles") or ():
                    named |= set(profile.get("overlay", {}).get("skills") or ())
    assert named and named <= set(generated)
