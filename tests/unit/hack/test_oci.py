"""hack/oci.py: a worker pod, as the operator builds it, as an OCI runtime config; and
hack/podnet.py's rules, as text. Pure: no root, no runc."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import oci
import podnet
from agentworkers.api import AgentConfigSpec
from agentworkers.api.worker import WorkerSpec
from agentworkers.core.effective import resolve
from agentworkers.core.pods import RUNTIME_UID, SANDBOX, build_pod

REPO = Path(__file__).resolve().parents[3]

IMAGE = {
    "User": "65532:65532",
    "Env": ["PATH=/opt/agentworkers/bin:/usr/bin:/bin", "HOME=/tmp"],
    "Entrypoint": ["agentworkers"],
    "Cmd": ["--help"],
    "WorkingDir": "/tmp",
}
PLACEMENT = oci.Placement(
    rootfs="/images/aw/rootfs",
    volume_dirs={
        "sandbox": "/run/pods/b/volumes/sandbox",
        "tmp": "/run/pods/b/volumes/tmp",
        "secret-0": "/run/pods/b/volumes/secret-0",
    },
    netns="/var/run/netns/aw-1",
    cgroups_path="/agentworkers/aw-1",
    pids_limit=128,
    env={"AGENTWORKERS_WORKER": "w", "KUBERNETES_SERVICE_HOST": "127.0.0.1"},
)


def worker_pod(**worker: Any) -> dict[str, Any]:
    """The pod the operator builds for a Worker of an agent with a model key Secret."""
    config = AgentConfigSpec.model_validate(
        {
            "model": {"provider": "scripted", "model": "m", "apiKeySecret": "model-key"},
            "worker": {"sandboxSize": "256Mi", **worker},
        }
    )
    body = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": "w", "namespace": "team-a", "uid": "u"},
    }
    spec = WorkerSpec(agent="planner")
    return build_pod(body, spec, config, resolve(config, spec, None), "w-runtime", 600)


def test_the_worker_pod_runs_as_its_security_context_says() -> None:
    config = oci.runtime_config(worker_pod(), IMAGE, PLACEMENT)
    process = config["process"]
    assert process["user"] == {"uid": RUNTIME_UID, "gid": RUNTIME_UID, "additionalGids": [65532]}
    assert process["args"] == ["agentworkers", "run", "--worker=w", "--namespace=team-a"]
    assert process["cwd"] == SANDBOX
    assert process["noNewPrivileges"] is True
    assert all(process["capabilities"][s] == [] for s in process["capabilities"])
    assert config["root"] == {"path": "/images/aw/rootfs", "readonly": True}
    assert config["hostname"] == "w"
    env = dict(e.split("=", 1) for e in process["env"])
    # The image's PATH, the pod's HOME over the image's, the runner's additions.
    assert env["PATH"] == "/opt/agentworkers/bin:/usr/bin:/bin"
    assert env["HOME"] == SANDBOX
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["HOSTNAME"] == "w"


def test_runtime_default_seccomp_denies_by_default_and_keeps_the_kernel_s_own_calls_out() -> None:
    seccomp = oci.runtime_config(worker_pod(), IMAGE, PLACEMENT)["linux"]["seccomp"]
    assert seccomp["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = {
        n for s in seccomp["syscalls"] if s["action"] == "SCMP_ACT_ALLOW" for n in s["names"]
    }
    assert {"read", "write", "openat", "execve", "getrandom", "futex"} <= allowed
    refused = {
        "init_module",
        "finit_module",
        "delete_module",
        "mount",
        "umount2",
        "unshare",
        "setns",
        "clock_settime",
        "settimeofday",
        "adjtimex",
        "reboot",
        "kexec_load",
        "bpf",
        "ptrace",
        "keyctl",
        "userfaultfd",
        "io_uring_setup",
        "chroot",
        "pivot_root",
    }
    assert not refused & allowed
    # clone is allowed only without namespace flags; clone3 answers ENOSYS.
    clone = next(s for s in seccomp["syscalls"] if s["names"] == ["clone"])
    assert clone["args"][0]["op"] == "SCMP_CMP_MASKED_EQ" and clone["args"][0]["value"] != 0
    assert "comment" not in seccomp


def test_volumes_are_bind_mounts_secrets_read_only_the_sandbox_writable() -> None:
    mounts = {
        m["destination"]: m for m in oci.runtime_config(worker_pod(), IMAGE, PLACEMENT)["mounts"]
    }
    assert mounts[SANDBOX]["source"] == "/run/pods/b/volumes/sandbox"
    assert "rw" in mounts[SANDBOX]["options"] and "rw" in mounts["/tmp"]["options"]
    secret = mounts["/var/run/agentworkers/secrets/model-key"]
    assert secret["source"] == "/run/pods/b/volumes/secret-0" and "ro" in secret["options"]
    assert mounts["/sys"]["options"][-1] == "ro" and mounts["/proc"]["type"] == "proc"


def test_an_empty_dir_is_a_tmpfs_its_size_limit_bounds_owned_by_fs_group() -> None:
    options = oci.empty_dir_options({"sizeLimit": "256Mi"}, 65532)
    assert options == "nosuid,nodev,size=268435456,mode=2777,gid=65532"
    assert oci.empty_dir_options({}, None) == "nosuid,nodev,mode=0777"


def test_resources_become_cgroup_limits_with_a_pids_limit() -> None:
    pod = worker_pod(
        resources={"limits": {"memory": "512Mi", "cpu": "1500m"}, "requests": {"cpu": "250m"}}
    )
    linux = oci.runtime_config(pod, IMAGE, PLACEMENT)["linux"]
    assert linux["resources"]["memory"] == {"limit": 512 * 2**20, "swappiness": 0}
    assert linux["resources"]["cpu"] == {"quota": 150_000, "period": 100_000, "shares": 256}
    assert linux["resources"]["pids"] == {"limit": 128}
    assert linux["cgroupsPath"] == "/agentworkers/aw-1"
    assert {"type": "network", "path": "/var/run/netns/aw-1"} in linux["namespaces"]
    assert "/proc/kcore" in linux["maskedPaths"] and "/proc/sys" in linux["readonlyPaths"]


def test_run_as_non_root_refuses_uid_0_naming_the_container() -> None:
    pod = worker_pod()
    pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0
    with pytest.raises(oci.PodSpecError, match=r"container agent: runAsNonRoot .* \(uid 0\)"):
        oci.runtime_config(pod, IMAGE, PLACEMENT)
    # Without runAsNonRoot, root runs (the image's user, else uid 0).
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert oci.runtime_config(plain, IMAGE, PLACEMENT)["process"]["user"] == {
        "uid": 65532,
        "gid": 65532,
    }
    assert (
        oci.runtime_config(plain, {"Entrypoint": ["x"]}, PLACEMENT)["process"]["user"]["uid"] == 0
    )


def test_command_args_and_the_image_s_entrypoint_and_cmd() -> None:
    def args(container: dict[str, Any]) -> list[str]:
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", **container}]}}
        return list(oci.runtime_config(pod, IMAGE, PLACEMENT)["process"]["args"])

    assert args({}) == ["agentworkers", "--help"]
    assert args({"args": ["run"]}) == ["agentworkers", "run"]
    assert args({"command": ["sh"]}) == ["sh"]  # a command drops the image's Cmd
    assert args({"command": ["sh"], "args": ["-c", "x"]}) == ["sh", "-c", "x"]


def test_capabilities_drop_and_add_over_the_runtime_default() -> None:
    assert oci.capabilities({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}) == [
        "CAP_NET_BIND_SERVICE"
    ]
    kept = oci.capabilities({"drop": ["NET_RAW"]})
    assert "CAP_NET_RAW" not in kept and "CAP_CHOWN" in kept
    assert "CAP_SYS_ADMIN" not in oci.capabilities({})


def test_unsupported_settings_are_refused_by_name() -> None:
    pod = worker_pod()
    pod["spec"]["securityContext"]["seccompProfile"] = {
        "type": "Localhost",
        "localhostProfile": "p",
    }
    pod["spec"]["containers"][0]["securityContext"].pop("seccompProfile")
    with pytest.raises(oci.PodSpecError, match=r"seccompProfile\.type Localhost"):
        oci.runtime_config(pod, IMAGE, PLACEMENT)
    hostpath = copy.deepcopy(worker_pod())
    hostpath["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    hostpath["spec"]["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": "/h"})
    with pytest.raises(oci.PodSpecError, match=r"volume host: \['hostPath'\] is not supported"):
        oci.runtime_config(hostpath, IMAGE, PLACEMENT)


def test_the_seccomp_profile_file_is_valid_json_with_unique_names() -> None:
    profile = json.loads(oci.SECCOMP_PROFILE.read_text())
    names = [
        n
        for s in profile["syscalls"]
        if s["action"] == "SCMP_ACT_ALLOW" and "args" not in s
        for n in s["names"]
    ]
    assert len(names) == len(set(names))


NET = podnet.PodNetwork("0a1b2c3d", 5)


def test_a_pod_network_has_its_own_slash_30_in_the_benchmarking_range() -> None:
    assert (NET.gateway, NET.address) == ("198.19.0.21", "198.19.0.22")
    assert NET.host_link == "awh0a1b2c3d" and len(NET.host_link) <= 15
    assert podnet.SLOTS == 16384


def test_host_rules_let_in_only_what_the_policy_allows() -> None:
    allowed = [podnet.Endpoint("127.0.0.1", 6443), podnet.Endpoint("10.244.0.9", 8080)]
    rules = podnet.host_rules(NET, allowed, {"10.244.0.9"})
    assert 'iifname "awh0a1b2c3d" ip daddr 198.19.0.21 tcp dport 6443 dnat to 127.0.0.1' in rules
    assert 'iifname "awh0a1b2c3d" ip daddr 10.244.0.9 tcp dport 8080 accept' in rules
    # Default deny: the last word on input and forwarding is a drop.
    lines = [line.strip() for line in rules.splitlines()]
    assert lines[lines.index("chain forward {") + 2] == 'iifname "awh0a1b2c3d" drop'
    input_rules = lines[lines.index("chain input {") + 1 : lines.index("chain forward {")]
    assert input_rules[-2] == 'iifname "awh0a1b2c3d" drop'
    # A loopback endpoint is reached through the pod's namespace rewriting it.
    pod = podnet.pod_rules(NET, allowed)
    assert "ip daddr 127.0.0.1 tcp dport 6443 dnat to 198.19.0.21" in pod
    assert "10.244.0.9" not in pod


def test_an_endpoint_is_read_from_a_url_or_host_and_port() -> None:
    assert podnet.endpoint("https://127.0.0.1:6443") == podnet.Endpoint("127.0.0.1", 6443)
    assert podnet.endpoint("http://localhost/v1") == podnet.Endpoint("127.0.0.1", 80)
    assert podnet.endpoint("127.0.0.2:9000") == podnet.Endpoint("127.0.0.2", 9000)
    with pytest.raises(ValueError, match="no host"):
        podnet.endpoint("http:///x")
