"""A Worker's inputs against the profile that bounds its run: count, patterns, inline text,
digests and sizes; and both runtime ends (the parent reads files, the child takes them)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentworkers.api.worker import MAX_INPUT_BYTES, MAX_INPUTS_BYTES, WorkerInput
from agentworkers.core.inputs import check, check_bounds, decode, encode
from agentworkers.errors import InputNotAllowedError, InvalidInputError
from agentworkers.runtime.inputs import read, take
from agentworkers.runtime.tools import Sandbox, ToolError
from agentworkers.virtualagent import Profile, matching_pattern

RESEARCHER = Profile(
    key="researcher", parent="planner", input_patterns=("*.md", "text/*"), input_count=2
)
files = st.lists(
    st.sampled_from(["a.md", "b.txt", "c.csv", "d.sh", "e.png", "f.json"]), unique=True, max_size=4
)


def _inputs(*names: str, data: bytes = b"hello\n") -> list[WorkerInput]:
    return [encode(name, data) for name in names]


@given(files, st.integers(0, 4))
def test_a_profile_admits_exactly_inputs_within_its_count_and_patterns(
    names: list[str], count: int
) -> None:
    profile = RESEARCHER.model_copy(update={"input_count": count})
    allowed = len(names) <= count and all(
        matching_pattern(profile.input_patterns or (), n) for n in names
    )
    try:
        taken = check(_inputs(*names), profile)
    except InputNotAllowedError:
        assert not allowed
    else:
        assert allowed and [i.name for i in taken] == names


def test_no_profile_no_bound_but_the_api_s() -> None:
    assert [i.name for i in check(_inputs("d.sh", "e.png"), None)] == ["d.sh", "e.png"]


def test_a_profile_without_inputs_takes_none() -> None:
    with pytest.raises(InputNotAllowedError) as refused:
        check(_inputs("a.md"), Profile(key="plain", parent="planner"))
    assert str(refused.value) == "spec.inputs: 1 inputs exceeds inputCount 0 of profile 'plain'"
    assert check([], Profile(key="plain", parent="planner")) == []


def test_the_refusal_names_the_input_its_type_and_the_patterns() -> None:
    with pytest.raises(InputNotAllowedError) as refused:
        check(_inputs("a.md", "d.sh"), RESEARCHER, via="lead")
    assert str(refused.value) == (
        "spec.inputs[1].name: 'd.sh' (application/x-sh) matches no inputPatterns of profile "
        "'researcher' (of lead, which this run runs below) (*.md, text/*)"
    )


def test_inline_inputs_must_be_text() -> None:
    inline = RESEARCHER.model_copy(update={"input_disposition": "inline"})
    check(_inputs("a.md"), inline)
    with pytest.raises(InputNotAllowedError) as refused:
        check(_inputs("a.md", data=b"\xff\xfe"), inline)
    assert refused.value.field == "spec.inputs[0].content"


def test_an_input_is_what_its_digest_says() -> None:
    good = encode("a.md", b"hello")
    with pytest.raises(InvalidInputError) as refused:
        decode([good.model_copy(update={"content": base64.b64encode(b"bye").decode()})])
    assert refused.value.field == "spec.inputs[0].sha256"
    with pytest.raises(InvalidInputError) as refused:
        decode([good.model_copy(update={"content": "!!!"})])
    assert refused.value.field == "spec.inputs[0].content"
    with pytest.raises(InvalidInputError) as refused:
        decode([good, good])
    assert str(refused.value) == "spec.inputs[1].name: duplicate name 'a.md'"


def test_sizes_are_bounded_each_and_in_all() -> None:
    big = b"x" * MAX_INPUT_BYTES
    decode([encode("a.txt", big), encode("b.txt", big)])  # exactly the total
    with pytest.raises(InvalidInputError, match="in all"):
        decode([encode("a.txt", big), encode("b.txt", big), encode("c.txt", b"x")])
    assert MAX_INPUTS_BYTES == 2 * MAX_INPUT_BYTES


def test_a_parent_reads_sandbox_files_by_path_only(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "plan.md").write_text("# plan\n")
    (tmp_path / "bad name.md").write_text("x")
    (tmp_path / "big.txt").write_bytes(b"x" * (MAX_INPUT_BYTES + 1))
    sandbox = Sandbox(str(tmp_path))
    [entry] = read(sandbox, ["notes/plan.md"])
    assert entry.name == "plan.md" and base64.b64decode(entry.content) == b"# plan\n"
    for path, why in [
        ("../etc/passwd", "outside the sandbox"),
        ("notes", "is a directory"),
        ("bad name.md", "not a canonical filename"),
        ("big.txt", f"larger than {MAX_INPUT_BYTES} bytes"),
    ]:
        with pytest.raises(ToolError, match=why):
            read(sandbox, [path])


def test_a_child_takes_attachments_as_files_and_inline_inputs_as_text(tmp_path: Path) -> None:
    inputs = _inputs("a.md", "b.txt")
    note = take(str(tmp_path / "attached"), inputs, "")
    assert (tmp_path / "attached" / "inputs" / "a.md").read_bytes() == b"hello\n"
    assert note.startswith("Input files, in your sandbox:\n- inputs/a.md (text/markdown, 6 bytes)")
    note = take(str(tmp_path / "inline"), inputs, "inline")
    assert not os.path.exists(tmp_path / "inline")
    assert "<input name='b.txt'>\nhello\n\n</input>" in note
    assert take(str(tmp_path), [], "") == ""
    with pytest.raises(InvalidInputError):
        take(str(tmp_path), [inputs[0].model_copy(update={"sha256": "0" * 64})], "")
    with pytest.raises(InputNotAllowedError):
        take(str(tmp_path), [encode("a.md", b"\xff")], "inline")


def test_the_operator_checks_names_alone() -> None:
    """Its copy of a Worker keeps no content: the bounds are checked without it."""
    nameless = [i.model_copy(update={"content": ""}) for i in _inputs("a.md", "d.sh")]
    check_bounds(nameless[:1], RESEARCHER)
    with pytest.raises(InputNotAllowedError, match=r"'d\.sh'"):
        check_bounds(nameless, RESEARCHER)
