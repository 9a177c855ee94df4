"""Canonical forms: what two equal profiles are reduced to before they are hashed.

A profile declared by hand and one read back from a revision normalise to the same
value, so they hash the same. Normalisation trims the envelope's strings and the
instructions, turns each name list into a sorted set, and fills in the output schema's
hash. Omission stays byte-compatible: an empty exclusion list becomes ``None``, as if
never written, while an explicit empty skill set stays (it narrows to no skills).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast

from agentworkers.virtualagent.canonical import (
    RawJSON,
    canonical_json,
    check_json,
    sha256_hex,
)
from agentworkers.virtualagent.errors import InvalidProfileError
from agentworkers.virtualagent.models import POINTER_FIELDS, Overlay, Profile, ProfileMap
from agentworkers.virtualagent.text import trim_space


def sorted_set(names: Iterable[str] | None) -> tuple[str, ...] | None:
    """Trim each name, drop blanks and duplicates, sort; ``None`` when nothing is left."""
    kept = {trim_space(name) for name in names or ()}
    kept.discard("")
    return tuple(sorted(kept)) or None


def output_schema_json(schema: dict[str, Any]) -> bytes:
    """The output schema's canonical JSON; ``InvalidProfileError`` if JSON cannot carry it."""
    try:
        return canonical_json(schema)
    except ValueError as exc:
        raise _not_json(exc) from exc


def check_output_schema(schema: dict[str, Any]) -> None:
    """Raise as ``output_schema_json`` would, without encoding."""
    try:
        check_json(schema)
    except ValueError as exc:
        raise _not_json(exc) from exc


def _not_json(exc: ValueError) -> InvalidProfileError:
    return InvalidProfileError("output_schema", f"is not representable as JSON: {exc}")


def copy_profile(profile: Profile) -> Profile:
    """A copy of ``profile`` sharing no mutable value: only the output schema is mutable."""
    return profile.model_copy(update={"output_schema": _copy_schema(profile.output_schema)})


def _copy_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if schema is None else cast(dict[str, Any], _copy_json(schema))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copy_json(value: Any) -> Any:
    """A copy of a JSON value sharing nothing mutable: what a JSON round trip gives, faster."""
    kind = type(value)
    if kind is dict:
        return {key: _copy_json(item) for key, item in value.items()}
    if kind is list:
        return [_copy_json(item) for item in value]
    if kind in _SCALARS:
        return value
    # Subclasses, tuples, other mappings: the round trip turns them into plain JSON types.
    return json.loads(json.dumps(value))


def normalize_overlay(overlay: Overlay) -> Overlay:
    """The canonical overlay: sorted, de-duplicated lists and trimmed instructions."""
    skills = overlay.skills
    return overlay.model_copy(
        update={
            # Presence of the skill set is meaning (narrow), so empty stays empty.
            "skills": None if skills is None else sorted_set(skills) or (),
            "disabled_tools": sorted_set(overlay.disabled_tools),
            "paused_servers": sorted_set(overlay.paused_servers),
            "instructions": trim_space(overlay.instructions),
        }
    )


def _normalize(profile: Profile, *, copy: bool = True) -> tuple[Profile, bytes | None]:
    """The canonical profile and its output schema's canonical JSON, computed once.

    ``copy=False`` leaves the output schema shared, for a result used only to hash.
    """
    schema = profile.output_schema
    schema_json = None if schema is None else output_schema_json(schema)
    normal = profile.model_copy(
        update={
            "key": trim_space(profile.key),
            "label": trim_space(profile.label),
            "parent": trim_space(profile.parent),
            "overlay": normalize_overlay(profile.overlay),
            "input_patterns": sorted_set(profile.input_patterns),
            "input_disposition": trim_space(profile.input_disposition),
            "output_schema": _copy_schema(schema) if copy else schema,
            "output_schema_hash": "" if schema_json is None else sha256_hex(schema_json),
        }
    )
    return normal, schema_json


def normalize_profile(profile: Profile) -> Profile:
    """The canonical profile; it shares no mutable value with ``profile``.

    Raises ``InvalidProfileError`` when the output schema is not representable as JSON.
    """
    return _normalize(profile)[0]


def normalize_map(profile_map: ProfileMap) -> ProfileMap:
    """The canonical map: normalised profiles sorted by key, one per key.

    For a duplicate key the last profile wins; a profile whose key is blank is dropped.
    """
    by_key: dict[str, Profile] = {}
    for profile in profile_map.profiles:
        normal = normalize_profile(profile)
        if normal.key:
            by_key[normal.key] = normal
    return profile_map.model_copy(
        update={
            "owner": trim_space(profile_map.owner),
            "profiles": tuple(by_key[key] for key in sorted(by_key)),
        }
    )


def overlay_document(overlay: Overlay) -> dict[str, Any]:
    """The generic value of an overlay, with Go's ``omitempty`` applied."""
    # Pointer fields are present whenever set, even to zero or to an empty skill set;
    # slices and strings are omitted when empty.
    doc = {name: getattr(overlay, name) for name in POINTER_FIELDS}
    doc = {name: value for name, value in doc.items() if value is not None}
    for name in ("disabled_tools", "paused_servers", "instructions"):
        if getattr(overlay, name):
            doc[name] = getattr(overlay, name)
    return doc


def profile_document(profile: Profile) -> dict[str, Any]:
    """The generic value of a profile: ``key`` and ``overlay`` always, the rest if set."""
    doc: dict[str, Any] = {"key": profile.key, "overlay": overlay_document(profile.overlay)}
    for name in ("label", "parent", "input_patterns", "input_count", "input_disposition"):
        if getattr(profile, name):
            doc[name] = getattr(profile, name)
    if profile.output_schema is not None:
        # A json.RawMessage is omitted only when it has no bytes; ``{}`` is kept.
        doc["output_schema"] = profile.output_schema
    if profile.output_schema_hash:
        doc["output_schema_hash"] = profile.output_schema_hash
    return doc


def _document_json(normal: Profile, schema_json: bytes | None) -> bytes:
    document = profile_document(normal)
    if schema_json is not None:
        # Already canonical: embedded rather than encoded a second time.
        document["output_schema"] = RawJSON(schema_json.decode("utf-8"))
    try:
        return canonical_json(document)
    except ValueError as exc:
        raise InvalidProfileError("", f"cannot be hashed: {exc}") from exc


def profile_canonical_json(profile: Profile) -> bytes:
    """The canonical JSON of the normalised profile: the bytes its hash is taken over."""
    return _document_json(*_normalize(profile, copy=False))


def profile_hash(profile: Profile) -> str:
    """SHA-256 hex of the normalised profile's canonical JSON: the digest a binding pins.

    Equal content hashes equal whatever door it came in by and whatever the list or key
    order; any change in content changes the hash. Raises ``InvalidProfileError`` when
    the profile cannot be encoded as JSON.
    """
    return sha256_hex(profile_canonical_json(profile))


def normalize_and_hash(profile: Profile) -> tuple[Profile, str]:
    """The canonical profile and its hash (``profile_hash``), normalising only once."""
    normal, schema_json = _normalize(profile)
    return normal, sha256_hex(_document_json(normal, schema_json))
