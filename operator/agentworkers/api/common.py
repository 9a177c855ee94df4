"""Shapes every agentworkers resource shares: the model base and status conditions."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

GROUP = "agentworkers.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
# Conditions and Events carry messages a person reads; the API server caps them at 32 KiB.
MAX_CONDITION_MESSAGE = 1024


class KubeModel(BaseModel):
    """Base of every spec and status: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        frozen=True,
    )

    def wire(self) -> dict[str, object]:
        """The object as the API server stores it: camelCase, unset fields omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Condition(KubeModel):
    """One observation of the object's state, in the Kubernetes condition convention."""

    type: StrictStr = Field(description="Kind of condition, e.g. Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: StrictStr = Field(
        default="",
        description="One CamelCase word: why the condition is in its state.",
    )
    message: StrictStr = Field(
        default="",
        description="What a person should know, in a sentence.",
        max_length=MAX_CONDITION_MESSAGE,
    )
    observed_generation: StrictInt | None = Field(
        default=None,
        description="The .metadata.generation the condition was computed from.",
    )
    last_transition_time: StrictStr | None = Field(
        default=None,
        description="When the status last changed (RFC 3339).",
    )


def conditions_field() -> Any:
    """The `conditions` field of a status: a list keyed by type, as kubectl and SSA expect."""
    return Field(
        default=(),
        description="The latest observations of the object's state, one per type.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
