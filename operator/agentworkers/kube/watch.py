"""The one list-then-watch loop, for the client's waits and event streams and the runtime.

(The operator's own watches are kopf's; they feed `agentworkers.kube.store`.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Literal

from agentworkers.errors import ApiError
from agentworkers.kube.api import Api, Body, SilentWatch

# A watch is reopened at least this often, so a waiter can report progress and notice its
# deadline even when nothing changes.
HEARTBEAT_SECONDS = 10.0
# The API server sends a watch that asks for bookmarks one about every minute, however
# quiet its objects (and one just before the watch's end): a connection that sends nothing
# for longer is dead, though nobody said so (a partition, a NAT entry gone). The watch is
# then opened again from the last version it saw. kopf's own watches give up after 70 s.
SILENCE_SECONDS = 75.0

Change = Literal["ADDED", "MODIFIED", "DELETED", "SYNCED", "IDLE"]


def observe(
    api: Api,
    plural: str,
    namespace: str,
    *,
    name: str | None = None,
    labels: str = "",
    deadline: float | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
    since: Body | None = None,
) -> Iterator[tuple[Change, Body | None]]:
    """Every change of one object (`name`) or of all (those `labels` selects), from now
    on, without polling; `namespace` may be `ALL_NAMESPACES` (one watch for the cluster).

    Yields ("ADDED" | "MODIFIED" | "DELETED", body), ("SYNCED", None) after each listing
    and ("IDLE", None) after each quiet spell of at most `heartbeat` seconds. It lists,
    then watches from the listing's resourceVersion, so nothing falls in between; when a
    watch expires (410 Gone) it lists again, and what vanished meanwhile comes out
    DELETED. A watch gone silent for `SILENCE_SECONDS` (a connection lost without a word)
    is opened again from the last version seen. Ends at the deadline (monotonic clock); a
    broken connection is an ApiError.

    `since`: the object `name` as just read, which stands for the first listing: it comes
    out ADDED and the watch starts from its version (one request fewer).
    """
    fields = f"metadata.name={name}" if name else ""
    known: dict[str, Body] = {}
    while True:
        if since is not None:
            version = since["metadata"]["resourceVersion"]
            current = {since["metadata"]["uid"]: since}
            since = None
        else:
            listing = api.list(plural, namespace, labels=labels, fields=fields)
            version = listing["metadata"]["resourceVersion"]
            current = {b["metadata"]["uid"]: b for b in listing.get("items", [])}
        for uid in known.keys() - current.keys():
            yield "DELETED", known.pop(uid)
        for uid, body in current.items():
            known[uid] = body
            yield "ADDED", body
        yield "SYNCED", None
        while True:
            spell = heartbeat
            if deadline is not None:
                spell = min(spell, deadline - time.monotonic())
                if spell <= 0:
                    return
            try:
                for event in api.watch(
                    plural,
                    namespace,
                    version,
                    max(1, math.ceil(spell)),
                    labels=labels,
                    fields=fields,
                    silence=SILENCE_SECONDS,
                ):
                    body = event["object"]
                    version = body["metadata"]["resourceVersion"]
                    kind = event["type"]
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        known.pop(body["metadata"]["uid"], None)
                    else:
                        known[body["metadata"]["uid"]] = body
                    yield kind, body
            except SilentWatch:
                pass  # presumed dead: watch again from the last version seen
            except ApiError as e:
                if e.status != 410:
                    raise
                break  # expired: list again
            yield "IDLE", None
