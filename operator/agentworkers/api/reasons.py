"""Every condition type and condition/Event reason the operator writes, with its meaning.

Like the Job controller's `JobReason*` constants: what `kubectl describe` and
`kubectl get -o jsonpath='{.status.conditions}'` show, one word each. The refusals
(InvalidProfile, TamperedBinding, SecretNotAllowed, ...) are the `reason` of their error
classes (`agentworkers.errors`, `agentworkers.virtualagent.errors`) and are not repeated here.
"""

from __future__ import annotations

from typing import Final

# --- condition types -----------------------------------------------------------------

# Worker: the run has what it needs and is going (or, False, why not).
READY: Final = "Ready"
# Worker: its pod exists (False while suspended).
STARTED: Final = "Started"
# Worker: a profiled child's binding was written.
PROFILE_BOUND: Final = "ProfileBound"
# Worker: a kill was asked for (Unknown while the pod goes, True once Killed).
KILLED: Final = "Killed"
# Worker: every MCP server the run keeps was reached at run start (False: which were not).
MCP_SERVERS_READY: Final = "McpServersReady"
# Worker: its pod waits in a Kueue LocalQueue (True), or Kueue admitted it (False, Admitted).
QUEUED: Final = "Queued"
# AgentConfig: the active revision is the current spec and profiles.
REVISION_CURRENT: Final = "RevisionCurrent"
# VirtualAgentProfile: whether the profile is in its agent's active revision.
ACCEPTED: Final = "Accepted"
# AgentConfig and VirtualAgentProfile, kstatus' "abnormal-true" pair, which Flux and
# `kubectl wait` read: Stalled=True, refused until the spec changes (the reason and message
# of the refusal); Reconciling=True, the operator is still working towards the spec.
STALLED: Final = "Stalled"
RECONCILING: Final = "Reconciling"

# --- Worker reasons ------------------------------------------------------------------

# Waiting (Ready=False, the run is retried):
AGENT_CONFIG_MISSING: Final = "AgentConfigMissing"  # the agent's AgentConfig does not exist
AGENT_CONFIG_INVALID: Final = "AgentConfigInvalid"  # it does not decode; it reports why itself
PROVIDER_MISSING: Final = "ModelProviderMissing"  # spec.model.providerRef names none
PROVIDER_INVALID: Final = "ModelProviderInvalid"  # the ModelProvider does not decode
MODEL_MISSING: Final = "ModelMissing"  # no model: neither the config, its provider nor the run
NO_ACTIVE_REVISION: Final = "NoActiveRevision"  # it has no revision yet
ANCESTOR_NOT_BOUND: Final = "AncestorNotBound"  # the profile run above is not bound yet
SUSPENDED: Final = "Suspended"  # Started=False until spec.suspend is cleared
# Going:
BOUND: Final = "Bound"  # ProfileBound=True
POD_CREATED: Final = "PodCreated"  # Started=True
RUNNING: Final = "Running"  # Ready=True
# Queued (AgentConfig spec.worker.queueName): Queued=True with Kueue's own reason for the
# wait (its Workload's QuotaReserved condition, e.g. Pending), or this one until Kueue has
# made that Workload; Queued=False and one Normal Event once Kueue admits the pod.
WAITING_FOR_ADMISSION: Final = "WaitingForAdmission"
ADMITTED: Final = "Admitted"
# Queued=False: the pod names a LocalQueue, but Kueue never gated it (not installed, or its
# pod integration does not manage the namespace): the run went on at once.
NOT_QUEUED: Final = "NotQueued"
# Ended on its own (one Event each, Ready=False):
COMPLETED: Final = "Completed"  # Done: the run finished its work (a Normal Event)
RUN_FAILED: Final = "RunFailed"  # Failed in the runtime (the model, a tool): status.error says
# An MCP server the run keeps could not be reached at run start: McpServersReady=False and
# one Warning Event; a required one also ends the run Failed with this reason.
MCP_SERVER_UNAVAILABLE: Final = "McpServerUnavailable"
MCP_SERVERS_CONNECTED: Final = "Connected"  # McpServersReady=True
# Ended by the operator (Failed, with one Warning Event):
POD_LOST: Final = "PodLost"  # the pod was deleted before the run ended
POD_CONFLICT: Final = "PodConflict"  # a pod by the run's name belongs to something else
POD_FAILED: Final = "PodFailed"  # the pod failed and its status gave no reason
# ... and the kubelet's words for why, taken as they are (one Warning Event each):
# the pod outlived its activeDeadlineSeconds, or a queued run its deadline (its pod freed)
DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
OOM_KILLED: Final = "OOMKilled"  # its container's memory limit killed it
# The clocks (one Event each):
IDLE_TIMEOUT: Final = "IdleTimeout"  # Done: Idle longer than idleTimeoutSeconds; pod freed
TTL_EXPIRED: Final = "TTLExpired"  # deleted ttlSecondsAfterFinished after it finished
# A spawn past a tree limit (refused at admission; Failed if one slips past it):
TREE_TOO_DEEP: Final = "TreeTooDeep"  # spec.tree.maxDepth
TOO_MANY_CHILDREN: Final = "TooManyChildren"  # spec.tree.maxChildren
TREE_FULL: Final = "TreeFull"  # spec.tree.maxLiveDescendants
TREE_BUDGET: Final = "TreeBudget"  # spec.tree.tokenBudget: less left than the child's own
# The tree used its spec.tree.tokenBudget: each live run below the root is killed (one Event
# each), and the root told (one Event).
TREE_BUDGET_EXHAUSTED: Final = "TreeBudgetExhausted"
# A spawn past a TokenQuota of its namespace (refused at admission, Failed if one slips past):
TOKEN_QUOTA_EXCEEDED: Final = "TokenQuotaExceeded"  # its budget does not fit in what is left
TOKEN_QUOTA_NEEDS_BUDGET: Final = "TokenQuotaNeedsBudget"  # under a quota, a run needs a budget

# --- AgentConfig and profile reasons -------------------------------------------------

REVISION_ACTIVE: Final = "RevisionActive"  # Ready=True
UP_TO_DATE: Final = "UpToDate"  # RevisionCurrent=True
REVISION_CREATED: Final = "RevisionCreated"  # Event: a new revision was cut
# Event: content a kept revision holds came back (a revert): that revision is active again.
REVISION_REACTIVATED: Final = "RevisionReactivated"
INCLUDED: Final = "Included"  # Accepted=True
OVERRIDDEN: Final = "Overridden"  # Accepted=False: the AgentConfig's own section wins the key
# Reconciling=True: a change to the agent's inputs waits for the rest of its change set
# (the settle window) before it is cut into a revision.
SETTLING: Final = "Settling"
# A profile whose agent's AgentConfig does not exist (yet) reuses AGENT_CONFIG_MISSING:
# Accepted=False, not Stalled (it joins the map once the config comes).
