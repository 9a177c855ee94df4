"""The skills a run keeps: folders mounted read-only at ``skills/<name>`` in its sandbox.

A skill is what Anthropic's agent skills are: a folder with a ``SKILL.md`` whose YAML
front matter gives its ``name`` and ``description``, and whose body (with any other file
of the folder, scripts included) the agent reads on demand. The operator mounts each kept
skill's ConfigMap there (``core.pods``); at run start the runtime reads every front
matter, and the system prompt lists each skill's name, description and folder
(``loop.system_prompt``). A kept skill that is missing or whose SKILL.md is not valid is
reported, not fatal: the run goes on without it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from agentworkers.core.pods import SKILLS_DIR
from agentworkers.runtime.sandbox import Refused, open_beneath, read_at_most

SKILL_FILE = "SKILL.md"
MAX_SKILL_FILE = 256 * 1024  # read for the front matter; a bigger SKILL.md is refused
MAX_DESCRIPTION = 1024
_FENCE = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$", re.DOTALL | re.MULTILINE)


class SkillError(ValueError):
    """Why a kept skill was not loaded (the message says what to fix)."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str

    @property
    def folder(self) -> str:
        """Relative to the sandbox (the run's working directory)."""
        return f"{SKILLS_DIR}/{self.name}"


def parse_front_matter(text: str) -> dict[str, Any]:
    """The YAML mapping between a first line ``---`` and the next ``---`` line."""
    fenced = _FENCE.match(text)
    if fenced is None:
        raise SkillError(f"{SKILL_FILE} does not start with YAML front matter between --- lines")
    try:
        data = yaml.safe_load(fenced.group(1))
    except yaml.YAMLError as e:
        raise SkillError(f"the front matter of {SKILL_FILE} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise SkillError(f"the front matter of {SKILL_FILE} is not a mapping")
    return data


def read_skill(sandbox: str, name: str) -> Skill:
    """The skill mounted at skills/<name>: its front matter's name must be its own, and
    its description a non-empty string."""
    path = f"{SKILLS_DIR}/{name}/{SKILL_FILE}"
    try:
        opened = open_beneath(sandbox, path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SkillError(
            f"no {path} (is there a ConfigMap {name!r} with a key {SKILL_FILE} in the "
            "agent's namespace?)"
        ) from None
    except (OSError, Refused) as e:
        raise SkillError(f"{path}: {getattr(e, 'strerror', None) or e}") from e
    try:
        data = read_at_most(opened.fd, MAX_SKILL_FILE + 1)
    except OSError as e:
        raise SkillError(f"{path}: {e.strerror or e}") from e
    finally:
        os.close(opened.fd)
    if len(data) > MAX_SKILL_FILE:
        raise SkillError(f"{path} is longer than {MAX_SKILL_FILE} bytes")
    meta = parse_front_matter(data.decode("utf-8", "replace"))
    if meta.get("name") != name:
        raise SkillError(f"the name in {path} is {meta.get('name')!r}; it must be {name!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{path} has no description")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"the description in {path} is longer than {MAX_DESCRIPTION} characters")
    return Skill(name, " ".join(description.split()))


def load_skills(sandbox: str, names: Iterable[str]) -> tuple[list[Skill], dict[str, str]]:
    """The skills that load, in order, and why each other did not."""
    loaded: list[Skill] = []
    problems: dict[str, str] = {}
    for name in names:
        try:
            loaded.append(read_skill(sandbox, name))
        except SkillError as e:
            problems[name] = str(e)
    return loaded, problems
