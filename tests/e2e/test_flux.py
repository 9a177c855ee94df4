"""Flux syncs examples/gitops/ from a git repository on loopback, as docs/gitops.md tells
users to: one commit cuts one revision, a revert brings the revision back, a bad commit
fails the sync with the operator's message, a profile removed from git is pruned.

Flux's controllers start for this module only (not with the local control plane), from
the cached build of hack/build-flux.sh.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.core.revisions import DEFAULT_SETTLE_SECONDS
from tests.e2e.flux import Flux, GitRepo, reconcile_now, served, source_and_kustomization
from tests.e2e.gitops import bound, condition, get, max_steps, phase, resume, revisions
from tests.e2e.support import Cluster, SpecWatch, wait_until
from tests.e2e.support import worker as _worker

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture(scope="module")
def flux(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flux]:
    with Flux.start(cluster, tmp_path_factory.mktemp("flux")) as running:
        yield running


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[GitRepo]:
    with served(tmp_path / "git") as served_repo:
        yield served_repo


def _synced(cluster: Cluster, namespace: str, sha: str, flux: Flux) -> dict[str, Any]:
    """The Kustomization Ready at commit `sha` (its health checks passed: every object
    Ready by kstatus); the AgentConfig's active revision then."""

    def ready() -> dict[str, Any] | None:
        body = get(cluster, "kustomization", "agents-staging", namespace)
        status = body.get("status", {})
        if not str(status.get("lastAppliedRevision", "")).endswith(sha):
            return None
        return body if condition(body, "Ready").get("status") == "True" else None

    try:
        wait_until(f"the Kustomization to be Ready at {sha[:8]}", ready, timeout=180)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{flux.tail()}") from e
    return dict(get(cluster, "ac", "planner", namespace)["status"]["activeRevision"])


def _installed(cluster: Cluster, namespace: str, flux: Flux, repo: GitRepo) -> dict[str, Any]:
    """The first commit, synced by a new GitRepository and Kustomization: the AgentConfig's
    active revision then."""
    sha = repo.commit("agents: planner and its profiles")
    cluster.apply(namespace, *source_and_kustomization(namespace, repo.url))
    return _synced(cluster, namespace, sha, flux)


def _edit(path: Path, change: Any) -> None:
    body = yaml.safe_load(path.read_text())
    change(body)
    path.write_text(yaml.safe_dump(body, sort_keys=False))


def test_commits_cut_one_revision_each_and_a_removed_profile_is_pruned(
    cluster: Cluster, namespace: str, flux: Flux, repo: GitRepo
) -> None:
    first_sha = repo.commit("agents: planner and its profiles")
    with SpecWatch(cluster, namespace) as seen:
        pushed = time.monotonic()
        cluster.apply(namespace, *source_and_kustomization(namespace, repo.url))
        first = _synced(cluster, namespace, first_sha, flux)
        took_first = time.monotonic() - pushed
        first_spread, first_count = seen.spread(pushed)
        assert first["revision"] == 1 and sorted(revisions(cluster, namespace)) == [1]
        for name in ("planner-researcher", "planner-reviewer", "planner-translator"):
            assert condition(get(cluster, "vap", name, namespace), "Ready")["status"] == "True"

        # One commit: the config and two profiles.
        def change(gitops: Path) -> None:
            _edit(
                gitops / "base" / "agentconfig.yaml",
                lambda c: c["spec"].update(instructions="Plan, then delegate; cite sources."),
            )
            for path in (
                gitops / "base" / "profiles" / "researcher.yaml",
                gitops / "overlays" / "staging" / "profiles" / "translator.yaml",
            ):
                _edit(path, lambda p: p["spec"]["overlay"].update(maxSteps=7))

        sha = repo.commit("agents: shorter runs, sourced plans", change)
        pushed = time.monotonic()
        reconcile_now(cluster, namespace)
        second = _synced(cluster, namespace, sha, flux)
        took_second = time.monotonic() - pushed
        second_spread, second_count = seen.spread(pushed)
    assert second["revision"] == 2 and sorted(revisions(cluster, namespace)) == [1, 2]
    held = revisions(cluster, namespace)[2]
    assert held["spec"]["config"]["instructions"] == "Plan, then delegate; cite sources."
    steps = max_steps(held)
    assert steps["researcher"] == steps["translator"] == 7

    # A profile removed from git: Flux prunes it, one revision without it.
    sha = repo.commit(
        "agents: drop the translator",
        lambda gitops: _drop_translator(gitops / "overlays" / "staging"),
    )
    reconcile_now(cluster, namespace)
    _synced(cluster, namespace, sha, flux)
    wait_until(
        "the translator to be pruned",
        lambda: (
            cluster.kubectl(
                "get", "vap", "planner-translator", "-n", namespace, check=False
            ).returncode
            != 0
        ),
    )
    # The prune is a deletion after the sync's apply: its revision is cut a settle window
    # later, maybe after the sync reports done.
    wait_until("revision 3", lambda: sorted(revisions(cluster, namespace)) == [1, 2, 3])
    third_map = revisions(cluster, namespace)[3]["spec"]["profileMap"]
    keys = {p["profile"]["key"] for p in third_map["profiles"]}
    assert "translator" not in keys and "researcher" in keys
    print(
        f"\nFlux: first commit applied {first_count} objects {first_spread * 1000:.0f} ms apart, "
        f"Kustomization Ready {took_first:.1f} s after it was created; a commit of 3 changes "
        f"applied {second_count} {second_spread * 1000:.0f} ms apart, Ready {took_second:.1f} s "
        f"after the push (settle window {DEFAULT_SETTLE_SECONDS} s)"
    )
    assert first_spread < DEFAULT_SETTLE_SECONDS and second_spread < DEFAULT_SETTLE_SECONDS


