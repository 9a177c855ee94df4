"""Freeze, bind, pin: the profile map frozen at a parent's run start, and child bindings.

The parent's run start freezes its validated profile map against the parent agent's
active config revision id and digest. A spawn selecting a profile is checked against
the frozen map (unknown, invalid, stale) before anything persists, and the accepted
spawn carries a ``Binding`` onto the child task. The child's run start checks that
binding against the map frozen then: a moved revision, an edited profile or a
tampered binding fails the child loudly, so a restart runs the exact profile or not
at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentworkers.virtualagent.errors import (
    InvalidSelectedProfileError,
    MissingProfileError,
    StaleProfilePinError,
    TamperedBindingError,
    UnknownProfileError,
    VirtualAgentError,
    nested,
)
from agentworkers.virtualagent.models import Binding, Profile, ProfileMap
from agentworkers.virtualagent.normalization import (
    copy_profile,
    normalize_and_hash,
    normalize_profile,
    profile_hash,
)
from agentworkers.virtualagent.text import trim_space
from agentworkers.virtualagent.validation import validate_binding, validate_map, validate_profile

LiveRevisionReader = Callable[[], tuple[str, str]]
"""Reads the parent agent's live config ``(revision_id, digest)``; may raise."""


def _short(digest: str) -> str:
    """A digest as error messages show it: 12 hex digits, or ``none``."""
    return digest[:12] if digest else "none"


