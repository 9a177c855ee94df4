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

# --- annotations ---------------------------------------------------------------------

# On a profiled child: its sealed binding (key, agent, owner, revision, profile). Only the
# operator writes it, once, before the child's pod exists.
BINDING_ANNOTATION: Final = f"{GROUP}/binding"
# On a top-level run's pod: the revision it froze at run start (its children bind to it).
FROZEN_ANNOTATION: Final = f"{GROUP}/frozen-revision"
# On a Worker: set by collect before it deletes the Worker, so the deletion is not a kill.
COLLECTED_ANNOTATION: Final = f"{GROUP}/collected"
# On an AgentConfigRevision: the GitOps engine that applied the change it holds, where the
# engine marks what it applies (a Flux Kustomization, an Argo CD Application).
APPLIED_BY_ANNOTATION: Final = f"{GROUP}/applied-by"
# What the engines write on the objects they apply (read, never written, by the operator).
FLUX_NAME_LABEL: Final = "kustomize.toolkit.fluxcd.io/name"
FLUX_NAMESPACE_LABEL: Final = "kustomize.toolkit.fluxcd.io/namespace"
ARGOCD_TRACKING_ANNOTATION: Final = "argocd.argoproj.io/tracking-id"

# --- finalizers and identities -------------------------------------------------------

# kopf's, on AgentConfigs and profiles only: a deletion is seen before the object goes.
FINALIZER: Final = f"{GROUP}/finalizer"
# The operator's field manager, Event source and reporting component.
FIELD_MANAGER: Final = "agentworkers-operator"
