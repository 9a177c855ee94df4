"""No declared field is inert: every field of every CRD spec is read by code that acts on it.

A field that admission validates and the revision hashes, but that nothing reads, is a
promise the product does not keep. This test finds, for each field of each spec model
(nested models included), the places that read it, and fails for one that has none,
unless it is on `KNOWN_INERT` with the issue that will wire it.

What counts as a read is typed, not textual: mypy type-checks the package and a read is
an attribute access `x.field` whose receiver `x` mypy knows to be that model (or a
subclass). A name-based scan would pass trivially for `kind`, `name` or `model`, which
a hundred unrelated objects have. What does not count:

* serialising the whole object (`wire()`, `model_dump()`): copying a field is not using it;
* reads in modules that only check, normalise, hash or describe (`CHECK_ONLY`);
* reads inside the API models' own methods (`DEFINING`), unless that method is itself
  used (read) from outside: `ModelDefaults.with_provider` reads the ModelProvider's
  fields on behalf of the operator, which calls it; a validator pydantic runs on its
  own is never called by name and so never counts.

Two reads by wire name count too, since they act: a raw-dict read of a multi-word
camelCase key (`template.get("ttlSecondsAfterFinished")`; a one-word key such as
`"kind"` could be anything's, so it does not), and the fields in `VERBATIM`, whose value
goes whole into a Kubernetes object that acts on it (the scheduler reads a pod's
affinity), checked to be still named in the module that puts them there.
"""

from __future__ import annotations

import ast
import inspect
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mypy import build
from mypy import nodes as mypy_nodes
from mypy.find_sources import create_source_list
from mypy.modulefinder import BuildSource
from mypy.options import Options
from mypy.types import Instance, UnionType, get_proper_type
from pydantic import BaseModel

from agentworkers.api import ProfileEntry
from agentworkers.api.crds import RESOURCES
from agentworkers.virtualagent import Profile

ROOT = Path(__file__).resolve().parents[2]

# Fields no code acts on yet, each with the issue that gives it a meaning. The test
# fails for a field missing here that nothing reads, and for an entry here that is read
# (it was wired: remove it), so the list only shrinks.
KNOWN_INERT: dict[str, str] = {
    # issue 26: the agent's description, for whoever lists agents.
    "AgentConfig.spec.description": "issue 26",
    # issue 26: derived by normalisation and covered by the binding's profileHash; the
    # runtime could check the output schema against it before enforcing it.
    "AgentConfigRevision.spec.profileMap.profiles[].profile.outputSchemaHash": "issue 26",
}

# Fields whose whole value the operator puts into a pod's spec, as the user spelt it:
# Kubernetes acts on them (and on every field inside them). Each is named (its wire
# name as a string) in the module that does it.
VERBATIM: dict[str, str] = {
    f"AgentConfig.spec.worker.{name}": "agentworkers.core.pods"
    for name in (
        "affinity",
        "tolerations",
        "nodeSelector",
        "runtimeClassName",
        "priorityClassName",
        "resources",
    )
}
# A multi-word camelCase key: specific enough that a raw-dict read of it is that field's.
_SPECIFIC = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)+$")

# Modules whose reads only check, normalise, hash or describe a field.
CHECK_ONLY = (
    "agentworkers.api.crdgen",
    "agentworkers.virtualagent.validation",
    "agentworkers.virtualagent.normalization",
    "agentworkers.virtualagent.canonical",
)
# Modules that define the models: their reads count only inside a method that is used.
DEFINING = ("agentworkers.api", "agentworkers.virtualagent.models")
# A door model hands its fields unchanged to its canonical model (`to_profile`): reads
# of the canonical model's field of the same name are reads of the door's.
CANONICAL: dict[type[BaseModel], type[BaseModel]] = {ProfileEntry: Profile}


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@dataclass(frozen=True)
class Read:
    """`owner.attr` read in `module`, inside the function `within` (a fullname), if any."""

    owner: str
    attr: str
    module: str
    within: str | None


_CHILDREN = (mypy_nodes.Statement, mypy_nodes.Expression, mypy_nodes.Block)
# Links from a use to a definition (and type annotations): not part of the code read.
_LINKS = frozenset(
    {"node", "def_var", "info", "type", "unanalyzed_type", "original_def", "impl", "var"}
)


