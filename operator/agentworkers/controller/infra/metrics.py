"""The operator's Prometheus metrics, in one place. Labels stay low-cardinality: never a name."""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram

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
RECONCILES = Counter(
    "agentworkers_reconciles_total",
    "Reconcile passes, by handler and result (success, requeue_after: a clock asked for "
    "another, wait: waiting on something, conflict: a 409, retried, error: retried after a "
    "backoff).",
    ["handler", "result"],
)
RECONCILE_SECONDS = Histogram(
    "agentworkers_config_reconcile_seconds", "Time to reconcile one AgentConfig's revisions."
)

ADMISSION_SECONDS = Histogram(
    "agentworkers_admission_review_seconds",
    "Time to answer one admission review, from its request read to its response written "
    "(the operator's side; the API server's own histogram adds the network and its queue).",
    ["check"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

SPAWNS = Counter(
    "agentworkers_spawns_total", "Workers whose run the operator started (pod created)."
)
SPAWN_REFUSALS = Counter(
    "agentworkers_spawn_refusals_total",
    "Spawns refused before a pod existed, by reason and stage (admission or handler).",
    ["reason", "stage"],
)
PIN_FAILURES = Counter(
    "agentworkers_pin_failures_total",
    "Run starts refused by the binding check, by reason.",
    ["reason"],
)
KILLS = Counter(
    "agentworkers_kills_total",
    "Runs killed, by how (spec, parent, deletion, tree-budget).",
    ["via"],
)
TREE_RUNS = Histogram(
    "agentworkers_tree_runs",
    "Runs below a top-level run, each time its tree is summed, by agent.",
    ["agent"],
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500),
)
RUN_FAILURES = Counter(
    "agentworkers_run_failures_total", "Runs that ended Failed, by reason.", ["reason"]
)
POD_LATENCY = Histogram(
    "agentworkers_worker_pod_latency_seconds",
    "Time from a Worker's creation to its pod's creation.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
WARM_CLAIMS = Counter(
    "agentworkers_warm_claims_total", "Runs that started in a warm pod of their agent's pool."
)
WARM_MISSES = Counter(
    "agentworkers_warm_misses_total",
    "Runs of an agent with a warm pool that started cold: the pool was empty, had no ready "
    "pod of the run's revision and settings, or lost every claim it tried.",
    ["reason"],
)
WARM_CREATED = Counter("agentworkers_warm_pods_created_total", "Warm pods created.")
WARM_PODS = Gauge(
    "agentworkers_warm_pods",
    "Pods of every warm pool by state: ready, starting, claimed (by a run still going).",
    ["state"],
)
WARM_CLAIM_TO_RUNNING = Histogram(
    "agentworkers_warm_claim_to_running_seconds",
    "Time from a warm pod's claim to its runtime's Running report, as the operator sees it.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
)
IDENTITY_TAKES = Counter(
    "agentworkers_identity_takes_total",
    "Cold runs that took a pooled ServiceAccount of their agent (no account made on their path).",
)
IDENTITY_MISSES = Counter(
    "agentworkers_identity_misses_total",
    "Cold runs of an agent with an identity pool that found none free (an account of their own).",
)
IDENTITY_CREATED = Counter(
    "agentworkers_identities_created_total", "Pooled ServiceAccounts created."
)
IDENTITY_ACCOUNTS = Gauge(
    "agentworkers_identities", "Pooled ServiceAccounts of every pool by state (free).", ["state"]
)
WORKERS = Gauge("agentworkers_workers", "Workers this operator tracks, by phase.", ["phase"])
STORE_OBJECTS = Gauge(
    "agentworkers_store_objects",
    "Objects in the operator's watch-fed store, by kind (its memory grows with them).",
    ["kind"],
)


class PhaseTracker:
    """Keeps `agentworkers_workers{phase}` from each worker's last known phase."""

    def __init__(self) -> None:
        self._phases: dict[str, str] = {}
        self._lock = threading.Lock()

    def observe(self, uid: str, phase: str | None) -> None:
        with self._lock:
            old = self._phases.pop(uid, None)
            if old is not None:
                WORKERS.labels(phase=old).dec()
            if phase is not None:
                self._phases[uid] = phase
                WORKERS.labels(phase=phase).inc()


PHASES = PhaseTracker()

TOKENS_USED = Gauge(
    "agentworkers_tokens_used",
    "Tokens the Workers that exist now used (their runtimes' reports), by agent, profile "
    "('' for none) and kind (prompt, completion).",
    ["agent", "profile", "kind"],
)


class TokenTracker:
    """Keeps `agentworkers_tokens_used` from each worker's last known report."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, str, int, int]] = {}
        self._lock = threading.Lock()

    def observe(self, uid: str, agent: str, profile: str, prompt: int, completion: int) -> None:
        with self._lock:
            self._add(self._seen.get(uid), -1)
            self._seen[uid] = (agent, profile, prompt, completion)
            self._add(self._seen[uid], 1)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._add(self._seen.pop(uid, None), -1)

    @staticmethod
    def _add(seen: tuple[str, str, int, int] | None, sign: int) -> None:
        if seen is not None:
            agent, profile, prompt, completion = seen
            TOKENS_USED.labels(agent, profile, "prompt").inc(sign * prompt)
            TOKENS_USED.labels(agent, profile, "completion").inc(sign * completion)


TOKENS = TokenTracker()
SHARDS_HELD = Gauge(
    "agentworkers_shards_held",
    "Shards of the namespaces this replica serves now: 1 without --shards or --leader-elect; "
    "with --leader-elect, 1 on the active replica and 0 on a standby.",
)

QUOTA_TOKENS = Gauge(
    "agentworkers_token_quota_tokens",
    "Each TokenQuota in its current window, as last summed: limit, used, reserved (what live "
    "runs may still use) and remaining, by the quota's namespace and name.",
    ["quota_namespace", "quota", "kind"],
)
SPANS_DROPPED = Counter(
    "agentworkers_trace_spans_dropped_total",
    "The operator's spans that did not reach the trace collector (refused, timed out, or "
    "past the exporter's queue): tracing costs the spans, never a reconcile.",
)
