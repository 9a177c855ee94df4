"""Shapes every agentworkers resource shares: the model base and status conditions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictInt,
    StrictStr,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from agentworkers.virtualagent.text import utf8_len

GROUP = "agentworkers.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
# Conditions and Events carry messages a person reads; the API server caps them at 32 KiB.
# A DNS-1123 subdomain: the names of RuntimeClasses, PriorityClasses and Secrets.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SubdomainName = Annotated[StrictStr, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]

MAX_CONDITION_MESSAGE = 1024


class FieldValueError(ValueError):
    """A model validator's refusal of one field below the model, at `path` (as spelt on
    the wire, relative to the model): `describe` names that field, not the model."""

    def __init__(self, path: str, rule: str) -> None:
        super().__init__(f"{path}: {rule}")
        self.path, self.rule = path, rule


@dataclass(frozen=True)
class MaxBytes:
    """`Annotated[str, MaxBytes(n)]`: at most `n` bytes of UTF-8, the unit every length
    bound of the API is stated in.

    Counted in bytes where the model validates (admission, handlers, clients) and, for
    requests no webhook sees, by a CEL rule in the CRD. OpenAPI's `maxLength` counts
    characters, so the CRD also carries it as a looser bound (n bytes never hold more
    than n characters) that lets the API server bound the rule's cost.
    """

    limit: int

    def rule(self) -> dict[str, str]:
        return {
            "rule": f"bytes(self).size() <= {self.limit}",
            "message": f"must be at most {self.limit} bytes of UTF-8",
        }

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["maxLength"] = self.limit
        json_schema["x-kubernetes-validations"] = [self.rule()]
        return json_schema

    def _check(self, value: str) -> str:
        size = utf8_len(value)
        if size > self.limit:
            raise PydanticCustomError(
                "max_bytes",
                "must be at most {limit} bytes of UTF-8, not {size}",
                {"limit": self.limit, "size": size},
            )
        return value


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
