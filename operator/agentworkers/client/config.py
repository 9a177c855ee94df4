"""The client's reads of the config plane: agents, revisions, profiles, diffs, and a
worker's effective config (`explain`). `Client` has these as methods."""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

from agentworkers.api import (
    AgentConfigRevisionSpec,
    AgentConfigSpec,
    FrozenProfile,
    WorkerSpec,
)
from agentworkers.api.agentconfig import AgentConfigStatus, TreeLimits
from agentworkers.api.names import (
    AGENT_LABEL,
    APPLIED_BY_ANNOTATION,
    BINDING_ANNOTATION,
    CLAIM_ANNOTATION,
)
from agentworkers.api.provider import ModelProviderSpec
from agentworkers.api.workerpod import IMAGE_DEFAULT_0_1_0
from agentworkers.client.errors import ClientError, NotFoundError, UnknownWorkerError, translate
from agentworkers.client.results import (
    Body,
    ExplainedField,
    Explanation,
    ProfileDiff,
    ProfileSet,
    QuotaInfo,
    RevisionInfo,
    WorkerInfo,
    diff_profiles,
    explain_fields,
    explain_mcp,
    revision_ref,
)
from agentworkers.core.effective import EffectiveConfig, resolve
from agentworkers.core.pods import EFFECTIVE_CONFIG_ENV, PLACEMENT
from agentworkers.core.pools import Claim
from agentworkers.core.spawning import decode_binding
from agentworkers.errors import REFUSALS, ApiError
from agentworkers.kube.api import ALL_NAMESPACES, Api
from agentworkers.virtualagent import Profile


class Reads:
    """Reads of one namespace, errors translated; the base of `Client`."""

    api: Api
    namespace: str

    def _get_object(
        self, plural: str, name: str, not_found: ClientError, namespace: str | None = None
    ) -> Body:
        try:
            found = self.api.get(plural, namespace or self.namespace, name)
        except ApiError as e:
            raise translate(e) from e
        if found is None:
            raise not_found
        return found

    def _items(
        self,
        plural: str,
        labels: str = "",
        *,
        all_namespaces: bool = False,
        namespace: str | None = None,
    ) -> builtins.list[Body]:
        """One LIST: of `namespace` (default: the client's), or of every namespace."""
        where = ALL_NAMESPACES if all_namespaces else namespace or self.namespace
        try:
            return list(self.api.list(plural, where, labels=labels).get("items", []))
        except ApiError as e:
            raise translate(e) from e

    def _unknown(self, name: str, namespace: str | None = None) -> UnknownWorkerError:
        return UnknownWorkerError(
            f"unknown worker {name!r} in namespace {namespace or self.namespace}"
        )

    def _get(self, name: str, namespace: str | None = None) -> Body:
        return self._get_object("workers", name, self._unknown(name, namespace), namespace)


def _active_name(agent: Body) -> str | None:
    """The AgentConfig's active revision's name, from its status."""
    status = AgentConfigStatus.model_validate(agent.get("status") or {})
    return status.active_revision.name if status.active_revision else None