def _walk(tree: mypy_nodes.MypyFile) -> Iterator[tuple[mypy_nodes.MemberExpr, str | None]]:
    """Every attribute access in a module's syntax tree, with its enclosing function."""
    stack: list[tuple[object, str | None]] = [(d, None) for d in tree.defs]
    seen: set[int] = set()
    while stack:
        node, within = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, mypy_nodes.FuncDef):
            within = node.fullname
        if isinstance(node, mypy_nodes.MemberExpr):
            yield node, within
        for attr in getattr(type(node), "__mypyc_attrs__", ()):
            if attr in _LINKS or attr.startswith("_"):
                continue
            value = getattr(node, attr, None)
            values = value if isinstance(value, list | tuple) else [value]
            for item in values:
                inner = item if isinstance(item, list | tuple) else [item]
                stack.extend((child, within) for child in inner if isinstance(child, _CHILDREN))


def _reads(overrides: dict[str, str] | None = None) -> list[Read]:
    """Every typed attribute read in the package, by mypy's inference; `overrides`: the
    text of some modules, instead of their files'."""
    options = Options()
    options.incremental = False
    options.export_types = True
    options.preserve_asts = True
    options.check_untyped_defs = True
    options.python_version = (3, 11)
    options.mypy_path = [str(ROOT / "operator")]
    # Only pydantic's types matter (model_validate returns the model); skipping the
    # rest keeps the build to seconds.
    options.follow_imports = "skip"
    options.ignore_missing_imports = True
    options.per_module_options = {
        name: {"follow_imports": "silent"}
        for name in ("pydantic.*", "pydantic_core.*", "typing_extensions", "annotated_types.*")
    }
    sources = [
        BuildSource(s.path, s.module, (overrides or {}).get(s.module), s.base_dir)
        for s in create_source_list([str(ROOT / "operator" / "agentworkers")], options)
    ]
    result = build.build(sources, options)
    found = []
    for source in sources:
        tree = result.graph[source.module].tree
        assert tree is not None, source.module
        for expr, within in _walk(tree):
            receiver = result.types.get(expr.expr)
            if receiver is None:
                continue
            receiver = get_proper_type(receiver)
            options_ = receiver.items if isinstance(receiver, UnionType) else [receiver]
            for option in map(get_proper_type, options_):
                if not isinstance(option, Instance):
                    continue
                for base in option.type.mro:
                    if expr.name in base.names:
                        found.append(Read(base.fullname, expr.name, source.module, within))
                        break
    return found


def _used(reads: list[Read]) -> set[tuple[str, str]]:
    """(class, attribute) pairs read where reading acts: outside `CHECK_ONLY`, and outside
    `DEFINING` unless within a method that is used (to a fixed point)."""
    used: set[tuple[str, str]] = set()
    while True:
        before = len(used)
        for read in reads:
            if _in(read.module, CHECK_ONLY):
                continue
            if _in(read.module, DEFINING):
                if read.within is None:
                    continue
                owner, _, method = read.within.rpartition(".")
                if (owner, method) not in used:
                    continue
            used.add((read.owner, read.attr))
        if len(used) == before:
            return used


def _declaring(model: type[BaseModel], name: str) -> str:
    """The fullname of the class that declares field `name` of `model`."""
    for cls in model.__mro__:
        if name in inspect.get_annotations(cls):
            return f"{cls.__module__}.{cls.__qualname__}"
    raise AssertionError(f"{model.__name__}.{name} is declared nowhere")


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            yield from _models_in(arg)


@dataclass(frozen=True)
class SpecField:
    path: str  # as a user writes it: Worker.spec.reasoningAPI
    owners: tuple[str, ...]  # the classes whose attribute read is a read of it
    attr: str
    wire: str


def _fields(
    model: type[BaseModel], prefix: str, seen: set[type[BaseModel]], named: set[tuple[str, str]]
) -> Iterator[SpecField]:
    """The fields of `model` and of the models inside it, each field once, where it first
    appears (the revision's copy of an AgentConfig spec is the AgentConfig's)."""
    seen.add(model)
    canonical = next((CANONICAL[c] for c in model.__mro__ if c in CANONICAL), None)
    for name, info in model.model_fields.items():
        wire = info.alias or name
        owners = [_declaring(model, name)]
        if canonical is not None and name in canonical.model_fields:
            owners.append(_declaring(canonical, name))
        path = f"{prefix}.{wire}"
        if not named & {(owner, name) for owner in owners}:
            named.update((owner, name) for owner in owners)
            yield SpecField(path, tuple(owners), name, wire)
        annotation = info.annotation
        listed = typing.get_origin(annotation) in (tuple, list) or any(
            typing.get_origin(a) in (tuple, list) for a in typing.get_args(annotation)
        )
        for inner in _models_in(annotation):
            if inner not in seen:
                yield from _fields(inner, path + ("[]" if listed else ""), seen, named)


