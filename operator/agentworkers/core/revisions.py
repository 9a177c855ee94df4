"""The config plane's decisions, with no I/O: effective profile maps, digests, revisions.

A profile comes in through one of two doors: a standalone VirtualAgentProfile, or the
AgentConfig's `virtualAgents` section. The effective map puts the section over the
standalone profiles (same key: the section's wins), normalises and validates it with
the map rules, and freezes it into an AgentConfigRevision with a digest. The same
content never cuts a new revision; new content gets the next revision id.

Standalone profiles are separate objects that admission checks one at a time, so a
burst of them can pass it together. Conflicts among them resolve as the Gateway API's
do: the oldest (by creation, then name) wins; a later one whose key is taken, or that
comes after the map is full, is left out and told why, and the agent keeps going.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic.alias_generators import to_camel

from agentworkers.api import (
    AgentConfigRevisionSpec,
    AgentConfigSpec,
    FrozenProfile,
    FrozenProfileMap,
)
from agentworkers.api.names import (
    ARGOCD_TRACKING_ANNOTATION,
    FLUX_NAME_LABEL,
    FLUX_NAMESPACE_LABEL,
)
from agentworkers.api.profile import VirtualAgentProfileSpec
from agentworkers.api.worker import TERMINAL_PHASES
from agentworkers.core.objects import meta, phase
from agentworkers.errors import AgentWorkersError, DuplicateKeyError, TooManyProfilesError
from agentworkers.virtualagent import (
    DEFAULT_MAX_PROFILES,
    FrozenMap,
    InvalidMapError,
    LiveRevisionReader,
    Profile,
    ProfileMap,
    VirtualAgentError,
    normalize_profile,
    profile_hash,
    validate_map,
    validate_profile,
)
from agentworkers.virtualagent.canonical import canonical_json, sha256_hex

SECTION_SOURCE = "AgentConfig"


def kube_path(field_path: str, prefix: str) -> str:
    """`overlay.max_tokens` under `spec` -> `spec.overlay.maxTokens` (what the user wrote)."""
    if not field_path:
        return prefix
    camel = ".".join(
        re.sub(r"^[a-z_]+", lambda m: to_camel(m.group(0)), part) for part in field_path.split(".")
    )
    return f"{prefix}.{camel}" if prefix else camel


def standalone_source(name: str) -> str:
    return f"VirtualAgentProfile/{name}"


@dataclass(frozen=True)
class Standalone:
    """A VirtualAgentProfile as the config plane sees it."""

    name: str
    spec: VirtualAgentProfileSpec
    # metadata.creationTimestamp (RFC 3339, so it sorts); "" for one not created yet.
    created: str = ""

    def order(self) -> tuple[str, str]:
        """Oldest first; one not created yet comes last."""
        return (self.created or "~", self.name)


@dataclass(frozen=True)
class EffectiveMap:
    """The map a revision freezes, with where each profile came from."""

    profile_map: ProfileMap
    sources: dict[str, str]
    # Standalone profiles a section profile of the same key overrides.
    overridden: tuple[str, ...] = field(default=())
    # Standalone profiles left out, by name: why (a TooManyProfiles or DuplicateKey error).
    excluded: dict[str, AgentWorkersError] = field(default_factory=dict)

    def frozen(self) -> FrozenProfileMap:
        return FrozenProfileMap(
            owner=self.profile_map.owner,
            max_profiles=self.profile_map.max_profiles or DEFAULT_MAX_PROFILES,
            profiles=tuple(
                FrozenProfile(profile=p, hash=profile_hash(p), source=self.sources[p.key])
                for p in self.profile_map.profiles
            ),
        )


def check_standalone(spec: VirtualAgentProfileSpec) -> Profile:
    """A standalone profile, validated on its own and normalised; errors name `spec.*` paths."""
    return canonical(spec.profile(), "spec")


def canonical(profile: Profile, where: str) -> Profile:
    """Validate the profile as written (a blank list entry is an error, not something to
    drop quietly), then normalise it. Errors name the path the user wrote, under `where`."""
    try:
        validate_profile(profile)
    except VirtualAgentError as error:
        raise type(error)(kube_path(error.field, where), error.rule) from error
    return normalize_profile(profile)


def effective_map(
    agent: str, spec: AgentConfigSpec, standalone: Iterable[Standalone]
) -> EffectiveMap:
    """Resolve, normalise and validate the agent's effective profile map.

    Raises a `VirtualAgentError` whose field is the path the user wrote: `spec.virtualAgents
    .profiles[2].overlay.maxTokens` for the section, `VirtualAgentProfile/<name>: spec...`
    for a standalone profile, `spec.virtualAgents` for map-wide rules.
    """
    section = spec.virtual_agents.profiles if spec.virtual_agents else ()
    max_profiles = spec.virtual_agents.max_profiles if spec.virtual_agents else 0
    chosen: dict[str, Profile] = {}
    sources: dict[str, str] = {}
    overridden: list[str] = []

    section_keys: set[str] = set()
    for index, entry in enumerate(section):
        where = f"spec.virtualAgents.profiles[{index}]"
        profile = canonical(entry.to_profile(agent), where)
        if profile.key in section_keys:
            raise InvalidMapError(f"{where}.key", f"duplicate key {profile.key!r} in the section")
        section_keys.add(profile.key)
        chosen[profile.key] = profile
        sources[profile.key] = SECTION_SOURCE

    cap = max_profiles if max_profiles > 0 else DEFAULT_MAX_PROFILES
    excluded: dict[str, AgentWorkersError] = {}
    for item in sorted(standalone, key=Standalone.order):
        where = f"{standalone_source(item.name)}: spec"
        profile = canonical(item.spec.profile(), where)
        if profile.key in section_keys:
            overridden.append(item.name)
        elif profile.key in chosen:
            excluded[item.name] = DuplicateKeyError(
                field=f"{where}.key",
                rule=f"key {profile.key!r} is already declared by {sources[profile.key]}, "
                "which is older",
            )
        elif len(chosen) >= cap:
            excluded[item.name] = TooManyProfilesError(
                field=where,
                rule=f"agent {agent!r} already has its maximum of {cap} profiles "
                "(spec.virtualAgents.maxProfiles); older profiles come first",
            )
        else:
            chosen[profile.key] = profile
            sources[profile.key] = standalone_source(item.name)

    profile_map = ProfileMap(
        owner=agent,
        max_profiles=max_profiles,
        profiles=tuple(chosen[k] for k in sorted(chosen)),
    )
    try:
        validate_map(profile_map)
    except VirtualAgentError as error:
        raise InvalidMapError(kube_path(error.field, "spec.virtualAgents"), error.rule) from error
    return EffectiveMap(profile_map, sources, tuple(overridden), excluded)


def digest(spec: AgentConfigSpec, profile_map: FrozenProfileMap) -> str:
    """SHA-256 of the canonical JSON (the virtualagent package's) of config plus frozen map."""
    document = {
        "config": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
        "profileMap": profile_map.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }
    return sha256_hex(canonical_json(document))


def revision_name(agent: str, revision: int) -> str:
    """Deterministic, so a retry after a crash finds the revision it made."""
    return f"{agent}-r{revision}"


@dataclass(frozen=True)
class ExistingRevision:
    name: str
    revision: int
    digest: str
    owner_uid: str | None


@dataclass(frozen=True)
class RevisionPlan:
    """What the handler does: create `create` (if any), point status at `active`, prune."""

    active: ExistingRevision
    create: AgentConfigRevisionSpec | None
    prune: tuple[str, ...]


def plan_revision(
    agent: str,
    spec: AgentConfigSpec,
    effective: EffectiveMap,
    existing: Sequence[ExistingRevision],
    active_name: str | None,
    pinned: Iterable[str] = (),
) -> RevisionPlan:
    """Decide the next revision.

    The history mirrors git's: content that a kept revision already holds re-activates
    that revision (same id, same digest), so a revert brings back the exact revision and
    the children bound to it start again. Content equal to the active revision's changes
    nothing (a re-apply, an operator restart); a revision a crashed pass made but never
    made active is adopted the same way. New content gets the next id, one past the
    highest ever kept, so ids only grow.
    """
    frozen = effective.frozen()
    content_digest = digest(spec, frozen)
    by_name = {r.name: r for r in existing}
    current = by_name.get(active_name or "")
    same = [r for r in existing if r.digest == content_digest]
    create: AgentConfigRevisionSpec | None = None
    if current is not None and current.digest == content_digest:
        active = current
    elif same:
        active = max(same, key=lambda r: r.revision)  # older histories may hold it twice
    else:
        newest = max((r.revision for r in existing), default=0)
        number = newest + 1
        create = AgentConfigRevisionSpec(
            agent=agent, revision=number, digest=content_digest, config=spec, profile_map=frozen
        )
        active = ExistingRevision(revision_name(agent, number), number, content_digest, None)
    return RevisionPlan(
        active=active,
        create=create,
        prune=prunable(
            existing, keep=spec.revision_history_limit, active=active.name, pinned=pinned
        ),
    )


def prunable(
    existing: Sequence[ExistingRevision], keep: int, active: str, pinned: Iterable[str]
) -> tuple[str, ...]:
    """Old revisions past the history limit, never the active one nor one a Worker pins,
    nor the newest: a revert can make an older revision active, and the newest one left
    keeps the next id past every id ever cut (ids never repeat)."""
    newest = max(existing, key=lambda r: r.revision, default=None)
    protected = {active, *pinned, *([newest.name] if newest else [])}
    history = sorted(
        (r for r in existing if r.name != active), key=lambda r: r.revision, reverse=True
    )
    # The active revision counts towards the limit: `keep` revisions in all.
    return tuple(r.name for r in history[max(keep - 1, 0) :] if r.name not in protected)


def pinned_by(agent: str, workers: Iterable[Mapping[str, Any]]) -> set[str]:
    """Revisions the live Workers of `agent` pin: the one a run froze at its start (its
    children are checked against it) and the one a child is bound to."""
    pinned: set[str] = set()
    for worker in workers:
        spec, status = worker.get("spec") or {}, worker.get("status") or {}
        if spec.get("agent") != agent or phase(worker) in TERMINAL_PHASES:
            continue
        if frozen := (status.get("frozenRevision") or {}).get("name"):
            pinned.add(frozen)
        if bound := (status.get("binding") or {}).get("revision"):
            pinned.add(revision_name(agent, int(bound)))
    return pinned


def applied_by(objects: Iterable[Mapping[str, Any]]) -> str:
    """The GitOps engines that applied an agent's inputs, as they mark the objects: Flux's
    Kustomization labels, Argo CD's tracking annotation (`<app>:<group>/<kind>:<ns>/<name>`).
    "" when none does (kubectl, a program)."""
    found: set[str] = set()
    for obj in objects:
        of = meta(obj)
        labels, annotations = of.labels, of.annotations
        if name := labels.get(FLUX_NAME_LABEL):
            found.add(f"Flux Kustomization {labels.get(FLUX_NAMESPACE_LABEL, '')}/{name}")
        elif tracking := annotations.get(ARGOCD_TRACKING_ANNOTATION):
            found.add(f"Argo CD Application {tracking.split(':', 1)[0]}")
    return ", ".join(sorted(found))


Fingerprint = tuple[tuple[str, int], ...]


def fingerprint(objects: Iterable[Mapping[str, Any]]) -> Fingerprint:
    """What an agent's inputs are, as the API server counts their changes: each object's
    uid and generation (which moves with the spec, not with status or labels)."""
    return tuple(sorted((of.uid, of.generation or 0) for of in map(meta, objects)))


# Measured in docs/gitops.md: one sync applies a commit's objects well within it.
DEFAULT_SETTLE_SECONDS = 2.0


class SettleWindow:
    """One change set, one revision: a change waits `seconds` after the last change to any
    of its agent's inputs (the AgentConfig and its profiles) before it is cut.

    A sync applies one commit's objects one by one, a few milliseconds apart; an agent
    whose inputs keep still for the window has had its whole change applied. `remaining`
    is asked only while a pass has something to cut (or refuse), `settled` once it has
    nothing left, so an unchanged agent never waits (an operator restart costs nothing).
    Safe across threads; the clock is the caller's (monotonic seconds).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._since: dict[tuple[str, str], tuple[Fingerprint, float]] = {}

    def remaining(self, key: tuple[str, str], inputs: Fingerprint, now: float) -> float:
        """Seconds the change must still wait: the window, counted from the first pass
        that saw these exact inputs."""
        with self._lock:
            seen = self._since.get(key)
            if seen is None or seen[0] != inputs:
                self._since[key] = seen = (inputs, now)
            return max(seen[1] + self.seconds - now, 0.0)

    def settled(self, key: tuple[str, str]) -> None:
        """The agent has nothing pending (cut, or nothing to cut): forget it."""
        with self._lock:
            self._since.pop(key, None)


def frozen_map(
    revision: AgentConfigRevisionSpec, live: LiveRevisionReader | None = None
) -> FrozenMap:
    """The revision's map as the virtualagent package freezes it (for spawns and pins)."""
    profile_map = ProfileMap(
        owner=revision.profile_map.owner,
        max_profiles=revision.profile_map.max_profiles,
        profiles=tuple(p.profile for p in revision.profile_map.profiles),
    )
    return FrozenMap.freeze(profile_map, str(revision.revision), revision.digest, live)