class FrozenMap:
    """A profile map frozen against one parent-config revision; build it with ``freeze``.

    Per-run state: each parent run freezes its own; it is never shared between runs.
    """

    __slots__ = ("_config_digest", "_hashes", "_live", "_owner", "_profiles", "_revision_id")

    def __init__(
        self,
        *,
        owner: str,
        revision_id: str,
        config_digest: str,
        profiles: Mapping[str, Profile],
        hashes: Mapping[str, str],
        live: LiveRevisionReader | None,
    ) -> None:
        """Hold validated, normalised profiles and their hashes; use ``FrozenMap.freeze``."""
        self._owner = owner
        self._revision_id = revision_id
        self._config_digest = config_digest
        self._profiles = dict(profiles)
        self._hashes = dict(hashes)
        self._live = live

    @classmethod
    def freeze(
        cls,
        profile_map: ProfileMap,
        revision_id: str,
        config_digest: str,
        live: LiveRevisionReader | None = None,
    ) -> FrozenMap:
        """Validate ``profile_map`` and freeze its canonical form against a revision.

        Raises ``InvalidMapError`` for an invalid map, an empty owner included. ``live``
        is the optional staleness probe ``verify_current`` calls; ``None`` trusts the
        frozen revision.
        """
        validate_map(profile_map)
        # A valid map has unique, trimmed keys, so this is normalize_map's result.
        normalized = [normalize_and_hash(profile) for profile in profile_map.profiles]
        return cls(
            owner=trim_space(profile_map.owner),
            revision_id=revision_id,
            config_digest=config_digest,
            profiles={normal.key: normal for normal, _ in normalized},
            hashes={normal.key: digest for normal, digest in normalized},
            live=live,
        )

    @property
    def owner(self) -> str:
        """The top-level agent owning the map."""
        return self._owner

    @property
    def revision_id(self) -> str:
        """The parent-config revision the map is frozen against."""
        return self._revision_id

    @property
    def config_digest(self) -> str:
        """The digest of that parent-config revision."""
        return self._config_digest

    def profile(self, key: str) -> Profile | None:
        """A copy of the frozen (normalised) profile for ``key``, or ``None``."""
        profile = self._profiles.get(key)
        return None if profile is None else copy_profile(profile)

    def hash_of(self, key: str) -> str | None:
        """The frozen hash of the profile for ``key``, or ``None``."""
        return self._hashes.get(key)

    def verify_current(self) -> None:
        """The spawn-time staleness probe: the live revision must still be the frozen one.

        Raises ``StaleProfilePinError`` when it moved or cannot be read. Without a live
        reader the frozen revision is trusted.
        """
        if self._live is None:
            return
        try:
            revision_id, digest = self._live()
        except Exception as exc:
            # Fail closed: a revision that cannot be read cannot be shown current.
            raise StaleProfilePinError(
                "revision_id", f"cannot read the live parent-config revision: {exc}"
            ) from exc
        if revision_id != self._revision_id or digest != self._config_digest:
            raise StaleProfilePinError(
                "revision_id" if revision_id != self._revision_id else "config_digest",
                f"live parent-config revision {revision_id!r}/{_short(digest)} no longer "
                f"matches the frozen pin {self._revision_id!r}/{_short(self._config_digest)}",
            )

    def bind(self, profile: Profile) -> Binding:
        """The binding a spawn selecting ``profile`` persists on the child task.

        Agent and parent are the owner; the binding pins the frozen revision, digest and
        profile hash, and seals a snapshot of the frozen profile. Raises
        ``UnknownProfileError`` when the map has no profile with that key,
        ``InvalidSelectedProfileError`` when ``profile`` fails validation, and
        ``StaleProfilePinError`` when it is not the frozen definition.
        """
        frozen = self._profiles.get(profile.key)
        if frozen is None:
            raise UnknownProfileError("key", f"{profile.key!r} is not a profile of {self._owner!r}")
        try:
            validate_profile(profile)
        except VirtualAgentError as exc:
            raise nested(exc, "", InvalidSelectedProfileError) from exc
        frozen_hash = self._hashes[frozen.key]
        selected_hash = profile_hash(profile)
        if selected_hash != frozen_hash:
            raise StaleProfilePinError(
                "profile",
                f"{profile.key!r} hashes to {_short(selected_hash)}, not the frozen "
                f"definition's {_short(frozen_hash)}",
            )
        return Binding(
            agent_id=self._owner,
            key=frozen.key,
            label=frozen.label,
            parent=frozen.parent,
            config_revision_id=self._revision_id,
            config_digest=self._config_digest,
            profile_hash=frozen_hash,
            profile=copy_profile(frozen),
        )

    def verify_pin(self, binding: Binding) -> Profile:
        """The child-run-start check of a persisted binding against this map.

        In order: a malformed binding raises ``TamperedBindingError``; a key absent from
        the map ``MissingProfileError``; a revision or digest other than the frozen one
        ``StaleProfilePinError``; a profile hash, sealed snapshot, label or parent that
        disagrees ``TamperedBindingError``. Returns the profile the child must run under.
        """
        try:
            validate_binding(binding)
        except VirtualAgentError as exc:
            raise nested(exc, "", TamperedBindingError) from exc
        current = self._profiles.get(binding.key)
        if current is None:
            raise MissingProfileError(
                "key", f"{binding.key!r} is not in the current profile map of {self._owner!r}"
            )
        if (
            binding.config_revision_id != self._revision_id
            or binding.config_digest != self._config_digest
        ):
            raise StaleProfilePinError(
                "config_revision_id"
                if binding.config_revision_id != self._revision_id
                else "config_digest",
                f"current parent-config revision {self._revision_id!r}/"
                f"{_short(self._config_digest)} is not the bound "
                f"{binding.config_revision_id!r}/{_short(binding.config_digest)}",
            )
        current_hash = self._hashes[binding.key]
        if current_hash != binding.profile_hash:
            raise TamperedBindingError(
                "profile_hash",
                f"profile {binding.key!r} hashes to {_short(current_hash)}, the binding "
                f"pins {_short(binding.profile_hash)}",
            )
        # validate_binding checked that a sealed snapshot hashes to profile_hash, which
        # now equals the current hash: a present snapshot is the current profile.
        if binding.profile is None:
            raise TamperedBindingError("profile", "the sealed profile snapshot is missing")
        for name in ("label", "parent"):
            bound, actual = getattr(binding, name), getattr(current, name)
            if bound != actual:
                raise TamperedBindingError(
                    name, f"{bound!r} disagrees with the profile's {actual!r}"
                )
        # The map's validation made every parent the owner, so parent == owner here.
        return copy_profile(current)


def clone_binding(binding: Binding) -> Binding:
    """A defensive copy for crossing a persistence or task boundary.

    The sealed snapshot is normalised into a fresh profile that shares no mutable value
    with ``binding``.
    """
    snapshot = binding.profile
    return binding.model_copy(
        update={"profile": None if snapshot is None else normalize_profile(snapshot)}
    )
