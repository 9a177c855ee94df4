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
