"""The Grafana dashboard asks only for metrics the operator exports, and shows each of them;
docs/metrics.md lists exactly those metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from agentworkers.controller.infra import metrics
from agentworkers.kube import api

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "charts" / "agentworkers" / "dashboards" / "agentworkers.json"
METRICS_DOC = REPO / "docs" / "metrics.md"
# The sample names each metric type exposes, from its family name.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}
# prometheus_client's default process collector (the operator process's own).
PROCESS = {"process_cpu_seconds_total", "process_resident_memory_bytes"}


def operator_metrics() -> dict[str, str]:
    """Family name -> type, for every metric object the operator defines (its own in
    agentworkers.controller.infra.metrics, and the request counter of agentworkers.kube.api)."""
    families: dict[str, str] = {}
    for value in [*vars(metrics).values(), api.REQUESTS]:
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                families[family.name] = family.type
    return families


def exported_names() -> set[str]:
    names: set[str] = set()
    for family, type_ in operator_metrics().items():
        names |= {family + suffix for suffix in SUFFIXES[type_]}
    return names


def expressions(node: Any) -> list[str]:
    """Every PromQL expression in the dashboard: panel targets and variable queries."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("type") == "datasource":  # a data source picker: its query is a plugin id
            return found
        for key, value in node.items():
            if key in ("expr", "definition", "query") and isinstance(value, str):
                found.append(value)
            else:
                found += expressions(value)
    elif isinstance(node, list):
        for item in node:
            found += expressions(item)
    return found


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not inside a label matcher,
    a string, a duration, or a function/keyword position."""
    # Grafana's label_values(<series>, <label>) names a label, not a metric, last.
    expr = re.sub(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", r"\1", expr)
    expr = re.sub(r'"[^"]*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        name = match.group(0)
        after = expr[match.end() :].lstrip()
        if after.startswith("("):  # a function call
            continue
        if name in {"and", "or", "unless", "bool", "offset", "le"}:
            continue
        names.add(name)
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def test_the_metrics_module_registers_its_metrics() -> None:
    families = operator_metrics()
    assert families, "agentworkers.controller.infra.metrics defines no metrics"
    registered = {m.name for m in REGISTRY.collect()}
    assert set(families) <= registered


def test_every_query_uses_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    exported = exported_names()
    used: set[str] = set()
    for expr in expressions(dashboard):
        for name in metric_names(expr):
            assert name.startswith("agentworkers_") or name in PROCESS, (name, expr)
            if name.startswith("agentworkers_"):
                assert name in exported, (
                    f"{name} is not exported by agentworkers.controller.infra.metrics: {expr}"
                )
            used.add(name)
    assert used


def test_every_exported_metric_is_on_the_dashboard(dashboard: dict[str, Any]) -> None:
    used = {n for e in expressions(dashboard) for n in metric_names(e)}
    for family, type_ in operator_metrics().items():
        names = {family + s for s in SUFFIXES[type_]}
        assert names & used, f"{family} is on no panel"


@pytest.mark.parametrize(
    ("title", "metric"),
    [
        ("Workers by phase", "agentworkers_workers"),
        ("Spawn rate", "agentworkers_spawns_total"),
        ("Spawn refusals by reason", "agentworkers_spawn_refusals_total"),
        ("Pin failures by reason", "agentworkers_pin_failures_total"),
        ("Kills by way", "agentworkers_kills_total"),
        ("Spawn-to-pod latency", "agentworkers_worker_pod_latency_seconds_bucket"),
        ("Handler errors", "agentworkers_handler_errors_total"),
    ],
)
def test_the_panels_a_platform_team_asks_for(
    dashboard: dict[str, Any], title: str, metric: str
) -> None:
    panel = next((p for p in dashboard["panels"] if p["title"] == title), None)
    assert panel is not None, f"no panel {title!r}"
    assert any(metric in metric_names(t["expr"]) for t in panel["targets"])


def test_dashboard_is_well_formed(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["title"] == "agentworkers"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= variables
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            for target in panel["targets"]:
                # Every query follows the namespace/job variables.
                assert 'namespace=~"$namespace"' in target["expr"], target["expr"]


def test_metric_name_parser() -> None:
    assert metric_names('sum by (le) (rate(a_bucket{x="y{z}"}[5m])) / b') == {"a_bucket", "b"}
    assert metric_names("histogram_quantile(0.9, sum by (le) (rate(c[1m])))") == {"c"}
    assert metric_names('label_values(d{namespace=~"$n"}, job)') == {"d"}
    assert metric_names("label_values(e, namespace)") == {"e"}


def test_docs_list_exactly_the_exported_metrics() -> None:
    text = METRICS_DOC.read_text()
    documented = set(re.findall(r"^\| `(agentworkers_[a-z0-9_]+)`", text, re.M))
    expected = set()
    for family, type_ in operator_metrics().items():
        expected.add(family + ("_total" if type_ == "counter" else ""))
    assert documented == expected
    for name in expected:
        family = name.removesuffix("_total")
        labels = next(
            (
                v._labelnames
                for v in vars(metrics).values()
                if isinstance(v, MetricWrapperBase) and v.describe()[0].name == family
            ),
            (),
        )
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
        for label in labels:
            assert f"`{label}`" in row, f"docs/metrics.md: {name} does not name label {label}"
