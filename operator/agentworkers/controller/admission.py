"""Validating admission: refuse bad config-plane objects before they persist.

The CRD schemas already refuse what a structural schema can say (types, bounds,
patterns, unknown fields under strict field validation). These checks add what it
cannot: the canonical validation of the virtualagent package, map-wide rules (the
profile cap, duplicate keys) across both doors. The handlers repeat every check,
since admission can be off.
"""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from agentworkers import metrics
from agentworkers.api import AgentConfigSpec, VirtualAgentProfileSpec
from agentworkers.errors import describe
from agentworkers.revisions import Standalone, check_standalone, effective_map, standalone_source
from agentworkers.storage import Storage
from agentworkers.virtualagent import VirtualAgentError


def _refuse(error: VirtualAgentError) -> kopf.AdmissionError:
    metrics.CONFIG_REFUSALS.labels(reason=error.reason, stage="admission").inc()
    return kopf.AdmissionError(f"{error.reason}: {error}", code=422)


def _standalone(
    storage: Storage, namespace: str, agent: str, skip: str | None = None
) -> list[Standalone]:
    found = []
    for item in storage.items("virtualagentprofiles", namespace):
        name = item["metadata"]["name"]
        if name == skip or (item.get("spec") or {}).get("agent") != agent:
            continue
        try:
            found.append(Standalone(name, VirtualAgentProfileSpec.model_validate(item["spec"])))
        except ValidationError:
            continue  # an invalid neighbour is its own problem, reported on it
    return found


def validate_agent_config(
    storage: Storage, spec: dict[str, Any], name: str, namespace: str
) -> None:
    try:
        config = AgentConfigSpec.model_validate(spec)
        effective_map(name, config, _standalone(storage, namespace, name))
    except ValidationError as e:
        raise _refuse(describe(e)) from e
    except VirtualAgentError as e:
        raise _refuse(e) from e


def validate_profile(
    storage: Storage, spec: dict[str, Any], name: str, namespace: str, warnings: list[str]
) -> None:
    try:
        profile_spec = VirtualAgentProfileSpec.model_validate(spec)
        check_standalone(profile_spec)
        config = storage.get("agentconfigs", namespace, profile_spec.agent)
        if config is None:
            warnings.append(
                f"AgentConfig {profile_spec.agent!r} does not exist (yet) in {namespace}"
            )
            return
        others = _standalone(storage, namespace, profile_spec.agent, skip=name)
        config_spec = AgentConfigSpec.model_validate(config.get("spec") or {})
        effective = effective_map(
            profile_spec.agent, config_spec, [*others, Standalone(name, profile_spec)]
        )
    except ValidationError as e:
        raise _refuse(describe(e)) from e
    except VirtualAgentError as e:
        raise _refuse(e) from e
    if name in effective.overridden:
        warnings.append(
            f"AgentConfig {profile_spec.agent}'s virtualAgents section declares key "
            f"{profile_spec.key!r}; it wins over {standalone_source(name)}"
        )
