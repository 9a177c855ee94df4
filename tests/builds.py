"""The Go-built tools where hack/build-*.sh leave them (hack/golib.sh's layout), found
without building: for a test that uses a tool only when it has been built."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def versions() -> dict[str, str]:
    """hack/versions.env: each tool's pinned version, by its variable."""
    return dict(
        line.split("=", 1)
        for line in (REPO / "hack" / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def built(directory: str, binary: str) -> Path | None:
    """`binary` of the build in `directory` under the cache's bin/, if it is there. The
    cache: $AGENTWORKERS_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/agentworkers."""
    cache = Path(
        os.environ.get("AGENTWORKERS_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentworkers"
    )
    found = cache / "bin" / directory / binary
    return found if found.exists() else None
