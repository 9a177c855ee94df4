"""How the operator quiets kopf: no log line per successful handler.

Every event of every Worker and pod used to log a "Handler ... succeeded" line. Events
now go past kopf's handling (`kopf_fixes` 7); what kopf still runs itself (startup and
cleanup handlers, a review it would serve) logs failures, retries and lifecycle lines only.
"""

from __future__ import annotations

import logging


class QuietSuccesses(logging.Filter):
    """Drops kopf's per-event success lines of event, index and webhook handlers (one per
    event per object at scale); failures, retries and lifecycle lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str):
            return True
        message = record.getMessage()
        return not (
            message.endswith(" succeeded.")
            and (message.startswith("Handler '") or message.startswith("Webhook '"))
        )


def quiet() -> None:
    logging.getLogger("kopf.objects").addFilter(QuietSuccesses())
