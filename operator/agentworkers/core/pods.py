"""The pod of one Worker. Pure: a manifest from the Worker, its AgentConfig and effective config.

Hardened to pass Pod Security "restricted": non-root, read-only root filesystem, no
privilege escalation, every capability dropped, RuntimeDefault seccomp. The sandbox
is an emptyDir mounted as the working directory; it goes with the pod. Each skill the
run keeps is its ConfigMap, mounted read-only inside the sandbox at skills/<name>; a
skill the run does not keep is not in its pod at all.
"""

from __future__ import annotations

from typing import Any

from agentworkers import __version__
from agentworkers.api import reasons
from agentworkers.api.agentconfig import AgentConfigSpec
from agentworkers.api.names import AGENT_LABEL, KUEUE_QUEUE_LABEL, WORKER_LABEL
from agentworkers.api.worker import WorkerSpec
from agentworkers.core.effective import EffectiveConfig
from agentworkers.core.objects import meta, pod_status
from agentworkers.core.owners import owner_reference

# The worker image when neither the AgentConfig nor the install names one: this release's.
DEFAULT_IMAGE = f"ghcr.io/agentworkers/agentworkers:{__version__}"
# Knobs of spec.worker that go into the pod's spec as they are spelt.
PLACEMENT = ("runtimeClassName", "priorityClassName", "nodeSelector", "tolerations", "affinity")
SANDBOX = "/sandbox"
# Where a kept skill's ConfigMap is mounted, relative to the sandbox: skills/<name>.
SKILLS_DIR = "skills"
SECRETS_DIR = "/var/run/agentworkers/secrets"
RUNTIME_UID = 65532
# The pod's copy of what the operator decided the run may do (read by the runtime and explain).
EFFECTIVE_CONFIG_ENV = "AGENTWORKERS_EFFECTIVE_CONFIG"


def pod_name(worker: str) -> str:
    """Deterministic, so a retry after a crash finds the pod it made instead of making another."""
    return worker


def running_since(pod: dict[str, Any]) -> str | None:
    """When the pod's first container started running, as its kubelet reported."""
    return pod_status(pod).running_since


# Exit codes above 128 are a signal's number plus 128, as a shell and a kubelet report them.
SIGNALS = {137: "SIGKILL", 143: "SIGTERM", 139: "SIGSEGV", 134: "SIGABRT"}


def failure(pod: dict[str, Any]) -> tuple[str | None, str]:
    """Why a Failed pod failed: the kubelet's reason for the pod (Evicted,
    DeadlineExceeded), else OOMKilled when its container's memory limit killed it, if
    either, and what its container's end says, e.g. `container agent exited 137
    (SIGKILL): OOMKilled`."""
    status = pod_status(pod)
    if status.message:
        return status.reason, status.message
    if (ended := status.terminated) is not None:
        code = ended.exit_code
        signal = f" ({SIGNALS[code]})" if code in SIGNALS else ""
        why = f": {ended.reason}" if ended.reason else ""
        oom = reasons.OOM_KILLED if ended.reason == reasons.OOM_KILLED else None
        said = f"container {ended.container} exited {code}{signal}{why}"
        return status.reason or oom, said
    return status.reason, "the pod failed"


def build_pod(
    worker_body: dict[str, Any],
    worker: WorkerSpec,
    config: AgentConfigSpec,
    effective: EffectiveConfig,
    service_account: str | None = None,
    deadline_seconds: int | None = None,
) -> dict[str, Any]:
    """The run's pod; `deadline_seconds` its activeDeadlineSeconds (`core.clocks`).
    `config.worker` holds the pod's knobs, the install's defaults filled in."""
    worker_meta = meta(worker_body)
    name, namespace = worker_meta.name, worker_meta.namespace
    # The secrets the run may use, the agent's model key, which every run of it needs, and
    # the header Secrets of the MCP servers it keeps (those of a hidden server stay out).
    headers = {name for server in effective.mcp_servers for name in server.secrets()}
    mounted = sorted({*effective.secrets, *filter(None, [effective.api_key_secret]), *headers})
    secret_volumes = [
        {"name": f"secret-{i}", "secret": {"secretName": secret, "defaultMode": 0o440}}
        for i, secret in enumerate(mounted)
    ]
    secret_mounts = [
        {"name": f"secret-{i}", "mountPath": f"{SECRETS_DIR}/{secret}", "readOnly": True}
        for i, secret in enumerate(mounted)
    ]
    # Optional: a skill whose ConfigMap is missing mounts empty, and the runtime says so
    # (an event) instead of the pod never starting. 0555: its scripts can be run.
    skill_volumes = [
        {
            "name": f"skill-{i}",
            "configMap": {"name": skill, "optional": True, "defaultMode": 0o555},
        }
        for i, skill in enumerate(effective.skills)
    ]
    skill_mounts = [
        {"name": f"skill-{i}", "mountPath": f"{SANDBOX}/{SKILLS_DIR}/{skill}", "readOnly": True}
        for i, skill in enumerate(effective.skills)
    ]
    container: dict[str, Any] = {
        "name": "agent",
        "image": config.worker.image or DEFAULT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["agentworkers", "run"],
        "args": [f"--worker={name}", f"--namespace={namespace}"],
        "workingDir": SANDBOX,
        "env": [
            {"name": "AGENTWORKERS_WORKER", "value": name},
            {"name": "AGENTWORKERS_NAMESPACE", "value": namespace},
            {"name": "AGENTWORKERS_SANDBOX", "value": SANDBOX},
            {
                "name": EFFECTIVE_CONFIG_ENV,
                "value": effective.model_dump_json(by_alias=True),
            },
            {"name": "HOME", "value": SANDBOX},
        ],
        "volumeMounts": [
            {"name": "sandbox", "mountPath": SANDBOX},
            {"name": "tmp", "mountPath": "/tmp"},
            *skill_mounts,
            *secret_mounts,
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_UID,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    knobs = config.worker
    if knobs.resources:
        container["resources"] = knobs.resources.wire()
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            {"name": "sandbox", "emptyDir": {"sizeLimit": config.worker.sandbox_size}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            *skill_volumes,
            *secret_volumes,
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_UID,
            "runAsGroup": RUNTIME_UID,
            "fsGroup": RUNTIME_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "enableServiceLinks": False,
        # No API credentials unless the runtime has its own, least-privilege account.
        "automountServiceAccountToken": service_account is not None,
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    if knobs.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in knobs.image_pull_secrets]
    wire = knobs.wire()
    spec.update({key: wire[key] for key in PLACEMENT if wire.get(key)})
    if deadline_seconds:
        spec["activeDeadlineSeconds"] = deadline_seconds
    labels = {WORKER_LABEL: name, AGENT_LABEL: worker.agent}
    if knobs.queue_name:
        # Kueue's pod webhook gates a pod that names a LocalQueue, until Kueue admits it.
        labels[KUEUE_QUEUE_LABEL] = knobs.queue_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(worker_body)],
        },
        "spec": spec,
    }
