"""Validating admission: refuse bad config-plane objects before they persist.

The CRD schemas already refuse what a structural schema can say (types, bounds,
patterns, unknown fields under strict field validation). These checks add what it
cannot: the canonical validation of the virtualagent package, map-wide rules (the
profile cap, duplicate keys) across both doors. The handlers repeat every check,
since admission can be off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError

from agentworkers.api import (
    AgentConfigSpec,
    AgentConfigStatus,
    VirtualAgentProfileSpec,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.api.agentconfig import ModelDefaults
from agentworkers.api.names import BINDING_ANNOTATION
from agentworkers.api.provider import ModelProviderSpec, reasoning_api_rule
from agentworkers.api.worker import TERMINAL_PHASES
from agentworkers.controller.infra import metrics
from agentworkers.controller.kopf.kopf_fixes import Refused
from agentworkers.controller.passes import configs, identities, lineage, pools, quotas
from agentworkers.core.access import worker_of
from agentworkers.core.checks import check_kind, check_reasoning_api, check_secrets
from agentworkers.core.inputs import check as check_inputs
from agentworkers.core.objects import meta, phase
from agentworkers.core.revisions import (
    Standalone,
    check_standalone,
    effective_map,
    standalone_source,
)
from agentworkers.core.spawning import ancestor_profile, check_binding_write, check_spawn
from agentworkers.core.tracing import check_spawn_trace
from agentworkers.core.tree import Shape, check_tree
from agentworkers.errors import (
    REFUSALS,
    ForeignRevisionError,
    InvalidSpecError,
    NotYourChildError,
    ReasoningAPIUnsupportedError,
    Refusal,
    SecretNotAllowedError,
    UnknownWorkerError,
    WorkerFinishedError,
    describe,
)
from agentworkers.kube.repository import Repository
from agentworkers.virtualagent import Profile


def _refuse(error: Refusal, counter: Counter = metrics.CONFIG_REFUSALS) -> Refused:
    counter.labels(reason=error.reason, stage="admission").inc()
    return Refused(error)


def _standalone(
    storage: Repository, namespace: str, agent: str, skip: str | None = None
) -> list[Standalone]:
    """The agent's standalone profiles as its pass reads them (`configs`: from the store),
    but `skip` (the one under review, whose new spec the caller adds) and an invalid
    neighbour, which is its own problem, reported on it."""
    bodies = [
        item for item in configs.live_profiles(storage, namespace, agent) if meta(item).name != skip
    ]
    return [standalone for _, standalone in configs.read_profiles(bodies, skip_invalid=True)]


def validate_agent_config(
    storage: Repository, spec: dict[str, Any], name: str, namespace: str
) -> None:
    try:
        config = AgentConfigSpec.model_validate(spec)
        effective_map(name, config, _standalone(storage, namespace, name))
        model = _resolved_model(storage, namespace, config.model)
        if config.model.reasoning_api is not None and model and model.provider != "anthropic":
            raise ReasoningAPIUnsupportedError(
                f"{reasoning_api_rule(model.provider)} (ModelProvider {config.model.provider_ref})",
                field="spec.model.reasoningAPI",
            )
    except ValidationError as e:
        raise _refuse(describe(e)) from e
    except REFUSALS as e:
        raise _refuse(e) from e


def _resolved_model(
    storage: Repository, namespace: str, model: ModelDefaults
) -> ModelDefaults | None:
    """The model defaults with their ModelProvider's api, endpoint and key in, as a run
    would resolve them now; None while the provider is missing or invalid (the run waits
    for it and says so)."""
    if model.provider_ref is None:
        return model
    found = storage.get("modelproviders", namespace, model.provider_ref)
    try:
        return model.with_provider(ModelProviderSpec.model_validate((found or {})["spec"]))
    except (KeyError, ValidationError):
        return None


def validate_profile(
    storage: Repository,
    spec: dict[str, Any],
    name: str,
    namespace: str,
    warnings: list[str],
    created: str = "",
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
            profile_spec.agent, config_spec, [*others, Standalone(name, profile_spec, created)]
        )
        if name in effective.excluded:
            raise effective.excluded[name]
    except ValidationError as e:
        raise _refuse(describe(e)) from e
    except REFUSALS as e:
        raise _refuse(e) from e
    if name in effective.overridden:
        warnings.append(
            f"AgentConfig {profile_spec.agent}'s virtualAgents section declares key "
            f"{profile_spec.key!r}; it wins over {standalone_source(name)}"
        )


def validate_worker(
    storage: Repository,
    body: Mapping[str, Any],
    old: dict[str, Any] | None,
    warnings: list[str],
    username: str = "",
    operator: str | None = None,
    admitted: lineage.Admitted | None = None,
    dry_run: bool = False,
    quota_pending: quotas.Pending | None = None,
) -> None:
    """A spawn is checked before it persists, against its tree's limits (`admitted`: the
    spawns let through that the store has not seen yet) and its namespace's TokenQuotas
    (`quota_pending` likewise); a query to a finished run is refused; only the operator
    (the identity `operator`) writes a binding."""
    spawned = meta(body)
    namespace = spawned.namespace
    try:
        check_binding_write(spawned.annotations, old, username == operator)
        worker = WorkerSpec.model_validate(body.get("spec") or {})
        if old is None:
            check_kind(worker)
    except ValidationError as e:
        raise _refuse_spawn(describe(e)) from e
    except REFUSALS as e:
        raise _refuse_spawn(e) from e
    # The run whose credentials these are: by its own account's name, or the warm pod or
    # the pooled account it runs as ("": such an account that no run holds now).
    spawner = worker_of(username, namespace)
    for of_account in (pools.spawner, identities.spawner):
        if spawner is None:
            spawner = of_account(storage, username, namespace)
    if old is None and spawner is not None and worker.parent != spawner:
        # A runtime's credentials spawn only its own children.
        raise _refuse_spawn(
            NotYourChildError(
                field="spec.parent",
                rule=f"worker {spawner} may only spawn workers whose parent is {spawner}, "
                f"not {worker.parent or 'none'}",
            )
        )
    if old is not None:
        _validate_worker_update(worker, old)
        return
    config_body = storage.get("agentconfigs", namespace, worker.agent)
    if config_body is None:
        warnings.append(f"AgentConfig {worker.agent!r} does not exist (yet); the run waits for it")
    else:
        _check_against_config(storage, namespace, worker, config_body)
    try:
        quotas.check(
            storage,
            namespace,
            spawned.name,
            worker.agent,
            quota_pending or quotas.Pending(),
            dry_run,
        )
    except REFUSALS as e:
        raise _refuse_spawn(e) from e
    parent_body = storage.get("workers", namespace, worker.parent) if worker.parent else None
    if worker.parent and parent_body is None:
        raise _refuse_spawn(
            UnknownWorkerError(field="spec.parent", rule=f"no worker named {worker.parent!r}")
        )
    if parent_body is not None:
        try:
            check_spawn_trace(worker.traceparent, parent_body)
        except REFUSALS as e:
            raise _refuse_spawn(e) from e
        name = spawned.name
        limits = ((config_body or {}).get("spec") or {}).get("limits") or {}
        _check_tree(
            storage,
            namespace,
            name,
            parent_body,
            admitted or lineage.Admitted(),
            dry_run,
            limits.get("tokenBudget"),
        )
    if worker.profile or worker.inputs:
        _check_profile_and_inputs(storage, namespace, worker, parent_body, config_body)


def _check_profile_and_inputs(
    storage: Repository,
    namespace: str,
    worker: WorkerSpec,
    parent_body: dict[str, Any] | None,
    config_body: dict[str, Any] | None,
) -> None:
    """The spawn's profile comes from its parent's frozen map, and its inputs fit the
    profile that bounds it (its own, or the one of the profile run it runs below)."""
    try:
        parent, ancestor = lineage.parent_run(storage, namespace, parent_body)
        bound, via = None, ""
        if worker.profile:
            frozen_revision = (
                storage.revision_spec(namespace, parent.frozen.name)
                if parent and parent.frozen
                else None
            )
            live = None
            if config_body is not None:
                status = AgentConfigStatus.model_validate(config_body.get("status") or {})
                live = status.active_revision
            bound = check_spawn(worker, parent, frozen_revision, live).profile
        elif ancestor is not None:
            # Not bound yet: the operator checks the inputs once it is, before the pod.
            bound, via = _bound_by(ancestor), meta(ancestor).name
        check_inputs(worker.inputs, bound, via)
    except ValidationError as e:
        raise _refuse_spawn(describe(e)) from e
    except REFUSALS as e:
        raise _refuse_spawn(e) from e


def _bound_by(ancestor: dict[str, Any]) -> Profile | None:
    """The profile a profile run's descendants are bounded by, if it is bound yet."""
    return ancestor_profile(
        WorkerSpec.model_validate(ancestor["spec"]),
        meta(ancestor).annotations.get(BINDING_ANNOTATION),
        WorkerStatus.model_validate(ancestor.get("status") or {}).binding,
    )


