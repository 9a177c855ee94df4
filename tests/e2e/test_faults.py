"""The fault suite's short versions (`bench/faults.py` runs the long ones, `make faults`)."""

from __future__ import annotations

from bench.fault_network import NETWORK_INVARIANTS, network_faults
from bench.faults import (
    INVARIANTS,
    RUNTIME_INVARIANTS,
    control_plane_restarts,
    operator_crashes,
    runtimes_killed,
)

from tests.e2e.support import Cluster


def test_operator_crashes_lose_and_double_nothing(cluster: Cluster) -> None:
    report = operator_crashes(cluster, spawns=45, kills=3, seconds=15)
    report.show()
    assert len(report.faults) == 3
    assert report.violations == {name: [] for name in INVARIANTS}


def test_killed_runtimes_and_deleted_pods_fail_loud_and_nothing_else_moves(
    cluster: Cluster,
) -> None:
    report = runtimes_killed(cluster, runs=8, kills=2, deletes=1)
    report.show()
    assert len(report.faults) == 3
    assert report.violations == {name: [] for name in RUNTIME_INVARIANTS}


def test_control_plane_restarts_lose_and_double_nothing(cluster: Cluster) -> None:
    report = control_plane_restarts(cluster, spawns=30, restarts=2, seconds=20)
    report.show()
    assert len(report.faults) == 2
    assert report.violations == {name: [] for name in INVARIANTS}


def test_network_faults_lose_and_double_nothing(cluster: Cluster) -> None:
    # A silent connection takes kopf 70 s to notice, and `observe` 75: this one runs longer.
    report = network_faults(
        cluster, spawns=30, faults=3, seconds=20, runs=6, kinds=("drop", "silent", "gone")
    )
    report.show()
    assert len(report.faults) == 3
    assert report.violations == {name: [] for name in NETWORK_INVARIANTS}
