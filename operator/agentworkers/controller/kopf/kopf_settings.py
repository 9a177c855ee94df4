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


# The kinds the operator watches only where their CRDs are installed: Kueue's Workloads.
OPTIONAL_GROUPS = ("kueue.x-k8s.io",)


class OptionalKinds(logging.Filter):
    """Drops kopf's warning that a watched kind has no CRD when every such kind is an
    optional one: kopf repeats it at each namespace change, and a cluster without Kueue is
    no fault (its Workloads are watched from the moment its CRDs are installed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Unresolved resources cannot be served"):
            return True
        named = message.split(": ", 1)[-1].split(", Selector(")
        return not all(f"group='{group}'" in n for n in named for group in OPTIONAL_GROUPS)


def quiet() -> None:
    logging.getLogger("kopf.objects").addFilter(QuietSuccesses())
    logging.getLogger("kopf._core.reactor.observation").addFilter(OptionalKinds())
