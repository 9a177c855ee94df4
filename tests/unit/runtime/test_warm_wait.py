"""A warm runtime's wait for its claim: it wakes when the file's directory changes (the
kubelet's, and the local pod runner's, atomic rename), not at its next poll."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agentworkers.api.agentconfig import RevisionRef
from agentworkers.core.pools import Claim
from agentworkers.runtime import claims

CLAIM = Claim(
    worker="w", uid="u", revision=RevisionRef(name="a-r1", revision=1, digest="d"), effective="{}"
)


def test_a_claim_renamed_into_place_wakes_the_waiting_runtime(tmp_path: Path) -> None:
    path = tmp_path / "claim"
    path.write_text("")  # an absent annotation: an empty file

    def claim() -> None:
        time.sleep(0.1)
        aside = tmp_path / ".claim.tmp"
        aside.write_text(CLAIM.model_dump_json(by_alias=True))
        aside.replace(path)

    threading.Thread(target=claim).start()
    began = time.monotonic()
    assert claims.wait_for_claim(path) == CLAIM
    assert time.monotonic() - began < claims.CLAIM_POLL  # woken by the change, not the poll


def test_a_waiting_runtime_keeps_its_connections_between_claim_reads(tmp_path: Path) -> None:
    """While it waits, `meanwhile` (the runtime's requests that keep its connections to
    the API server open) runs every `every` seconds, and never after the claim."""
    path = tmp_path / "claim"
    path.write_text("")
    kept: list[float] = []

    def claim() -> None:
        time.sleep(0.35)
        path.write_text(CLAIM.model_dump_json(by_alias=True))

    threading.Thread(target=claim).start()
    began = time.monotonic()
    assert claims.wait_for_claim(path, lambda: kept.append(time.monotonic()), every=0.1) == CLAIM
    ended = time.monotonic()
    assert 2 <= len(kept) <= 4
    assert all(began + 0.1 <= at < ended for at in kept)
