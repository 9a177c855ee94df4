"""Every label, annotation and finalizer agentworkers puts on an object, in one place.

Labels select; annotations record. All live under the API group's prefix, so
`kubectl get pods -l agentworkers.io/worker` finds every run's pod.
"""

from __future__ import annotations

from typing import Final

from agentworkers.api.common import GROUP

# --- labels --------------------------------------------------------------------------

# On a run's pod: the Worker it runs (the operator watches only pods that carry it).
WORKER_LABEL: Final = f"{GROUP}/worker"
# On a pod, a revision and a profiled child: the agent they belong to.
AGENT_LABEL: Final = f"{GROUP}/agent"
# On a profiled child: the AgentConfigRevision its binding pins.
REVISION_LABEL: Final = f"{GROUP}/revision"

# On a warm pod (docs/scaling.md, "Warm pool"): the agent whose pool it is, until a run
# claims it; the revision and the hash of the pod settings it was made for.
POOL_LABEL: Final = f"{GROUP}/warm-pool"
POD_SETTINGS_LABEL: Final = f"{GROUP}/pod-settings"
# On a warm pod a run claimed: the agent whose pool it came from (counted in its status).
CLAIMED_LABEL: Final = f"{GROUP}/warm-claimed"

# On a pooled ServiceAccount (docs/scaling.md, "Pooled identities"): the agent whose pool
# it is. On a run's pod and its RoleBinding: the pooled ServiceAccount the run runs as.
IDENTITY_POOL_LABEL: Final = f"{GROUP}/identity-pool"
IDENTITY_LABEL: Final = f"{GROUP}/identity"

# --- annotations ---------------------------------------------------------------------

# On a profiled child: its sealed binding (key, agent, owner, revision, profile). Only the
# operator writes it, once, before the child's pod exists.
BINDING_ANNOTATION: Final = f"{GROUP}/binding"
# On a top-level run's pod: the revision it froze at run start (its children bind to it).
FROZEN_ANNOTATION: Final = f"{GROUP}/frozen-revision"
# On a claimed warm pod: the run it serves (`core.pools.Claim`): its runtime reads it
# from a downward-API file.
CLAIM_ANNOTATION: Final = f"{GROUP}/claim"
# On a Worker: set by collect before it deletes the Worker, so the deletion is not a kill.
COLLECTED_ANNOTATION: Final = f"{GROUP}/collected"
# On an AgentConfigRevision: the GitOps engine that applied the change it holds, where the
# engine marks what it applies (a Flux Kustomization, an Argo CD Application).
APPLIED_BY_ANNOTATION: Final = f"{GROUP}/applied-by"
# What the engines write on the objects they apply (read, never written, by the operator).
FLUX_NAME_LABEL: Final = "kustomize.toolkit.fluxcd.io/name"
FLUX_NAMESPACE_LABEL: Final = "kustomize.toolkit.fluxcd.io/namespace"
ARGOCD_TRACKING_ANNOTATION: Final = "argocd.argoproj.io/tracking-id"

# --- Kueue's, on the pods of runs an AgentConfig queues (spec.worker.queueName) ----------

# The LocalQueue a pod waits in: Kueue's pod integration manages only pods that carry it.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
# The scheduling gate Kueue's webhook puts on such a pod, removed when Kueue admits it.
KUEUE_ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"

# --- finalizers and identities -------------------------------------------------------

# kopf's, on AgentConfigs and profiles only: a deletion is seen before the object goes.
FINALIZER: Final = f"{GROUP}/finalizer"
# The operator's field manager, Event source and reporting component.
FIELD_MANAGER: Final = "agentworkers-operator"

# --- MCP tool names ------------------------------------------------------------------

# An MCP server's tool is offered to the model as `<server>__<tool>`: OpenAI-compatible
# APIs take tool names of `^[a-zA-Z0-9_-]{1,64}$` only (no dots). A server's name never
# holds the separator (refused at admission), so the first one splits a name back.
MCP_TOOL_SEPARATOR: Final = "__"
# Every tool name the model is offered matches it (a server's tool that would not is left out).
TOOL_NAME_PATTERN: Final = r"^[a-zA-Z0-9_-]{1,64}$"
# What a server's name may be: letters, digits, `-`, and single `_` between them.
MCP_SERVER_NAME_PATTERN: Final = r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$"
MAX_MCP_SERVER_NAME: Final = 32


def mcp_tool_name(server: str, tool: str) -> str:
    """The name the model sees for `tool` of MCP server `server`."""
    return f"{server}{MCP_TOOL_SEPARATOR}{tool}"


def mcp_tool_of(name: str) -> tuple[str, str] | None:
    """(server, tool) of an offered MCP tool name; None for a name that is not one."""
    server, separator, tool = name.partition(MCP_TOOL_SEPARATOR)
    return (server, tool) if separator and server and tool else None