def _drop_translator(staging: Path) -> None:
    (staging / "profiles" / "translator.yaml").unlink()
    _edit(
        staging / "kustomization.yaml",
        lambda k: k.update(resources=[r for r in k["resources"] if "translator" not in r]),
    )


def test_a_git_revert_brings_back_the_revision_and_the_bound_child_runs(
    cluster: Cluster, namespace: str, flux: Flux, repo: GitRepo
) -> None:
    first = _installed(cluster, namespace, flux, repo)
    cluster.apply(namespace, _worker("parent", initialMessage="plan the work"))
    phase(cluster, namespace, "parent", "Running")
    cluster.apply(namespace, _worker("child", parent="parent", profile="researcher", suspend=True))
    bound(cluster, namespace, "child", first["revision"])
    change = repo.commit(
        "agents: researcher takes longer",
        lambda g: _edit(
            g / "base" / "profiles" / "researcher.yaml",
            lambda p: p["spec"]["overlay"].update(maxSteps=30),
        ),
    )
    reconcile_now(cluster, namespace)
    assert _synced(cluster, namespace, change, flux)["revision"] == first["revision"] + 1

    reverted = repo.revert(change)
    reconcile_now(cluster, namespace)
    assert _synced(cluster, namespace, reverted, flux) == first  # same id, same digest
    assert len(revisions(cluster, namespace)) == 2
    resume(cluster, namespace, "child")
    phase(cluster, namespace, "child", "Running")


def test_a_bad_commit_fails_the_sync_with_the_admission_message(
    cluster: Cluster, namespace: str, flux: Flux, repo: GitRepo
) -> None:
    good = _installed(cluster, namespace, flux, repo)
    before = {
        name: copy.deepcopy(get(cluster, "vap", name, namespace)["spec"])
        for name in ("planner-researcher", "planner-translator")
    }
    bad = repo.commit(
        "agents: let the researcher pick its provider",
        lambda g: _edit(
            g / "base" / "profiles" / "researcher.yaml",
            lambda p: p["spec"]["overlay"].update(providers=["openai"]),
        ),
    )
    pushed = time.monotonic()
    reconcile_now(cluster, namespace)

    def failed() -> dict[str, Any] | None:
        body = get(cluster, "kustomization", "agents-staging", namespace)
        ready = condition(body, "Ready")
        attempted = str(body.get("status", {}).get("lastAttemptedRevision", ""))
        return ready if attempted.endswith(bad) and ready.get("status") == "False" else None

    ready = wait_until("the Kustomization to fail", failed, timeout=120)
    took = time.monotonic() - pushed
    assert "spec.overlay.providers" in ready["message"], ready
    assert took < 60, took
    print(f"\nFlux: a bad commit failed the Kustomization {took:.1f} s after the push: {ready}")
    assert get(cluster, "ac", "planner", namespace)["status"]["activeRevision"] == good
    after = {name: get(cluster, "vap", name, namespace)["spec"] for name in before}
    assert after == before
    assert sorted(revisions(cluster, namespace)) == [1]
