"""Generate the CustomResourceDefinitions in `crds/` from the pydantic models the code uses.

    python -m agentworkers.api.crdgen crds          # write crds/*.yaml
    python -m agentworkers.api.crdgen --check crds  # exit 1 when the files drift from the models

Pydantic emits JSON Schema (draft 2020-12, with `$ref`s and `anyOf` for optionals);
the API server wants a *structural* OpenAPI v3 schema: everything inlined, one type
per node, nullability by omission. `structural()` makes that translation, keeping
every description (what `kubectl explain` shows), bound and CEL rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from agentworkers.api.crds import RESOURCES, Resource

JSON = dict[str, Any]

# JSON Schema keywords the API server does not take (or that pydantic adds for itself).
_DROPPED = {"title", "default", "examples", "additionalProperties", "$defs"}


def structural(node: JSON, defs: JSON) -> JSON:
    """Translate one pydantic JSON Schema node into a structural OpenAPI v3 schema."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        # A description on the field wins over the one on the referenced model.
        node = {**target, **node}
    if "anyOf" in node:
        # Optional[X] arrives as anyOf [X, null]; in Kubernetes, optional means omitted.
        variants = [v for v in node.pop("anyOf") if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {variants}")
        inner = structural(variants[0], defs)
        node = {**inner, **{k: v for k, v in node.items() if k not in _DROPPED}}
        return structural(node, defs) if "$ref" in node else _finish(node, defs)
    return _finish(node, defs)


def _finish(node: JSON, defs: JSON) -> JSON:
    out: JSON = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: structural(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # Draft 2020-12 gives the bound; OpenAPI v3.0 wants the bound plus a flag.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        out["additionalProperties"] = structural(extra, defs)
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        # A free-form object (an output schema, say): kept whole, not pruned.
        out["x-kubernetes-preserve-unknown-fields"] = True
    untyped = not any(
        out.get(k)
        for k in ("type", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string")
    )
    if untyped:
        # Any JSON value (pydantic's `Any`): structural schemas need it said out loud.
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def openapi_schema(model: type[Any]) -> JSON:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return structural(schema, schema.get("$defs", {}))


def strict_json_schema(schema: JSON) -> JSON:
    """A structural schema as plain JSON Schema, refusing unknown keys (`additionalProperties:
    false`): for the chart's values.schema.json, which helm checks at install."""
    out: JSON = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {k: strict_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = strict_json_schema(value)
        else:
            out[key] = value
    if "properties" in out:
        out["additionalProperties"] = False
    return out


def keep_unknown_fields(schema: JSON) -> JSON:
    """Mark every object of a spec to keep fields it does not know, instead of pruning them.

    The API server would otherwise drop an unknown field (say `overlay.providers`) with
    only a warning for clients that do not ask for strict field validation; kept, it
    reaches the admission webhook and the handlers, which refuse it by name.
    """
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: keep_unknown_fields(v) for k, v in out["properties"].items()}
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in out:
        out["items"] = keep_unknown_fields(out["items"])
    return out


def crd(resource: Resource) -> JSON:
    """The full CustomResourceDefinition of one resource."""
    spec_schema = openapi_schema(resource.spec)
    if resource.user_written:
        spec_schema = keep_unknown_fields(spec_schema)
    root: JSON = {
        "type": "object",
        "description": resource.description,
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object."},
            "kind": {"type": "string", "description": "Kind of this object."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
        },
        "required": ["spec"],
    }
    if resource.max_name_length:
        root["properties"]["metadata"]["properties"] = {
            "name": {"type": "string", "maxLength": resource.max_name_length}
        }
    subresources: JSON = {}
    if resource.status is not None:
        root["properties"]["status"] = openapi_schema(resource.status)
        subresources["status"] = {}
    if resource.root_rules:
        root["x-kubernetes-validations"] = list(resource.root_rules)
    version: JSON = {
        "name": resource.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
        "additionalPrinterColumns": [dict(c) for c in resource.printer_columns],
    }
    if subresources:
        version["subresources"] = subresources
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{resource.group}"},
        "spec": {
            "group": resource.group,
            "scope": "Namespaced",
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.kind.lower(),
                "shortNames": list(resource.short_names),
                "categories": list(resource.categories),
            },
            "versions": [version],
        },
    }


def render(resource: Resource) -> str:
    header = (
        "# Generated by `python -m agentworkers.api.crdgen crds` from the models in\n"
        "# operator/agentworkers/api. Do not edit by hand; `make crds` regenerates it.\n"
    )
    return header + yaml.safe_dump(crd(resource), sort_keys=False, width=100, allow_unicode=True)


def files() -> dict[str, str]:
    return {f"{r.group}_{r.plural}.yaml": render(r) for r in RESOURCES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument(
        "--check", action="store_true", help="fail when the files differ from the models"
    )
    args = parser.parse_args(argv)
    drift = []
    for name, text in files().items():
        path = args.directory / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                drift.append(name)
        else:
            args.directory.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if drift:
        print(
            f"CRDs out of date with the models: {', '.join(drift)}; run `make crds`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
