"""What a profile's input bounds mean: which inputs a child may receive, and how many.

The seed: ``InputPatterns`` bounds which inherited artifact references a child may
receive, matched against the canonical filename and MIME type; ``InputCount`` is the
most it may receive. An input here is a file of the parent's sandbox, named by its
canonical filename (a plain base name, no directory); its MIME type follows from that
name alone, never from anything the parent (or its model) says about it, so the match
is the configuration's decision. Pure.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Final

INPUT_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A canonical filename: letters, digits, '.', '_' and '-', starting with a letter or digit
(so never hidden, never '..', never a path)."""

MAX_INPUT_NAME_BYTES: Final = 255
"""Bound on a canonical filename: a file name's bound on Linux (NAME_MAX)."""

_NAME_RE = re.compile(INPUT_NAME_PATTERN)
# Python's built-in table only (a MimeTypes instance never reads the host's
# /etc/mime.types), so the admission webhook and the operator agree wherever they run.
_TABLE = mimetypes.MimeTypes()
# Types of files an agent works with that the built-in table lacks (or lacked before a
# later Python): ours win, so the answer does not change with the Python version.
_OURS: Final = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".jsonl": "application/jsonl",
    ".ndjson": "application/x-ndjson",
    ".go": "text/x-go",
    ".rs": "text/x-rust",
    ".ts": "text/x-typescript",
}
_ENCODINGS: Final = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}
OCTET_STREAM: Final = "application/octet-stream"


def is_canonical_name(name: str) -> bool:
    return bool(_NAME_RE.fullmatch(name)) and len(name.encode()) <= MAX_INPUT_NAME_BYTES


def media_type(name: str) -> str:
    """The canonical MIME type of a canonical filename, from its extension (case aside);
    a compressed file is its compression's type; ``application/octet-stream`` when unknown."""
    lowered = name.lower()
    _, dot, extension = lowered.rpartition(".")
    if dot and f".{extension}" in _OURS:
        return _OURS[f".{extension}"]
    guessed, encoding = _TABLE.guess_type(lowered, strict=False)
    if encoding is not None:
        return _ENCODINGS.get(encoding, OCTET_STREAM)
    return guessed or OCTET_STREAM


def matching_pattern(patterns: Iterable[str], name: str) -> str | None:
    """The first pattern the input named `name` matches, if any: a pattern matches the
    filename (case-sensitive, as files are) or the MIME type (case-insensitive, as MIME
    types are); ``*``, ``?`` and ``[...]`` as in a shell, ``/`` an ordinary character."""
    kind = media_type(name)
    for pattern in patterns:
        if fnmatchcase(name, pattern) or fnmatchcase(kind, pattern.lower()):
            return pattern
    return None
