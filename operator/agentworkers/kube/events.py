"""core/v1 Events, as `kubectl describe` shows them, each posted once.

A pass that runs again (a conflict on its status write, a retry after an API error)
reaches the same decision and would post the same Event again; the recorder remembers
what it posted for a while and drops the repeat, like client-go's correlator does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentworkers.api.names import FIELD_MANAGER
from agentworkers.core.clocks import now
from agentworkers.core.conditions import truncate
from agentworkers.core.objects import meta
from agentworkers.errors import ApiError
from agentworkers.kube.api import Api

log = logging.getLogger(__name__)

Key = tuple[str, str, str, str]  # (object uid, type, reason, message)


@dataclass
class Recorder:
    api: Api
    # An identical Event on the same object within this many seconds is a repeat.
    window: float = 600.0
    # At most this many remembered Events (the oldest are forgotten first).
    size: int = 10_000
    _posted: OrderedDict[Key, float] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> bool:
        """Post the Event unless it is a recent repeat; returns whether it was posted.

        Best effort: an Event that cannot be posted never fails a handler."""
        about = meta(body)
        message = truncate(message)
        key = (about.uid, type_, reason, message)
        if not self._first(key):
            return False
        stamp = now()
        event = {
            "metadata": {"generateName": f"{about.name}.", "namespace": about.namespace},
            "involvedObject": {
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "name": about.name,
                "namespace": about.namespace,
                "uid": about.uid,
                "resourceVersion": about.resource_version or None,
            },
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.api.create("events", about.namespace, event)
        except ApiError as e:
            with self._lock:
                self._posted.pop(key, None)  # not posted: a later pass may try again
            log.warning(
                "could not post the %s Event on %s/%s: %s", reason, body["kind"], about.name, e
            )
            return False
        return True

    def _first(self, key: Key) -> bool:
        clock = time.monotonic()
        with self._lock:
            while self._posted and (
                len(self._posted) >= self.size
                or next(iter(self._posted.values())) < clock - self.window
            ):
                self._posted.popitem(last=False)
            if key in self._posted:
                return False
            self._posted[key] = clock
            return True
