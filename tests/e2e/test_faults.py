"""The fault suite's short versions (`bench/faults.py` runs the long ones, `make faults`)."""

from __future__ import annotations

from bench.faults import INVARIANTS, operator_crashes

from tests.e2e.support import Cluster


def test_operator_crashes_lose_and_double_nothing(cluster: Cluster) -> None:
    report = operator_crashes(cluster, spawns=45, kills=3, seconds=15)
    report.show()
    assert len(report.faults) == 3
    assert report.violations == {name: [] for name in INVARIANTS}
