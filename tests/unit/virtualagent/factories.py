"""Small builders shared by the virtual-agent tests."""

from __future__ import annotations

from typing import Any

from agentworkers.virtualagent import Binding, Overlay, Profile, ProfileMap

OWNER = "top-agent"
REVISION = "rev-1"
DIGEST = "a" * 64


def make_profile(key: str = "reviewer", **fields: Any) -> Profile:
    """A valid, normalised profile owned by ``OWNER``; ``fields`` override any field."""
    base: dict[str, Any] = {
        "key": key,
        "label": f"test label {key}",
        "parent": OWNER,
        "overlay": Overlay(model="profile-model", max_tokens=4000, skills=("review", "summarize")),
    }
    return Profile(**{**base, **fields})


def make_map(*profiles: Profile, owner: str = OWNER, max_profiles: int = 0) -> ProfileMap:
    return ProfileMap(owner=owner, max_profiles=max_profiles, profiles=profiles)


def make_binding(**fields: Any) -> Binding:
    """A well-shaped binding without a snapshot; ``fields`` override any field."""
    base: dict[str, Any] = {
        "agent_id": OWNER,
        "key": "reviewer",
        "label": "reviewer",
        "parent": OWNER,
        "config_revision_id": REVISION,
        "config_digest": DIGEST,
        "profile_hash": "b" * 64,
    }
    return Binding(**{**base, **fields})
