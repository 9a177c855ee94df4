"""The operator's Prometheus metrics, in one place. Labels stay low-cardinality: never a name."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REVISIONS_CREATED = Counter(
    "agentworkers_revisions_created_total", "AgentConfigRevisions the operator created."
)
CONFIG_REFUSALS = Counter(
    "agentworkers_config_refusals_total",
    "Config-plane changes refused (admission or handler), by reason.",
    ["reason", "stage"],
)
HANDLER_ERRORS = Counter(
    "agentworkers_handler_errors_total",
    "Handler failures that will be retried, by handler.",
    ["handler"],
)
RECONCILE_SECONDS = Histogram(
    "agentworkers_config_reconcile_seconds", "Time to reconcile one AgentConfig's revisions."
)
