"""A Worker's inputs: checked against the profile that bounds the run, and decoded. Pure.

A spawn hands its child files of its own sandbox (`WorkerSpec.inputs`). A run under a
virtual profile (its own, or the one of the profile run it runs below) receives at most
the profile's `inputCount` of them, each matching one of its `inputPatterns`; inputs
the profile's `inputDisposition` says to give inline must be UTF-8 text. Any other run
receives what the API's bounds allow. Admission checks all of this before the Worker
persists; the operator checks the bounds again before its pod exists (its copy of a
Worker keeps no content); the run checks each input's digest, and that an inline one is
text, before it takes it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from agentworkers.api.worker import MAX_INPUT_BYTES, MAX_INPUTS_BYTES, WorkerInput
from agentworkers.errors import InputNotAllowedError, InvalidInputError
from agentworkers.virtualagent import Profile, is_canonical_name, matching_pattern, media_type

INPUTS_DIR = "inputs"  # where a run's attachment inputs are, in its sandbox
INLINE = "inline"


@dataclass(frozen=True)
class Input:
    """An input, decoded and checked."""

    name: str
    media_type: str
    data: bytes


def encode(name: str, data: bytes) -> WorkerInput:
    """The spec entry for a file named `name` with content `data`."""
    if not is_canonical_name(name):
        raise InvalidInputError(
            f"{name!r} is not a canonical filename (letters, digits, '.', '_' and '-', "
            "starting with a letter or digit): copy the file to such a name first",
            "name",
        )
    return WorkerInput(
        name=name,
        sha256=hashlib.sha256(data).hexdigest(),
        content=base64.b64encode(data).decode("ascii"),
    )


def decode(inputs: Sequence[WorkerInput], field: str = "spec.inputs") -> list[Input]:
    """The inputs' content, each checked against its digest and the size bounds."""
    decoded: list[Input] = []
    seen: set[str] = set()
    total = 0
    for index, item in enumerate(inputs):
        where = f"{field}[{index}]"
        if item.name in seen:
            raise InvalidInputError(f"duplicate name {item.name!r}", f"{where}.name")
        seen.add(item.name)
        try:
            data = base64.b64decode(item.content, validate=True)
        except binascii.Error as e:
            raise InvalidInputError(f"not base64: {e}", f"{where}.content") from e
        if len(data) > MAX_INPUT_BYTES:
            raise InvalidInputError(
                f"{len(data)} bytes exceeds the maximum {MAX_INPUT_BYTES}", f"{where}.content"
            )
        total += len(data)
        if total > MAX_INPUTS_BYTES:
            raise InvalidInputError(
                f"the inputs hold more than {MAX_INPUTS_BYTES} bytes in all", f"{where}.content"
            )
        digest = hashlib.sha256(data).hexdigest()
        if digest != item.sha256.lower():
            raise InvalidInputError(
                f"the content's SHA-256 is {digest}, not {item.sha256}", f"{where}.sha256"
            )
        decoded.append(Input(item.name, media_type(item.name), data))
    return decoded


def check_bounds(inputs: Sequence[WorkerInput], profile: Profile | None, via: str = "") -> None:
    """`profile` (the run's own, or the one of the profile run `via` it runs below) lets
    the run receive inputs of these names (their count and patterns); else the refusal,
    naming the rule. Reads no content: the operator's copy of a Worker has none."""
    if profile is None or not inputs:
        return
    whose = _whose(profile, via)
    if len(inputs) > profile.input_count:
        raise InputNotAllowedError(
            f"{len(inputs)} inputs exceeds inputCount {profile.input_count} of {whose}",
            "spec.inputs",
        )
    patterns = profile.input_patterns or ()
    for index, item in enumerate(inputs):
        if matching_pattern(patterns, item.name) is None:
            allowed = ", ".join(patterns) or "none"
            raise InputNotAllowedError(
                f"{item.name!r} ({media_type(item.name)}) matches no inputPatterns of {whose} "
                f"({allowed})",
                f"spec.inputs[{index}].name",
            )


def check_inline(decoded: Sequence[Input], disposition: str, whose: str) -> None:
    """Inputs given inline (in the first message: `disposition` inline, as `whose`, the
    profile, says) are UTF-8 text."""
    if disposition != INLINE:
        return
    for index, item in enumerate(decoded):
        if not _is_text(item.data):
            raise InputNotAllowedError(
                f"{item.name!r} is not UTF-8 text, and {whose} gives its inputs inline "
                "(inputDisposition inline)",
                f"spec.inputs[{index}].content",
            )


def check(inputs: Sequence[WorkerInput], profile: Profile | None, via: str = "") -> list[Input]:
    """Admission's whole check: the inputs decoded (`decode`), within the profile's
    bounds (`check_bounds`), text where it gives them inline (`check_inline`)."""
    decoded = decode(inputs)
    check_bounds(inputs, profile, via)
    if profile is not None:
        check_inline(decoded, profile.input_disposition, _whose(profile, via))
    return decoded


def _whose(profile: Profile, via: str) -> str:
    return f"profile {profile.key!r}" + (f" (of {via}, which this run runs below)" if via else "")


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
