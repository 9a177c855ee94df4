"""Schema-only bounds for model fields: what the CRD schemas advertise, never enforced here.

A model field carries its bounds as ``Field(json_schema_extra=Bounds(...))``. That one
object serves two readers:

* ``Model.model_json_schema()`` calls it, so the OpenAPI keywords (``maxLength``,
  ``minimum``, ``enum``, ``pattern``, ``maxItems`` ...) appear in the generated schema,
  on the value itself rather than on the ``anyOf`` wrapper pydantic emits for an
  optional field;
* code can read it back as ``Model.model_fields[name].json_schema_extra``.

Construction never checks these (the ``validate_*`` functions do, and raise the
package's own errors). The advertised bounds are never stricter than the validators:
string lengths are bounded in UTF-8 bytes, while OpenAPI ``maxLength`` counts
characters, and a string within N bytes always has at most N characters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Bounds:
    """OpenAPI bounds of one field; ``items`` bounds each element of a list field."""

    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    enum: tuple[str, ...] | None = None
    max_items: int | None = None
    items: Bounds | None = None

    def keywords(self) -> JsonDict:
        """The OpenAPI keywords these bounds stand for, element bounds under ``items``."""
        words: JsonDict = {
            "minLength": self.min_length,
            "maxLength": self.max_length,
            "pattern": self.pattern,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "enum": list(self.enum) if self.enum is not None else None,
            "maxItems": self.max_items,
        }
        words = {name: value for name, value in words.items() if value is not None}
        if self.items is not None:
            words["items"] = self.items.keywords()
        return words

    def __call__(self, schema: JsonDict) -> None:
        """Pydantic's ``json_schema_extra`` hook: merge the keywords into a field schema."""
        # An optional field arrives as anyOf [value, null]; bound the value branch.
        branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
        target = branches[0] if len(branches) == 1 else schema
        words = self.keywords()
        item_words = words.pop("items", None)
        target.update(words)
        if item_words:
            target.setdefault("items", {}).update(item_words)


def entry_list(max_items: int | None, max_entry: int) -> Bounds:
    """Bounds of a list of non-blank names of at most ``max_entry`` bytes each."""
    return Bounds(max_items=max_items, items=Bounds(min_length=1, max_length=max_entry))
