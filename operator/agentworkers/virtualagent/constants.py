"""Size bounds and fixed vocabularies of virtual-agent profiles, single-sourced here.

The validators, the normalisers and the schema bounds the CRDs are generated from all
read these names, so a bound changes in exactly one place. Lengths are UTF-8 bytes.
"""

from typing import Final

MAX_KEY_LENGTH: Final = 128
"""Bound on a profile key, in bytes."""

MAX_LABEL_LENGTH: Final = 200
"""Bound on a profile label, in bytes."""

MAX_MODEL_LENGTH: Final = 128
"""Bound on the overlay model name, in bytes (after trimming)."""

MAX_SKILL_ENTRIES: Final = 100
"""Bound on the size of the overlay's skill-narrowing set."""

MAX_TOOL_LIST_ENTRIES: Final = 500
"""Bound on the size of each overlay exclusion list (disabled tools, paused servers)."""

MAX_INSTRUCTIONS_BYTES: Final = 16 * 1024
"""Bound on the additive, operator-authored specialist instructions, in bytes."""

MAX_MAX_TOKENS: Final = 1_000_000
"""Bound on the overlay max-tokens value."""

MAX_MAX_STEPS: Final = 100_000
"""Bound on the overlay max-steps value."""

MAX_MAX_TOKEN_BUDGET: Final = 10_000_000
"""Bound on the overlay token-budget value."""

DEFAULT_MAX_PROFILES: Final = 32
"""Profile-map cap used when a map declares no positive ``max_profiles``."""

MAX_ENTRY_LENGTH: Final = 200
"""Bound on one list entry (skill, tool, server, input pattern), in bytes."""

MAX_TEMPERATURE: Final = 2.0
"""Upper bound of the overlay temperature; the lower bound is 0."""

MAX_INPUT_COUNT: Final = 2**63 - 1
"""Upper bound of ``input_count``: the range of the Go ``int`` the seed declares."""

KEY_PATTERN: Final = r"^[a-z0-9][a-z0-9._-]*$"
"""Charset of a profile key: legible as a prompt label, safe as a map key and block name."""

HEX_DIGEST_PATTERN: Final = r"^[0-9a-fA-F]{64}$"
"""Shape of a pinned SHA-256 digest (config digest, profile hash)."""

REASONING_EFFORTS: Final = ("off", "low", "medium", "high")
"""Values the overlay ``reasoning_effort`` may take."""

INPUT_DISPOSITIONS: Final = ("", "attachment", "inline")
"""Values ``input_disposition`` may take: empty (the normal policy, which is
``attachment``: each input is a file in the child's sandbox), ``attachment``, or
``inline`` (each input's text is given in the child's first message instead)."""
