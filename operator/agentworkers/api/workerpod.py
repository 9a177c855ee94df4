"""Where and how a worker's pod runs: the pod knobs an install defaults and an
AgentConfig's spec.worker overrides, its warm pool and its queue."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Self

from pydantic import Field, StrictInt, StrictStr, field_validator, model_validator

from agentworkers.api.common import DNS_SUBDOMAIN, FieldValueError, KubeModel, SubdomainName

# The image 0.1.0's CRD filled in when spec.worker.image was left out: stored AgentConfigs
# carry it though no one chose it, so it stands for "the install's image", like an omission.
IMAGE_DEFAULT_0_1_0 = "ghcr.io/agentworkers/agentworkers:0.1.0"


class Toleration(KubeModel):
    """A taint a worker pod tolerates, as in a Pod."""

    key: StrictStr | None = Field(default=None, description="Taint key; empty: every key.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (the default)."
    )
    value: StrictStr | None = Field(default=None, description="Taint value, for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect; empty: every effect."
    )
    toleration_seconds: StrictInt | None = Field(
        default=None, description="How long a NoExecute taint is tolerated.", ge=0
    )


class Affinity(KubeModel):
    """Scheduling constraints of a worker pod, as in a Pod's spec.affinity."""

    node_affinity: dict[str, Any] | None = Field(default=None, description="As in a Pod.")
    pod_affinity: dict[str, Any] | None = Field(default=None, description="As in a Pod.")
    pod_anti_affinity: dict[str, Any] | None = Field(default=None, description="As in a Pod.")


class Resources(KubeModel):
    """Container resources of a worker, as in a Pod."""

    requests: dict[str, StrictStr] | None = Field(default=None, description="e.g. cpu: 250m.")
    limits: dict[str, StrictStr] | None = Field(default=None, description="e.g. memory: 1Gi.")


# Bound of an agent's pool of identities: ServiceAccounts are small, but each free one is
# an object the API server keeps.
MAX_IDENTITY_POOL: Final = 1000


class WorkerPod(KubeModel):
    """Where and how a worker's pod runs. The operator's install sets defaults for every
    agent (the chart's `workerDefaults`, its image included); an AgentConfig's spec.worker
    overrides them field by field."""

    image: StrictStr | None = Field(
        default=None,
        description="Image of the worker runtime; omit for the install's own image.",
        min_length=1,
    )
    image_pull_secrets: tuple[SubdomainName, ...] | None = Field(
        default=None, description="Names of Secrets to pull the image with."
    )
    runtime_class_name: SubdomainName | None = Field(
        default=None, description="RuntimeClass of the pod, e.g. gvisor or kata."
    )
    node_selector: dict[str, StrictStr] | None = Field(
        default=None, description="Node labels the pod must land on."
    )
    tolerations: tuple[Toleration, ...] | None = Field(
        default=None, description="Taints the pod tolerates."
    )
    affinity: Affinity | None = Field(default=None, description="Scheduling constraints.")
    resources: Resources | None = Field(
        default=None, description="Container resources (requests and limits)."
    )
    priority_class_name: SubdomainName | None = Field(
        default=None, description="PriorityClass of the pod."
    )
    service_account_annotations: dict[str, StrictStr] | None = Field(
        default=None,
        description="Annotations of each run's own ServiceAccount (workload identity, e.g. "
        "eks.amazonaws.com/role-arn or iam.gke.io/gcp-service-account).",
    )
    identity_pool: StrictInt | None = Field(
        default=None,
        description="ServiceAccounts of this agent made ahead of its cold runs, each "
        'reused only once the pod that ran as it is gone (docs/scaling.md, "Pooled '
        f'identities"); 0 or unset: each run gets its own. At most {MAX_IDENTITY_POOL}.',
        ge=0,
        le=MAX_IDENTITY_POOL,
    )

    @field_validator("image")
    @classmethod
    def _install_image(cls, image: str | None) -> str | None:
        return None if image == IMAGE_DEFAULT_0_1_0 else image

    def over(self, defaults: WorkerPod) -> Self:
        """These knobs, each one left out taken from `defaults`."""
        unset = {
            k: getattr(defaults, k) for k in WorkerPod.model_fields if getattr(self, k) is None
        }
        return self.model_copy(update=unset)


# A Kueue LocalQueue's name: a DNS-1123 subdomain that is also a label value (63 at most).
QueueName = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN)]

# Bounds of a warm pool: pods that wait idle count against the namespace's quota, and a
# pool replaces every one of them on each revision, so it stays small.
MAX_WARM_POOL_SIZE: Final = 50
DEFAULT_WARM_IDLE_SECONDS: Final = 3600


class WarmPool(KubeModel):
    """Pods of this agent started ahead of its runs (docs/scaling.md, "Warm pool"): a
    spawn claims a ready one instead of waiting for a pod; an empty pool means a cold
    start, never a wait."""

    size: StrictInt = Field(
        default=0,
        description=f"Warm pods kept ready; 0 turns the pool off. At most {MAX_WARM_POOL_SIZE}.",
        ge=0,
        le=MAX_WARM_POOL_SIZE,
    )
    idle_seconds: StrictInt = Field(
        default=DEFAULT_WARM_IDLE_SECONDS,
        description="A warm pod unclaimed for this long is replaced by a fresh one.",
        ge=30,
        le=86400,
    )


class WorkerTemplate(WorkerPod):
    """Knobs of the pod each worker of this agent runs in."""

    queue_name: QueueName | None = Field(
        default=None,
        description="A Kueue LocalQueue in this namespace: every run of this agent (its "
        "children too) waits in it until Kueue admits its pod (Worker Pending, condition "
        "Queued), by the pod's resource requests, which resources.requests must set (cpu or "
        "memory). Omit to start runs at once. docs/multitenancy.md.",
    )

    sandbox_size: StrictStr = Field(
        default="1Gi",
        description="Size limit of the emptyDir sandbox mounted as the working directory.",
    )
    deadline_seconds: StrictInt | None = Field(
        default=None,
        description="activeDeadlineSeconds of the pod: the longest a run may take.",
        ge=1,
    )
    idle_timeout_seconds: StrictInt | None = Field(
        default=None,
        description="How long an interactive run may wait Idle before it ends (IdleTimeout); "
        "omit for no limit. A Worker's own wins.",
        ge=1,
    )
    ttl_seconds_after_finished: StrictInt | None = Field(
        default=None,
        description="How long a finished run nobody has to collect stays before it is deleted; "
        "omit to keep it. A Worker's own wins.",
        ge=0,
    )
    warm_pool: WarmPool | None = Field(
        default=None,
        description="Pods started ahead of this agent's runs, at its active revision; a "
        "spawn whose pod they match claims one.",
    )

    @model_validator(mode="after")
    def _queued_runs_request(self) -> Self:
        # Kueue admits a pod by its requests: a pod without any would fit every quota.
        requests = (self.resources.requests if self.resources else None) or {}
        if self.queue_name is not None and not {"cpu", "memory"} & requests.keys():
            raise FieldValueError(
                "resources.requests",
                "a queued run (queueName) needs cpu or memory requests: Kueue admits a pod "
                "by its requests, and one with none would fit every quota",
            )
        return self
