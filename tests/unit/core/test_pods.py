"""A failed pod, said in a user's words: the container's reason, or the pod's."""

from __future__ import annotations

from typing import Any

import pytest

from agentworkers.core.pods import failure


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (
            {
                "containerStatuses": [
                    {
                        "name": "agent",
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    }
                ]
            },
            ("OOMKilled", "container agent exited 137 (SIGKILL): OOMKilled"),
        ),
        (
            {
                "reason": "DeadlineExceeded",
                "message": "Pod was active on the node longer than the specified deadline",
            },
            ("DeadlineExceeded", "Pod was active on the node longer than the specified deadline"),
        ),
        (
            {
                "containerStatuses": [
                    {"name": "agent", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
                ]
            },
            (None, "container agent exited 1: Error"),
        ),
        ({}, (None, "the pod failed")),
    ],
)
def test_a_failed_pod_says_why(status: dict[str, Any], said: tuple[str | None, str]) -> None:
    assert failure({"status": {"phase": "Failed", **status}}) == said
