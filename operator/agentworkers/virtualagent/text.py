"""String primitives that behave as Go's do, so a profile normalises and measures alike.

Python's ``str.strip()`` and Go's ``strings.TrimSpace`` disagree on U+001C..U+001F
(whitespace to Python, not to Go); a trim that differed would change a profile's
canonical form and so its hash.
"""

# Go's unicode.IsSpace: the Latin-1 spaces plus the Unicode White_Space property.
_GO_WHITESPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def trim_space(text: str) -> str:
    """``strings.TrimSpace``: strip leading and trailing Go whitespace."""
    return text.strip(_GO_WHITESPACE)


def is_blank(text: str) -> bool:
    """Whether ``text`` is empty once Go whitespace is trimmed."""
    return not trim_space(text)


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes, the unit every length bound is stated in.

    A lone surrogate counts three bytes, as the U+FFFD Go would hold in its place.
    """
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
