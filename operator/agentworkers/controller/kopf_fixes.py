"""A work-around for a kopf defect that loses namespaces, applied before `kopf.run`.

Given namespace patterns (`--namespace team-*`), kopf (1.45) finds the namespaces to
serve in two steps: it lists them, then starts a watch-stream on namespaces, which lists
them again before it watches. It skips that second listing (its events have type None),
so a namespace created between the two listings is never served: nothing in it is
handled until the operator restarts. We saw it lose namespaces created in a window of
about 20 ms, right after the operator's start. Serving listed namespaces like added ones
closes the gap; adding a namespace kopf already serves changes nothing.

`tests/e2e/test_operator.py` creates namespaces through the operator's start and checks
that every one is served; it fails if a kopf upgrade brings the gap back.
"""

from __future__ import annotations

import logging
from typing import Any

from kopf._core.reactor import observation

log = logging.getLogger(__name__)


async def process_discovered_namespace_event(
    *,
    raw_event: Any,
    namespaces: Any,
    insights: Any,
    **_: Any,
) -> None:
    """kopf's own processor, without its skip of listed (type None) namespaces."""
    async with insights.revised:
        observation.revise_namespaces(
            raw_events=[raw_event], insights=insights, namespaces=namespaces
        )
        insights.revised.notify_all()


def apply() -> None:
    """Install the fix (idempotent): kopf looks the processor up when its observer starts."""
    if not hasattr(observation, "process_discovered_namespace_event") or not hasattr(
        observation, "revise_namespaces"
    ):
        # A kopf that moved things: run without the fix (the e2e test tells if it is needed).
        log.warning("kopf's namespace observer has changed; running without the fix")
        return
    observation.process_discovered_namespace_event = process_discovered_namespace_event
