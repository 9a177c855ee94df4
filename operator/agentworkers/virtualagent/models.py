"""The canonical shapes of virtual-agent profiles, shared by every door they come in by.

Pydantic models, frozen, built by keyword with the seed's snake_case names or with the
camelCase aliases a Kubernetes object uses (``maxTokens``, ``agentID``);
``model_dump(by_alias=True)`` gives the camelCase form back. Construction checks types
(no coercion: ``"5"`` is not an int) and refuses unknown fields: the overlay has no
field for providers, hooks, memory, capabilities, a parent profile or an A2A target,
so no value can express one. Bounds and charsets are *not* checked on construction;
the ``validate_*`` functions check them and raise this package's errors. Each bounded
field advertises its bounds for the generated CRD schema (see ``bounds``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from agentworkers.virtualagent.bounds import Bounds, entry_list
from agentworkers.virtualagent.constants import (
    DEFAULT_MAX_PROFILES,
    HEX_DIGEST_PATTERN,
    INPUT_DISPOSITIONS,
    KEY_PATTERN,
    MAX_ENTRY_LENGTH,
    MAX_INSTRUCTIONS_BYTES,
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_MAX_STEPS,
    MAX_MAX_TOKEN_BUDGET,
    MAX_MAX_TOKENS,
    MAX_MODEL_LENGTH,
    MAX_SKILL_ENTRIES,
    MAX_TEMPERATURE,
    MAX_TOOL_LIST_ENTRIES,
    REASONING_EFFORTS,
)
from agentworkers.virtualagent.text import is_blank

Names = tuple[StrictStr, ...]

_KEY_BOUNDS = Bounds(min_length=1, max_length=MAX_KEY_LENGTH, pattern=KEY_PATTERN)
_LABEL_BOUNDS = Bounds(max_length=MAX_LABEL_LENGTH)
_REQUIRED_TEXT = Bounds(min_length=1)
_DIGEST_BOUNDS = Bounds(pattern=HEX_DIGEST_PATTERN)


class _Shape(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
    )


# The overlay's fields that are set or not (Go's pointers): present whenever set, even to
# a zero value; the others (lists, instructions) count only when not empty.
POINTER_FIELDS = (
    "model",
    "temperature",
    "max_tokens",
    "reasoning_effort",
    "skills",
    "max_steps",
    "token_budget",
)


class Overlay(_Shape):
    """The bounded, non-recursive overlay a profile applies over its parent agent.

    Every dimension only narrows or adds: sampling parameters, a skill intersection,
    tool and server exclusions, tighter run limits, extra specialist instructions.
    """

    model: StrictStr | None = Field(
        default=None,
        description=(
            "Model the child runs with instead of the parent's. 1 to "
            f"{MAX_MODEL_LENGTH} bytes once surrounding whitespace is trimmed. "
            "Omit to keep the parent's model."
        ),
        json_schema_extra=Bounds(min_length=1, max_length=MAX_MODEL_LENGTH),
    )
    temperature: StrictFloat | None = Field(
        default=None,
        description=(
            f"Sampling temperature of the child, from 0 to {MAX_TEMPERATURE:g}. "
            "Omit to keep the parent's."
        ),
        json_schema_extra=Bounds(minimum=0, maximum=MAX_TEMPERATURE),
    )
    max_tokens: StrictInt | None = Field(
        default=None,
        description=(
            f"Ceiling on tokens per model response, 1 to {MAX_MAX_TOKENS}. Never widens: "
            "the child gets the smaller of this and the parent's ceiling."
        ),
        json_schema_extra=Bounds(minimum=1, maximum=MAX_MAX_TOKENS),
    )
    reasoning_effort: StrictStr | None = Field(
        default=None,
        description=(
            f"Reasoning effort of the child: one of {', '.join(REASONING_EFFORTS)}. "
            "Omit to keep the parent's."
        ),
        json_schema_extra=Bounds(enum=REASONING_EFFORTS),
    )
    skills: Names | None = Field(
        default=None,
        description=(
            "Skills the child keeps: the intersection with the parent's skills, so it "
            "can only remove. Omit for no narrowing; an empty list removes every skill. "
            f"At most {MAX_SKILL_ENTRIES} names of 1 to {MAX_ENTRY_LENGTH} bytes; order "
            "and duplicates do not matter."
        ),
        json_schema_extra=entry_list(MAX_SKILL_ENTRIES, MAX_ENTRY_LENGTH),
    )
    disabled_tools: Names | None = Field(
        default=None,
        description=(
            "Tools hidden from the child, added to the parent's exclusions (a tool the "
            "parent hides stays hidden); an MCP server's tool by the name the model sees, "
            f"`<server>__<tool>`. At most {MAX_TOOL_LIST_ENTRIES} names of 1 to "
            f"{MAX_ENTRY_LENGTH} bytes; order and duplicates do not matter."
        ),
        json_schema_extra=entry_list(MAX_TOOL_LIST_ENTRIES, MAX_ENTRY_LENGTH),
    )
    paused_servers: Names | None = Field(
        default=None,
        description=(
            "MCP servers (AgentConfig spec.mcpServers names) paused for the child, added "
            "to the parent's: its runs neither connect to them nor get their tools. "
            f"At most {MAX_TOOL_LIST_ENTRIES} names of 1 to {MAX_ENTRY_LENGTH} bytes; "
            "order and duplicates do not matter."
        ),
        json_schema_extra=entry_list(MAX_TOOL_LIST_ENTRIES, MAX_ENTRY_LENGTH),
    )
    max_steps: StrictInt | None = Field(
        default=None,
        description=(
            f"Cap on the child's run-loop steps, 1 to {MAX_MAX_STEPS}. Never widens: the "
            "child gets the smaller of this and the parent's cap."
        ),
        json_schema_extra=Bounds(minimum=1, maximum=MAX_MAX_STEPS),
    )
    token_budget: StrictInt | None = Field(
        default=None,
        description=(
            f"Token budget of the child's run, 1 to {MAX_MAX_TOKEN_BUDGET}. Capped at the "
            "parent's budget; when the parent has none, this introduces one."
        ),
        json_schema_extra=Bounds(minimum=1, maximum=MAX_MAX_TOKEN_BUDGET),
    )
    instructions: StrictStr = Field(
        default="",
        description=(
            "Trusted, operator-authored specialist guidance added to the child's system "
            f"prompt, at most {MAX_INSTRUCTIONS_BYTES} bytes. Surrounding whitespace is "
            "trimmed."
        ),
        json_schema_extra=Bounds(max_length=MAX_INSTRUCTIONS_BYTES),
    )

    def is_zero(self) -> bool:
        """Whether the overlay narrows and adds nothing: a run under it is unchanged.

        An explicit empty skill set is not zero: it narrows to no skills.
        """
        return (
            all(getattr(self, name) is None for name in POINTER_FIELDS)
            and not self.disabled_tools
            and not self.paused_servers
            and is_blank(self.instructions)
        )


class Profile(_Shape):
    """A virtual-agent profile: a named overlay one top-level agent applies to a child run.

    A profile is configuration, not an agent: it is never listed, started or addressed
    as one, and the child task stays owned by the parent agent.
    """

    key: StrictStr = Field(
        default="",
        description=(
            f"Identifier of the profile within its owner: 1 to {MAX_KEY_LENGTH} bytes of "
            "lowercase letters, digits, '.', '_' and '-', starting with a letter or digit."
        ),
        json_schema_extra=_KEY_BOUNDS,
    )
    label: StrictStr = Field(
        default="",
        description=f"Human-readable name of the profile, at most {MAX_LABEL_LENGTH} bytes.",
        json_schema_extra=_LABEL_BOUNDS,
    )
    parent: StrictStr = Field(
        default="",
        description=(
            "The top-level agent that owns the profile; must equal the owner of the map "
            "the profile belongs to."
        ),
        json_schema_extra=_REQUIRED_TEXT,
    )
    overlay: Overlay = Field(
        default_factory=Overlay,
        description="What the profile narrows or adds over the parent agent's configuration.",
    )
    input_patterns: Names | None = Field(
        default=None,
        description=(
            "Which inputs (files of the parent's sandbox) the child may receive: shell-style "
            "patterns (fnmatch: *, ?, [...]), each matched against an input's canonical "
            "filename (e.g. *.md) and its MIME type (e.g. text/*); an input must match one. "
            f"Omit for none. Each pattern is 1 to {MAX_ENTRY_LENGTH} bytes; order and "
            "duplicates do not matter."
        ),
        json_schema_extra=entry_list(None, MAX_ENTRY_LENGTH),
    )
    input_count: StrictInt = Field(
        default=0,
        description="Most inputs the child may receive; 0 (the default): none.",
        json_schema_extra=Bounds(minimum=0),
    )
    input_disposition: StrictStr = Field(
        default="",
        description=(
            "What the child's runtime does with every accepted input: attachment (a file "
            "inputs/<name> in its sandbox) or inline (its text in the child's first message; "
            "text inputs only). Empty keeps the normal policy, attachment."
        ),
        json_schema_extra=Bounds(enum=INPUT_DISPOSITIONS),
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description=(
            "JSON Schema of the child's terminal output, owned by configuration and "
            "never accepted from the model."
        ),
    )
    output_schema_hash: StrictStr = Field(
        default="",
        description=(
            "SHA-256 of the output schema's canonical JSON, filled in by normalisation; "
            "when given, it must match the schema."
        ),
    )


class ProfileMap(_Shape):
    """The profiles one configured top-level agent owns."""

    owner: StrictStr = Field(
        default="",
        description="The top-level agent owning every profile in the map.",
        json_schema_extra=_REQUIRED_TEXT,
    )
    max_profiles: StrictInt = Field(
        default=0,
        description=f"Most profiles the map may hold; 0 or less means {DEFAULT_MAX_PROFILES}.",
    )
    profiles: tuple[Profile, ...] = Field(
        default=(),
        description="The profiles, each with a key unique in the map.",
    )

    def by_key(self) -> dict[str, Profile]:
        """The profiles keyed by ``key``; for a duplicate key, the last one wins."""
        return {profile.key: profile for profile in self.profiles}


class Binding(_Shape):
    """The pin a spawned child task carries, so a restart runs the exact same profile.

    It names the owning top-level agent (which stays the task's agent), the profile key,
    the config revision and digest the profile map was frozen against, and the profile's
    hash, plus a sealed snapshot of the profile itself.
    """

    agent_id: StrictStr = Field(
        default="",
        alias="agentID",
        description="The owning top-level agent; the child task stays this agent's task.",
        json_schema_extra=_REQUIRED_TEXT,
    )
    key: StrictStr = Field(
        default="",
        description="Key of the pinned profile.",
        json_schema_extra=_KEY_BOUNDS,
    )
    label: StrictStr = Field(
        default="",
        description=f"Label of the pinned profile, at most {MAX_LABEL_LENGTH} bytes.",
        json_schema_extra=_LABEL_BOUNDS,
    )
    parent: StrictStr = Field(
        default="",
        description="Parent agent of the pinned profile; equals the agent.",
        json_schema_extra=_REQUIRED_TEXT,
    )
    config_revision_id: StrictStr = Field(
        default="",
        alias="configRevisionID",
        description="The parent-config revision the profile map was frozen against.",
        json_schema_extra=_REQUIRED_TEXT,
    )
    config_digest: StrictStr = Field(
        default="",
        description="SHA-256 (64 hex digits) of that parent-config revision.",
        json_schema_extra=_DIGEST_BOUNDS,
    )
    profile_hash: StrictStr = Field(
        default="",
        description="SHA-256 (64 hex digits) of the pinned profile's canonical form.",
        json_schema_extra=_DIGEST_BOUNDS,
    )
    profile: Profile | None = Field(
        default=None,
        description=(
            "Sealed snapshot of the pinned profile, so the child is rebuilt without "
            "reading configuration that may since have changed."
        ),
    )
