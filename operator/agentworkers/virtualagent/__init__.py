"""Virtual-agent profiles: bounded, non-recursive overlays a top-level agent applies to
the child runs it spawns, frozen per run and pinned on each child task.

A virtual agent is not a registered agent: it is never listed or started as one, and
the child task stays the owning agent's. A profile is a per-run configuration
projection, declared in the agent's configuration and reduced to one canonical form
(``normalize_profile``) whose SHA-256 (``profile_hash``) matches the Go seed's byte for
byte. The overlay can narrow model parameters, skills, tools and limits and add
instructions; it has no field that could widen anything, attach capabilities, own
providers, hooks or memory, recurse into another profile or target A2A.

Pure: no I/O. The live config revision reaches ``FrozenMap`` as a callable.

Modules: ``constants`` (bounds), ``errors``, ``models``, ``bounds`` (schema metadata),
``canonical`` (Go-compatible JSON), ``text`` (Go string rules), ``validation``,
``normalization``, ``overlay_ops`` (set operations, clamps), ``frozen`` (freeze, bind,
pin), ``inputs`` (which inputs a profile lets a child receive).
"""

from agentworkers.virtualagent.bounds import Bounds
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
    MAX_TOOL_LIST_ENTRIES,
    REASONING_EFFORTS,
)
from agentworkers.virtualagent.errors import (
    InvalidKeyError,
    InvalidMapError,
    InvalidOverlayError,
    InvalidProfileError,
    InvalidSelectedProfileError,
    MissingProfileError,
    NoProfileMapError,
    ProfileRecursionError,
    StaleProfilePinError,
    TamperedBindingError,
    UnknownProfileError,
    VirtualAgentError,
)
from agentworkers.virtualagent.frozen import FrozenMap, LiveRevisionReader, clone_binding
from agentworkers.virtualagent.inputs import (
    INPUT_NAME_PATTERN,
    MAX_INPUT_NAME_BYTES,
    is_canonical_name,
    matching_pattern,
    media_type,
)
from agentworkers.virtualagent.models import Binding, Overlay, Profile, ProfileMap
from agentworkers.virtualagent.normalization import (
    normalize_map,
    normalize_overlay,
    normalize_profile,
    profile_hash,
)
from agentworkers.virtualagent.overlay_ops import (
    block_name,
    clamp_max,
    intersect_strings,
    overlay_clamp_max_steps,
    overlay_clamp_max_tokens,
    overlay_clamp_token_budget,
    union_strings,
)
from agentworkers.virtualagent.validation import (
    validate_binding,
    validate_key,
    validate_map,
    validate_overlay,
    validate_profile,
)

__all__ = [
    "DEFAULT_MAX_PROFILES",
    "HEX_DIGEST_PATTERN",
    "INPUT_DISPOSITIONS",
    "INPUT_NAME_PATTERN",
    "KEY_PATTERN",
    "MAX_ENTRY_LENGTH",
    "MAX_INPUT_NAME_BYTES",
    "MAX_INSTRUCTIONS_BYTES",
    "MAX_KEY_LENGTH",
    "MAX_LABEL_LENGTH",
    "MAX_MAX_STEPS",
    "MAX_MAX_TOKENS",
    "MAX_MAX_TOKEN_BUDGET",
    "MAX_MODEL_LENGTH",
    "MAX_SKILL_ENTRIES",
    "MAX_TOOL_LIST_ENTRIES",
    "REASONING_EFFORTS",
    "Binding",
    "Bounds",
    "FrozenMap",
    "InvalidKeyError",
    "InvalidMapError",
    "InvalidOverlayError",
    "InvalidProfileError",
    "InvalidSelectedProfileError",
    "LiveRevisionReader",
    "MissingProfileError",
    "NoProfileMapError",
    "Overlay",
    "Profile",
    "ProfileMap",
    "ProfileRecursionError",
    "StaleProfilePinError",
    "TamperedBindingError",
    "UnknownProfileError",
    "VirtualAgentError",
    "block_name",
    "clamp_max",
    "clone_binding",
    "intersect_strings",
    "is_canonical_name",
    "matching_pattern",
    "media_type",
    "normalize_map",
    "normalize_overlay",
    "normalize_profile",
    "overlay_clamp_max_steps",
    "overlay_clamp_max_tokens",
    "overlay_clamp_token_budget",
    "profile_hash",
    "union_strings",
    "validate_binding",
    "validate_key",
    "validate_map",
    "validate_overlay",
    "validate_profile",
]