def spec_fields() -> list[SpecField]:
    seen: set[type[BaseModel]] = set()
    named: set[tuple[str, str]] = set()
    return [
        f
        for resource in RESOURCES
        for f in _fields(resource.spec, f"{resource.kind}.spec", seen, named)
    ]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT / "operator").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class Evidence:
    used: set[tuple[str, str]]  # typed reads: (declaring class, attribute)
    keys: set[str]  # keys read from raw dicts, in modules that act
    strings: dict[str, set[str]]  # every string constant, by module


def _by_name() -> tuple[set[str], dict[str, set[str]]]:
    keys: set[str] = set()
    strings: dict[str, set[str]] = {}
    for path in (ROOT / "operator" / "agentworkers").rglob("*.py"):
        module = _module(path)
        tree = ast.parse(path.read_text())
        strings[module] = {
            n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is str
        }
        if _in(module, CHECK_ONLY) or _in(module, DEFINING):
            continue
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
            ):
                key = node.args[0]
            if isinstance(key, ast.Constant) and type(key.value) is str:
                keys.add(key.value)
    return keys, strings


@pytest.fixture(scope="module")
def evidence() -> Evidence:
    return Evidence(_used(_reads()), *_by_name())


def _verbatim(path: str, strings: dict[str, set[str]]) -> bool:
    """`path` is, or is inside, a VERBATIM field its module still names."""
    for field, module in VERBATIM.items():
        if path == field or path.startswith((field + ".", field + "[]")):
            return field.rpartition(".")[2] in strings.get(module, set())
    return False


def _unread(evidence: Evidence) -> dict[str, SpecField]:
    def read(f: SpecField) -> bool:
        return (
            any((owner, f.attr) in evidence.used for owner in f.owners)
            or (bool(_SPECIFIC.match(f.wire)) and f.wire in evidence.keys)
            or _verbatim(f.path, evidence.strings)
        )

    return {f.path: f for f in spec_fields() if not read(f)}


@pytest.mark.timeout(300)
def test_every_spec_field_is_read(evidence: Evidence) -> None:
    inert = sorted(set(_unread(evidence)) - set(KNOWN_INERT))
    assert not inert, (
        "declared but read by nothing that acts on them (give each a meaning, refuse it at "
        f"admission, or remove it from the API): {', '.join(inert)}"
    )


@pytest.mark.timeout(300)
def test_the_known_inert_are_still_inert(evidence: Evidence) -> None:
    unread = _unread(evidence)
    paths = {f.path for f in spec_fields()}
    unknown = sorted(set(KNOWN_INERT) - paths)
    assert not unknown, f"not fields of any spec: {', '.join(unknown)}"
    wired = sorted(set(KNOWN_INERT) - set(unread))
    assert not wired, f"read now: remove from KNOWN_INERT: {', '.join(wired)}"


def test_the_walk_sees_nested_and_door_fields() -> None:
    paths = {f.path: f for f in spec_fields()}
    assert "AgentConfig.spec.mcpServers[].url" in paths
    assert "AgentConfig.spec.virtualAgents.profiles[].overlay.maxSteps" in paths
    assert "AgentConfigRevision.spec.profileMap.profiles[].profile.parent" in paths
    assert not any(p.startswith("AgentConfigRevision.spec.config.") for p in paths)
    # One field whichever door it comes by: the standalone profile's are the section's.
    assert "VirtualAgentProfile.spec.agent" in paths
    assert "VirtualAgentProfile.spec.inputCount" not in paths
    door = paths["AgentConfig.spec.virtualAgents.profiles[].inputCount"]
    assert door.owners == (
        "agentworkers.api.profile.ProfileEntry",
        "agentworkers.virtualagent.models.Profile",
    )


@pytest.mark.timeout(300)
def test_deleting_the_only_reads_of_a_field_is_caught(evidence: Evidence) -> None:
    """The test is not a name search that passes anyway: take away the one function that
    reads a profile's inputCount and the field is inert."""
    field = "AgentConfig.spec.virtualAgents.profiles[].inputCount"
    assert field not in _unread(evidence)
    module = "agentworkers.core.inputs"
    text = (ROOT / "operator" / "agentworkers" / "core" / "inputs.py").read_text()
    assert text.count("profile.input_count") >= 1
    mutated = text.replace("profile.input_count", "0")
    unread = _unread(Evidence(_used(_reads({module: mutated})), evidence.keys, evidence.strings))
    assert field in unread
    assert set(unread) - {field} == set(_unread(evidence))
