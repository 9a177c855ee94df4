"""Helm for the chart's tests: built from Go modules by hack/build-helm.sh, cached.

Shared by the unit tests (lint, render, schema) and the end-to-end test (apply).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builds import built, versions

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "agentworkers"
VALUE_SETS_DIR = CHART / "ci"
GITOPS_DIR = REPO / "examples" / "gitops"
# The documented value sets: the defaults, and each file in charts/agentworkers/ci/
# (the directory chart-testing reads), by the file's stem without "-values".
VALUE_SETS: dict[str, Path | None] = {"default": None} | {
    p.name.removesuffix("-values.yaml"): p for p in sorted(VALUE_SETS_DIR.glob("*-values.yaml"))
}


class HelmUnavailable(RuntimeError):
    pass


@cache
def helm_binary() -> Path:
    """$AGENTWORKERS_HELM, else hack/build-helm.sh's cached build (it builds on first use)."""
    if explicit := os.environ.get("AGENTWORKERS_HELM"):
        return Path(explicit)
    if not (shutil.which("go") or _cached_helm()):
        raise HelmUnavailable("no Go toolchain to build helm with (set AGENTWORKERS_HELM)")
    result = subprocess.run(
        ["bash", str(REPO / "hack" / "build-helm.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
        timeout=1800,
    )
    if result.returncode != 0:
        raise HelmUnavailable("hack/build-helm.sh failed (its output is above)")
    return Path(result.stdout.strip().splitlines()[-1]) / "helm"


def require_helm() -> None:
    """Fail the test when helm cannot be had (built on first use): a skip would pass a
    chart or a release nothing checked."""
    try:
        helm_binary()
    except HelmUnavailable as e:
        pytest.fail(str(e), pytrace=False)


def _cached_helm() -> Path | None:
    return built(f"helm-{versions().get('HELM_VERSION', '')}", "helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        # Helm keeps caches and config under HOME; keep a test run from touching the user's.
        env=dict(
            os.environ,
            HELM_CACHE_HOME="/tmp/agentworkers-helm/cache",
            HELM_CONFIG_HOME="/tmp/agentworkers-helm/config",
            HELM_DATA_HOME="/tmp/agentworkers-helm/data",
        ),
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def value_args(value_set: str | None = None, sets: dict[str, str] | None = None) -> list[str]:
    args: list[str] = []
    path = VALUE_SETS.get(value_set or "default")
    if path is not None:
        args += ["--values", str(path)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    return args


def template_text(
    value_set: str | None = None,
    sets: dict[str, str] | None = None,
    *,
    release: str = "agentworkers",
    namespace: str = "agentworkers-system",
) -> str:
    return helm(
        "template", release, str(CHART), "--namespace", namespace, *value_args(value_set, sets)
    ).stdout


def render(
    value_set: str | None = None,
    sets: dict[str, str] | None = None,
    *,
    release: str = "agentworkers",
    namespace: str = "agentworkers-system",
) -> list[dict[str, Any]]:
    """The chart's objects (crds/ excluded, as `helm template` leaves them out)."""
    text = template_text(value_set, sets, release=release, namespace=namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