class ConfigReads(Reads):
    def explain(self, name: str) -> Explanation:
        """The worker's effective config, and which layer (agent, worker, profile, clamp,
        inherited) set each field.

        Once the run has its pod, this is what the operator decided and the pod runs
        with. Before, it is worked out the same way: the agent layer is the revision the
        run pinned (a profiled child's binding) or froze, else the live AgentConfig; a
        profiled child's profile is the sealed snapshot in its binding annotation.
        """
        body = self._get(name)
        info = WorkerInfo.from_body(body)
        spec = info.spec
        inherited = info.status.inherited
        inherits = (
            f"profile {inherited.profile!r} of worker {inherited.worker}" if inherited else None
        )
        profile: Profile | None = None
        pinned: str | None = None
        if spec.profile:
            annotation = (body["metadata"].get("annotations") or {}).get(BINDING_ANNOTATION)
            if annotation is None:
                raise ClientError(
                    f"worker {name!r} has no binding yet: the operator binds a profiled "
                    "child at spawn (is it running?)"
                )
            try:
                binding = decode_binding(annotation)
            except REFUSALS as e:
                raise ClientError(f"{e.reason}: {e}") from e
            pinned = revision_ref(spec.agent, binding.config_revision_id)
            profile = binding.profile
        elif info.status.frozen_revision is not None:
            pinned = info.status.frozen_revision.name
        effective = self._pod_config(info.status.pod) if info.status.pod else None
        if effective is not None:
            where = f"AgentConfigRevision/{pinned}" if pinned else f"AgentConfig/{spec.agent}"
        else:
            effective, where = self._effective_now(spec, pinned, profile)
        return Explanation(
            name,
            spec.agent,
            spec.profile,
            where,
            explain_fields(effective),
            inherits,
            self._tree(body),
            self._pod_knobs(spec.agent, info.status.pod),
            explain_mcp(effective, info.status.mcp_servers),
        )

    def _effective_now(
        self, spec: WorkerSpec, pinned: str | None, profile: Profile | None
    ) -> tuple[EffectiveConfig, str]:
        """The config a run without its pod yet would start with, and where its agent layer
        comes from: the pinned revision, else the live AgentConfig."""
        config, where, revision = self._config_at(spec.agent, pinned)
        if (ref := config.model.provider_ref) is not None:
            # As the run will start: with its provider as it is now.
            missing = NotFoundError(f"unknown ModelProvider {ref!r} in namespace {self.namespace}")
            provider = ModelProviderSpec.model_validate(
                self._get_object("modelproviders", ref, missing).get("spec") or {}
            )
            config = config.model_copy(update={"model": config.model.with_provider(provider)})
            where = f"{where} with ModelProvider/{ref}"
        if spec.profile and profile is None and revision is not None:
            # An older binding without the sealed snapshot: the pinned revision's map has it.
            found = [
                p.profile for p in revision.profile_map.profiles if p.profile.key == spec.profile
            ]
            profile = found[0] if found else None
        return resolve(config, spec, profile), where

    def _clocks(self, chain: builtins.list[Body]) -> builtins.list[ExplainedField]:
        """The run's three clocks and where each came from: its own spec, its agent's
        `spec.worker`, or (a deadline) cut to what was left of its parent's."""
        spec, status = chain[0].get("spec") or {}, chain[0].get("status") or {}
        try:
            template = (self._agent_body(spec["agent"]).get("spec") or {}).get("worker") or {}
        except NotFoundError:
            template = {}
        found = []
        for key in ("deadlineSeconds", "idleTimeoutSeconds", "ttlSecondsAfterFinished"):
            value, layer = spec.get(key), "worker"
            if value is None:
                value, layer = template.get(key), f"AgentConfig/{spec['agent']}"
            found.append(
                ExplainedField(f"clock.{key}", value, layer if value is not None else "none")
            )
        if status.get("deadlineAt"):
            parent = chain[1] if len(chain) > 1 else {}
            cut = (parent.get("status") or {}).get("deadlineAt") == status["deadlineAt"]
            layer = f"parent {parent['metadata']['name']}" if cut else "start + deadlineSeconds"
            found.append(ExplainedField("clock.deadlineAt", status["deadlineAt"], layer))
        return found

    def _pod_knobs(self, agent: str, pod: str | None) -> tuple[ExplainedField, ...]:
        """Where and how the run's pod runs (image, runtime class, placement, resources,
        the Kueue LocalQueue it waits in), and who set each knob: its AgentConfig's
        spec.worker, else the install's defaults (the operator's `--worker-defaults`, the
        chart's workerDefaults). The values are the pod's once it exists; before, an install
        default shows as such."""
        try:
            own = (self._agent_body(agent).get("spec") or {}).get("worker") or {}
        except NotFoundError:
            own = {}
        if own.get("image") == IMAGE_DEFAULT_0_1_0:
            own = {k: v for k, v in own.items() if k != "image"}
        found: Body = {}
        if pod is not None:
            with contextlib.suppress(ApiError):  # not readable with these credentials
                found = self.api.get("pods", self.namespace, pod) or {}
        spec = found.get("spec") or {}
        container = (spec.get("containers") or [{}])[0]
        running = {
            **{key: spec.get(key) for key in PLACEMENT},
            "image": container.get("image"),
            "resources": container.get("resources"),
            "imagePullSecrets": [s["name"] for s in spec.get("imagePullSecrets") or []] or None,
        }
        rows = []
        for key in ("image", "imagePullSecrets", *PLACEMENT, "resources"):
            value = running[key] if found else own.get(key)
            if value is None and key != "image":
                continue  # neither the agent nor (as far as its pod shows) the install set it
            layer = f"AgentConfig/{agent}" if own.get(key) is not None else "install"
            rows.append(ExplainedField(f"pod.{key}", value or "the install's", layer))
        for key in ("serviceAccountAnnotations", "queueName"):  # the agent's own only
            if own.get(key):
                rows.append(ExplainedField(f"pod.{key}", own[key], f"AgentConfig/{agent}"))
        return tuple(rows)

    def _tree(self, body: Body) -> tuple[ExplainedField, ...]:
        """The run's place in its tree and the tree's limits: the root's AgentConfig's
        `spec.tree`, or the defaults."""
        chain = [body]
        while (parent := (chain[-1].get("spec") or {}).get("parent")) and len(chain) <= 64:
            chain.append(self._get(parent))
        root = chain[-1]
        agent = root["spec"]["agent"]
        try:
            limits = AgentConfigSpec.model_validate(self._agent_body(agent)["spec"]).tree
        except NotFoundError:
            limits = None
        limits = limits or TreeLimits()
        place = [
            ExplainedField("tree.root", root["metadata"]["name"], "tree"),
            ExplainedField("tree.depth", len(chain) - 1, "tree"),
        ]
        return (
            *place,
            *self._clocks(chain),
            *(
                ExplainedField(f"tree.{key}", value, f"AgentConfig/{agent}" if set_ else "default")
                for key, value, set_ in (
                    ("maxDepth", limits.depth, limits.max_depth is not None),
                    ("maxChildren", limits.children, limits.max_children is not None),
                    (
                        "maxLiveDescendants",
                        limits.live_descendants,
                        limits.max_live_descendants is not None,
                    ),
                )
            ),
        )

    def _pod_config(self, pod: str) -> EffectiveConfig | None:
        """The effective config the operator gave the run's pod; None if it cannot be read."""
        try:
            found = self.api.get("pods", self.namespace, pod)
        except ApiError:
            return None  # not readable with these credentials
        for container in ((found or {}).get("spec") or {}).get("containers", []):
            for env in container.get("env") or ():
                if env.get("name") == EFFECTIVE_CONFIG_ENV and env.get("value"):
                    return EffectiveConfig.model_validate_json(env["value"])
        # A warm pod's run came with its claim (docs/scaling.md, "Warm pool").
        claim = (((found or {}).get("metadata") or {}).get("annotations") or {}).get(
            CLAIM_ANNOTATION
        )
        if claim:
            return EffectiveConfig.model_validate_json(Claim.model_validate_json(claim).effective)
        return None

    def _config_at(
        self, agent: str, revision: str | None
    ) -> tuple[AgentConfigSpec, str, AgentConfigRevisionSpec | None]:
        if revision is not None:
            try:
                spec = self._revision_spec(revision)
                return spec.config, f"AgentConfigRevision/{revision}", spec
            except NotFoundError:
                pass  # pruned: the live config is the best there is
        body = self._agent_body(agent)
        return AgentConfigSpec.model_validate(body["spec"]), f"AgentConfig/{agent}", None

    def agents(self) -> builtins.list[str]:
        return sorted(b["metadata"]["name"] for b in self._items("agentconfigs"))

    def _agent_body(self, agent: str) -> Body:
        missing = NotFoundError(f"unknown agent {agent!r} in namespace {self.namespace}")
        return self._get_object("agentconfigs", agent, missing)

    def _revision_body(self, name: str) -> Body:
        missing = NotFoundError(f"unknown revision {name!r} in namespace {self.namespace}")
        return self._get_object("agentconfigrevisions", name, missing)

    def _revision_spec(self, name: str) -> AgentConfigRevisionSpec:
        return AgentConfigRevisionSpec.model_validate(self._revision_body(name)["spec"])

    def _active(self, agent: str) -> str | None:
        return _active_name(self._agent_body(agent))

    @staticmethod
    def _revision_info(body: dict[str, Any], active: str | None) -> RevisionInfo:
        spec = AgentConfigRevisionSpec.model_validate(body["spec"])
        name = body["metadata"]["name"]
        return RevisionInfo(
            name=name,
            agent=spec.agent,
            revision=spec.revision,
            digest=spec.digest,
            created=body["metadata"].get("creationTimestamp", ""),
            active=name == active,
            profiles=len(spec.profile_map.profiles),
            namespace=body["metadata"].get("namespace", ""),
            applied_by=(body["metadata"].get("annotations") or {}).get(APPLIED_BY_ANNOTATION, ""),
        )

    def revisions(
        self, agent: str | None = None, *, all_namespaces: bool = False
    ) -> builtins.list[RevisionInfo]:
        """The revision history of `agent` (None: of every agent) in the namespace, or in
        every namespace; by namespace, agent, then id. Two LISTs, whatever the count."""
        return [info for info, _ in self._revisions(agent, all_namespaces)]

    def profile_sets(
        self, agent: str | None = None, *, all_namespaces: bool = False
    ) -> builtins.list[ProfileSet]:
        """The profiles of the active revision of `agent` (None: of every agent that has
        one) in the namespace, or in every namespace; by namespace, then agent."""
        return [
            ProfileSet(info, spec.profile_map.profiles)
            for info, spec in self._revisions(agent, all_namespaces)
            if info.active
        ]

    def quotas(self, *, all_namespaces: bool = False) -> builtins.list[QuotaInfo]:
        """The TokenQuotas of the namespace (or of every one) and their usage this window,
        by namespace, then name."""
        found = map(QuotaInfo.from_body, self._items("tokenquotas", all_namespaces=all_namespaces))
        return sorted(found, key=lambda q: (q.namespace, q.name))

    def _revisions(
        self, agent: str | None, all_namespaces: bool
    ) -> builtins.list[tuple[RevisionInfo, AgentConfigRevisionSpec]]:
        if agent and not all_namespaces:
            actives = {(self.namespace, agent): self._active(agent)}
        else:
            actives = {
                (b["metadata"].get("namespace", ""), b["metadata"]["name"]): _active_name(b)
                for b in self._items("agentconfigs", all_namespaces=all_namespaces)
            }
        labels = f"{AGENT_LABEL}={agent}" if agent else ""
        found = []
        for body in self._items("agentconfigrevisions", labels, all_namespaces=all_namespaces):
            spec = AgentConfigRevisionSpec.model_validate(body["spec"])
            owner = (body["metadata"].get("namespace", self.namespace), spec.agent)
            found.append((self._revision_info(body, actives.get(owner)), spec))
        return sorted(found, key=lambda r: (r[0].namespace, r[0].agent, r[0].revision))

    def revision(
        self, agent: str, ref: str | int | None = None
    ) -> tuple[RevisionInfo, AgentConfigRevisionSpec]:
        """One revision of the agent (by id or name); None: the active one."""
        active = self._active(agent)
        name = revision_ref(agent, ref) if ref is not None else active
        if name is None:
            raise NotFoundError(f"agent {agent!r} has no active revision yet")
        body = self._revision_body(name)
        info = self._revision_info(body, active)
        if info.agent != agent:
            raise NotFoundError(f"revision {name!r} belongs to agent {info.agent!r}, not {agent!r}")
        return info, AgentConfigRevisionSpec.model_validate(body["spec"])

    def profiles(self, agent: str, revision: str | int | None = None) -> ProfileSet:
        """The profiles of a revision's frozen map (default: the active revision)."""
        info, spec = self.revision(agent, revision)
        return ProfileSet(info, spec.profile_map.profiles)

    def profile(self, agent: str, key: str, revision: str | int | None = None) -> FrozenProfile:
        found = self.profiles(agent, revision)
        for frozen in found.profiles:
            if frozen.profile.key == key:
                return frozen
        known = ", ".join(p.profile.key for p in found.profiles) or "none"
        raise NotFoundError(
            f"no profile {key!r} in revision {found.revision.name} (known: {known})"
        )

    def diff_revisions(self, agent: str, before: str | int, after: str | int) -> ProfileDiff:
        """How the profile maps of two revisions differ."""
        old, old_spec = self.revision(agent, before)
        new, new_spec = self.revision(agent, after)
        return ProfileDiff(
            agent, old, new, diff_profiles(old_spec.profile_map, new_spec.profile_map)
        )
