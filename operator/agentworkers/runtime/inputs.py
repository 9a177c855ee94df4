"""Inputs, both ends: a parent's spawn reads files of its sandbox into the child's spec;
the child, at its start, checks each against its digest and takes it as its profile's
inputDisposition says.

The model names inputs by sandbox path only: the runtime reads the bytes, so no content
or URL the model writes ever becomes an input. `attachment` (the normal policy) writes
each input to ``inputs/<name>`` in the child's sandbox; `inline` gives its text in the
child's first message. Either way the first message starts with a note naming them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from agentworkers.api.worker import MAX_INPUT_BYTES, MAX_INPUTS, MAX_INPUTS_BYTES, WorkerInput
from agentworkers.core.inputs import INLINE, INPUTS_DIR, Input, check_inline, decode, encode
from agentworkers.errors import InvalidInputError
from agentworkers.runtime.tools import Sandbox, ToolError


def read(sandbox: Sandbox, paths: Sequence[str]) -> tuple[WorkerInput, ...]:
    """The spec entries for files of the sandbox, each named by its base name."""
    if len(paths) > MAX_INPUTS:
        raise ToolError(f"{len(paths)} inputs exceeds the maximum {MAX_INPUTS}")
    entries, total = [], 0
    for path in paths:
        data = sandbox.read_bytes(path, MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise ToolError(f"input {path!r} is larger than {MAX_INPUT_BYTES} bytes")
        total += len(data)
        if total > MAX_INPUTS_BYTES:
            raise ToolError(f"the inputs hold more than {MAX_INPUTS_BYTES} bytes in all")
        try:
            entries.append(encode(os.path.basename(path), data))
        except InvalidInputError as e:
            raise ToolError(f"input {path!r}: {e.rule}") from e
    return tuple(entries)


def take(root: str, inputs: Sequence[WorkerInput], disposition: str) -> str:
    """Check the inputs' digests and give them to the run: attachments are written under
    `root` (the sandbox); the note (inline inputs' text included) goes before the first
    message. Raises `InvalidInputError` for an input that is not what its digest says,
    `InputNotAllowedError` for one to give inline that is not text."""
    decoded = decode(inputs)
    if not decoded:
        return ""
    check_inline(decoded, disposition, "its profile")
    if disposition == INLINE:
        return "\n\n".join(_inline(item) for item in decoded) + "\n\n"
    directory = os.path.join(root, INPUTS_DIR)
    os.makedirs(directory, exist_ok=True)
    for item in decoded:
        with open(os.path.join(directory, item.name), "wb") as f:
            f.write(item.data)
    listed = "\n".join(
        f"- {INPUTS_DIR}/{i.name} ({i.media_type}, {len(i.data)} bytes)" for i in decoded
    )
    return f"Input files, in your sandbox:\n{listed}\n\n"


def _inline(item: Input) -> str:
    text = item.data.decode("utf-8")
    return f"Input {item.name} ({item.media_type}):\n<input name={item.name!r}>\n{text}\n</input>"
