"""How the CLI prints: tables, descriptions, ages, and JSON/YAML of the client's results."""

from __future__ import annotations

import datetime as dt
import json

import yaml

from agentworkers.api import WorkerSpec, WorkerStatus
from agentworkers.cli.render import age, cell, describe, dump, json_line, plain, short, table
from agentworkers.client import CollectResult, WorkerInfo

NOW = dt.datetime(2030, 1, 2, 12, 0, 0, tzinfo=dt.UTC)


def test_plain_spells_fields_as_the_api_does() -> None:
    info = WorkerInfo(
        name="w1",
        spec=WorkerSpec(agent="planner", initial_message="hi"),
        status=WorkerStatus(phase="Running", last_event="pod running"),
        created="2030-01-02T11:59:00Z",
    )
    found = plain(info)
    assert list(found) == ["name", "spec", "status", "created", "namespace"]
    assert found["spec"] == info.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert found["spec"]["initialMessage"] == "hi"
    assert found["status"]["lastEvent"] == "pod running"
    assert "started_at" not in found["status"] and "startedAt" not in found["status"]


def test_json_and_yaml_round_trip() -> None:
    result = CollectResult(
        "w1", "Killed", "", "over budget", killed_children=("w2",), namespace="team-a"
    )
    expected = {
        "name": "w1",
        "phase": "Killed",
        "output": "",
        "error": "over budget",
        "deleted": True,
        "killedChildren": ["w2"],
        "namespace": "team-a",
    }
    assert json.loads(dump(result, "json")) == expected
    assert yaml.safe_load(dump(result, "yaml")) == expected
    assert json_line(result) == json.dumps(expected, separators=(",", ":")) + "\n"
    listed = json.loads(dump([result], "json"))
    assert listed == {"apiVersion": "v1", "kind": "List", "items": [expected]}


def test_a_table_lines_up_like_kubectl() -> None:
    text = table(
        ("name", "phase", "profile"), [("w1", "Running", None), ("long-name", "Idle", "x")]
    )
    assert text == (
        "NAME        PHASE     PROFILE\nw1          Running   <none>\nlong-name   Idle      x\n"
    )


def test_a_cell_is_one_short_line() -> None:
    assert cell(None) == cell("") == cell([]) == "<none>"
    assert cell(True) == "yes" and cell(False) == "no"
    assert cell(["a", "b"]) == "a,b"
    assert cell({"b": 1}) == '{"b":1}'
    assert cell("two\nlines") == "two lines"
    assert cell("x" * 100, width=10) == "x" * 9 + "…"
    assert cell(0) == "0"


def test_describe_aligns_keys_and_indents_long_values() -> None:
    assert describe([("Name", "w1"), ("Output", "line one\nline two"), ("Error", None)]) == (
        "Name:    w1\nOutput:\n  line one\n  line two\nError:   <none>\n"
    )


def test_age_reads_like_kubectl() -> None:
    def ago(**delta: float) -> str:
        return age((NOW - dt.timedelta(**delta)).isoformat().replace("+00:00", "Z"), NOW)

    assert ago(seconds=45) == "45s"
    assert ago(seconds=119) == "119s"
    assert ago(minutes=5, seconds=30) == "5m30s"
    assert ago(minutes=5) == "5m"
    assert ago(minutes=42) == "42m"
    assert ago(hours=5, minutes=30) == "5h30m"
    assert ago(hours=30) == "30h"
    assert ago(days=3, hours=5) == "3d5h"
    assert ago(days=120) == "120d"
    assert ago(seconds=-30) == "0s"  # a clock ahead of ours
    assert age(None) == age("") == "<none>"


def test_short_digest() -> None:
    assert short("0123456789abcdef") == "0123456789ab"
    assert short(None) == "<none>"
