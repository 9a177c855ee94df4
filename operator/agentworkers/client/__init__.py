"""The Python client: `Client` (sync) and `AsyncClient`, their results and errors.

    from agentworkers.client import Client
    with Client.from_kubeconfig(namespace="team-a") as client:
        client.spawn("w1", WorkerSpec(agent="planner", initial_message="hello"), wait={"Running"})
        result = client.collect("w1", timeout=60)

`errors` holds what it raises, `results` what it returns, `sync` the lifecycle verbs,
`selection` what kill and collect do to each worker they select, `config` the config
reads, `aio` the asyncio wrapper. It talks to the API server through
`agentworkers.kube`, like the operator.
"""

from agentworkers.client.aio import AsyncClient
from agentworkers.client.errors import (
    ApiError,
    ClientError,
    CollectTimeoutError,
    ConfigError,
    NotFoundError,
    TokenQuotaError,
    TreeLimitError,
    UnknownWorkerError,
    WaitTimeoutError,
    WorkerFinishedError,
    WorkerNameConflictError,
)
from agentworkers.client.results import (
    CollectResult,
    EventCursor,
    EventRecord,
    ExplainedField,
    Explanation,
    FieldChange,
    Inspection,
    KillOutcome,
    KillResult,
    ProfileChange,
    ProfileDiff,
    ProfileSet,
    QuotaInfo,
    RevisionInfo,
    TreeNode,
    WorkerFilter,
    WorkerInfo,
    diff_profiles,
    explain_fields,
    inspection,
    kill_outcome,
    revision_ref,
    spawn_forest,
    spawn_tree,
)
from agentworkers.client.sync import DEFAULT_COLLECT_TIMEOUT, Client

__all__ = [
    "DEFAULT_COLLECT_TIMEOUT",
    "ApiError",
    "AsyncClient",
    "Client",
    "ClientError",
    "CollectResult",
    "CollectTimeoutError",
    "ConfigError",
    "EventCursor",
    "EventRecord",
    "ExplainedField",
    "Explanation",
    "FieldChange",
    "Inspection",
    "KillOutcome",
    "KillResult",
    "NotFoundError",
    "ProfileChange",
    "ProfileDiff",
    "ProfileSet",
    "QuotaInfo",
    "RevisionInfo",
    "TokenQuotaError",
    "TreeLimitError",
    "TreeNode",
    "UnknownWorkerError",
    "WaitTimeoutError",
    "WorkerFilter",
    "WorkerFinishedError",
    "WorkerInfo",
    "WorkerNameConflictError",
    "diff_profiles",
    "explain_fields",
    "inspection",
    "kill_outcome",
    "revision_ref",
    "spawn_forest",
    "spawn_tree",
]
