"""Canonical JSON, byte for byte as the Go seed hashes it.

The seed canonicalises a value by ``json.Marshal``, decoding the bytes into a generic
``any`` and marshalling that again. The second marshal is what gets hashed, so this
module reproduces Go's ``encoding/json`` output for a *generic* value:

* objects with keys sorted bytewise, no whitespace;
* every number a ``float64``, printed as Go prints one (``1``, ``0.7``, ``1e-7``,
  ``1e+21``);
* strings escaped as Go escapes them: ``\\"`` ``\\\\`` ``\\b`` ``\\f`` ``\\n`` ``\\r``
  ``\\t``, other control characters and the HTML-sensitive ``<`` ``>`` ``&`` as
  ``\\u00XX``, U+2028 / U+2029 as ``\\u2028`` / ``\\u2029``, all else as raw UTF-8.

A walk first puts the value in a form Python's C encoder prints that way (surrogates
replaced, integral floats as ints, markers for the few numbers Python prints
differently); the encoder then sorts and escapes, and a last pass adds Go's HTML
escapes.

It knows nothing of profiles: ``normalization.profile_document`` makes the generic
value of one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

# Python's json escapes what Go does except the HTML-sensitive characters and the two
# JavaScript line terminators, which can only occur inside strings.
_GO_ONLY_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)
_ENCODE = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), check_circular=False
).encode
_SURROGATE = re.compile("[\ud800-\udfff]")
# A number Python cannot print as Go does, or a RawJSON, travels through json.dumps as
# this marker; it holds a lone surrogate, which no sanitised string can, so it never
# collides with content.
_MARKER = "\ud800"
_MARKED = re.compile('"\ud800([0-9]+)"')
# Integers up to 2**53 are exact as float64, so they print as themselves.
_EXACT_INT = 2**53


def _go_string(text: str) -> str:
    """A Python string as Go holds it: a lone surrogate is invalid UTF-8, so U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def format_float(value: float) -> str:
    """Print a float64 as Go's ``encoding/json`` does.

    Shortest round-trip digits (Python's ``repr`` and Go's ``strconv`` both pick
    them), in positional form unless ``|value| < 1e-6`` or ``|value| >= 1e21``, where
    Go switches to an exponent with at least one digit (``1e-7``, ``1.5e+21``).
    """
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not representable in JSON")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    fraction = fraction.rstrip("0")
    digits = (whole + fraction).lstrip("0")
    # value = 0.<digits> x 10**point
    point = len(whole) + (int(exponent) if exponent else 0) - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    if 1e-6 <= abs(value) < 1e21:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    scientific = point - 1
    head = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{head}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}".replace(
        "e-0", "e-"
    )


class RawJSON(str):
    """Text that is already canonical JSON, embedded as is (Go's ``json.RawMessage``)."""

    __slots__ = ()


def _special(text: str, specials: list[str]) -> str:
    """A marker json.dumps carries through, for ``text`` to be put in its place."""
    specials.append(text)
    return f"{_MARKER}{len(specials) - 1}"


def _number(value: int | float, specials: list[str]) -> int | float | str:
    """A number json.dumps prints as Go would, else a marker for Go's own text."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not representable in JSON")
        if value.is_integer():
            if abs(value) <= _EXACT_INT and (value or math.copysign(1.0, value) > 0):
                return int(value)
        elif abs(value) >= 1e-4:
            # Non-integral and below 2**53: repr is positional, as Go's is.
            return value
    elif abs(value) <= _EXACT_INT:
        return value
    try:
        return _special(format_float(float(value)), specials)
    except OverflowError:
        raise ValueError(f"{value} is out of the float64 range") from None


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise ValueError(f"object key {key!r} is not a string")
    return _go_string(key)


def _prepare(value: Any, specials: list[str]) -> Any:
    """A copy of ``value`` json.dumps encodes as Go would; raises for non-JSON values."""
    # Exact-type checks, and ASCII strings inline: this walk is most of a hash's cost.
    kind = type(value)
    if kind is str:
        return value if value.isascii() else _go_string(value)
    if kind is dict:
        return {
            key if type(key) is str and key.isascii() else _key(key): _prepare(item, specials)
            for key, item in value.items()
        }
    if kind is list or kind is tuple:
        return [_prepare(item, specials) for item in value]
    if kind is bool or value is None:
        return value
    if kind is int or kind is float:
        return _number(value, specials)
    if kind is RawJSON:
        return _special(value, specials)
    return _prepare(_plain(value), specials)


def _plain(value: object) -> object:
    """A subclass instance or other mapping as the plain JSON type it stands for."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Encode a generic JSON value (dict, list, tuple, str, int, float, bool, None).

    Raises ``ValueError`` for anything JSON cannot carry: NaN, infinities, numbers
    outside float64, non-string object keys, other types.
    """
    specials: list[str] = []
    # Python's C encoder does the work: its key sort (by code point) is Go's bytewise
    # UTF-8 sort, and its escapes are Go's but for the few translated below.
    text = _ENCODE(_prepare(value, specials))
    if specials:
        text = _MARKED.sub(lambda match: specials[int(match[1])], text)
    if "<" in text or ">" in text or "&" in text or not text.isascii():
        text = text.translate(_GO_ONLY_ESCAPES)
    return text.encode("utf-8")


def check_json(value: Any) -> None:
    """Raise ``ValueError`` where ``canonical_json`` would, without encoding."""
    _prepare(value, [])


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