def _check_against_config(
    storage: Repository, namespace: str, worker: WorkerSpec, config_body: dict[str, Any]
) -> None:
    """What the Worker asks of its AgentConfig (secrets, Anthropic's thinking) it allows."""
    try:
        check_secrets(worker, (config_body.get("spec") or {}).get("allowedSecrets") or ())
        config = AgentConfigSpec.model_validate(config_body.get("spec") or {})
        model = _resolved_model(storage, namespace, config.model)
        if model is not None:
            check_reasoning_api(worker, model)
    except ValidationError:
        pass  # an invalid AgentConfig is refused on its own; the run waits for a fix
    except (SecretNotAllowedError, ReasoningAPIUnsupportedError) as e:
        raise _refuse_spawn(e) from e


def _check_tree(
    storage: Repository,
    namespace: str,
    name: str,
    parent_body: dict[str, Any],
    admitted: lineage.Admitted,
    dry_run: bool,
    child_budget: int | None,
) -> None:
    """The spawn fits its tree, counting the spawns just admitted; if it does (and is not
    a dry run), it is admitted too. `child_budget`: the child's own token budget."""
    try:
        chain = lineage.ancestry(storage, namespace, parent_body)
        root = meta(chain[-1]).name
        with lineage.tree_lock(namespace, root):
            # Settled before the walk, read after it: a spawn the store gets meanwhile is
            # in the walk or among the admitted, never in neither (counted once by name).
            admitted.settle(storage, namespace, root)
            in_store: set[str] = set()
            seen = lineage.tree_shape(
                storage,
                namespace,
                chain,
                lambda b: not lineage.refused_by_tree(b),
                name,
                in_store,
            )
            pending = [p for c, p in admitted.pending(namespace, root).items() if c not in in_store]
            shape = Shape(
                root=root,
                parent=seen.parent,
                depth=seen.depth,
                children=seen.children + pending.count(seen.parent),
                live=seen.live + len(pending),
                tokens_used=seen.tokens_used,
            )
            check_tree(
                lineage.tree_limits(storage, namespace, chain[-1]),
                chain[-1]["spec"]["agent"],
                shape,
                child_budget,
            )
            if not dry_run:
                admitted.add(namespace, root, name, seen.parent)
    except REFUSALS as e:
        raise _refuse_spawn(e) from e


def _validate_worker_update(worker: WorkerSpec, old: dict[str, Any]) -> None:
    if worker.inputs != WorkerSpec.model_validate(old.get("spec") or {}).inputs:
        raise _refuse_spawn(
            InvalidSpecError(field="spec.inputs", rule="is immutable: it is fixed at creation")
        )
    ended = phase(old)
    old_queries = (old.get("spec") or {}).get("queries") or []
    if len(worker.queries) > len(old_queries) and ended in TERMINAL_PHASES:
        raise _refuse_spawn(
            WorkerFinishedError(
                field="spec.queries", rule=f"the run is {ended}; a finished worker takes no query"
            )
        )


def _refuse_spawn(error: Refusal) -> Refused:
    return _refuse(error, metrics.SPAWN_REFUSALS)


def validate_revision(username: str, operator: str | None) -> None:
    """Revisions are snapshots the operator cuts; no other client writes one."""
    if username != operator:
        raise _refuse(
            ForeignRevisionError(
                field="AgentConfigRevision",
                rule="revisions are written only by the operator (change the AgentConfig or a "
                "VirtualAgentProfile instead)",
            )
        )
