"""A pod's container as an OCI runtime config (runc's config.json). Pure: no I/O but
reading the seccomp profile file beside this module.

What a kubelet and its container runtime (containerd's CRI plugin) make of a pod spec,
for the settings a worker pod uses:

* process: `command` (else the image's Entrypoint), then `args` (else, with no command,
  the image's Cmd); `env` over the image's Env; `workingDir` (else the image's);
* user: `runAsUser`/`runAsGroup` (the container's over the pod's, over the image's
  numeric `User`), `fsGroup` and `supplementalGroups` as additional groups;
  `runAsNonRoot` with uid 0 is refused, as the kubelet refuses to start it;
* `readOnlyRootFilesystem` -> a read-only root; `allowPrivilegeEscalation: false` ->
  `noNewPrivileges`; `capabilities` drop/add over the runtime's default set (drop ALL:
  every set empty); `seccompProfile` RuntimeDefault -> the profile in
  `seccomp-runtime-default.json` (Unconfined: none; Localhost is refused);
* masked and read-only /proc and /sys paths as containerd sets them;
* volumes: bind mounts of directories the runner made: an emptyDir a tmpfs of its own
  (`empty_dir_options`: `size=` its sizeLimit, group-writable by fsGroup), read-write;
  ConfigMap, Secret and projected volumes (the service-account token volume the API
  server adds), filled by the runner, read-only;
* resources: limits.memory -> the memory cgroup's limit (no swap beyond it), limits.cpu
  -> a CFS quota, requests.cpu -> CPU shares, and a pids limit (the kubelet's
  podPidsLimit: the pod spec has no field for it);
* hostname = the pod's name; new pid, ipc, uts and mount namespaces, and the network
  namespace the runner made (or a new, empty one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

SECCOMP_PROFILE = Path(__file__).with_name("seccomp-runtime-default.json")
# The pids limit when the runner is given none: a kubelet's --pod-max-pids set by most
# distributions; a fork bomb stops here instead of at the machine's.
DEFAULT_PIDS_LIMIT = 512
# CFS period, as containerd sets it.
CPU_PERIOD = 100_000
# The capabilities a runtime gives a container that asks for none (containerd's default).
DEFAULT_CAPABILITIES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
MASKED_PATHS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READONLY_PATHS = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)


class PodSpecError(ValueError):
    """The pod cannot run as specified: a kubelet's CreateContainerConfigError."""


@dataclass(frozen=True)
class Placement:
    """What the runner made for one pod, which the config points at."""

    rootfs: str
    # Volume name -> host directory the runner made: an emptyDir's tmpfs, or a ConfigMap,
    # Secret or projected volume it filled.
    volume_dirs: dict[str, str] = field(default_factory=dict)
    # Host files bind-mounted over /etc/hosts, /etc/hostname, /etc/resolv.conf.
    etc_files: dict[str, str] = field(default_factory=dict)
    # Path of the network namespace (/var/run/netns/NAME); None: a new, empty one.
    netns: str | None = None
    cgroups_path: str = ""
    pids_limit: int = DEFAULT_PIDS_LIMIT
    # Env the runner resolved (the downward API's) and its own additions
    # (KUBERNETES_SERVICE_HOST, say), over the image's Env and the pod's plain values.
    env: dict[str, str] = field(default_factory=dict)


def runtime_config(
    pod: dict[str, Any], image_config: dict[str, Any], placement: Placement
) -> dict[str, Any]:
    """The OCI runtime config of `pod`'s first container (the wire form of the pod, as
    the API returns it); `image_config` the image's OCI config (its `config` object:
    Entrypoint, Cmd, Env, User, WorkingDir)."""
    spec = pod["spec"]
    container = spec["containers"][0]
    pod_sc = spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    return {
        "ociVersion": "1.0.2",
        "process": _process(pod, container, image_config, placement, pod_sc, sc),
        "root": {"path": placement.rootfs, "readonly": bool(sc.get("readOnlyRootFilesystem"))},
        "hostname": pod["metadata"]["name"],
        "mounts": _mounts(spec, container, placement),
        "linux": _linux(container, placement, pod_sc, sc),
    }


def _process(
    pod: dict[str, Any],
    container: dict[str, Any],
    image: dict[str, Any],
    placement: Placement,
    pod_sc: dict[str, Any],
    sc: dict[str, Any],
) -> dict[str, Any]:
    name = container.get("name", "")
    if container.get("command"):
        args = [*container["command"], *(container.get("args") or [])]
    else:
        args = [
            *(image.get("Entrypoint") or []),
            *(container.get("args") or image.get("Cmd") or []),
        ]
    if not args:
        raise PodSpecError(f"container {name}: no command, and the image has no entrypoint")
    env = dict(e.split("=", 1) for e in image.get("Env") or [])
    env["HOSTNAME"] = pod["metadata"]["name"]
    env.update({e["name"]: e["value"] for e in container.get("env") or [] if "value" in e})
    env.update(placement.env)
    caps = capabilities(sc.get("capabilities") or {})
    process: dict[str, Any] = {
        "terminal": False,
        "user": user(container, image, pod_sc, sc),
        "args": args,
        "env": [f"{k}={v}" for k, v in env.items()],
        "cwd": container.get("workingDir") or image.get("WorkingDir") or "/",
        "capabilities": {
            "bounding": caps,
            "effective": caps,
            "permitted": caps,
            "inheritable": [],
            "ambient": [],
        },
        # Unset means allowed, as in Kubernetes.
        "noNewPrivileges": sc.get("allowPrivilegeEscalation") is False,
    }
    return process


def user(
    container: dict[str, Any], image: dict[str, Any], pod_sc: dict[str, Any], sc: dict[str, Any]
) -> dict[str, Any]:
    """uid, gid and additional groups; refuses a root uid under runAsNonRoot."""
    image_uid, image_gid = _image_user(image.get("User") or "")
    uid = _first(sc.get("runAsUser"), pod_sc.get("runAsUser"), image_uid, 0)
    gid = _first(sc.get("runAsGroup"), pod_sc.get("runAsGroup"), image_gid, 0)
    non_root = _first(sc.get("runAsNonRoot"), pod_sc.get("runAsNonRoot"), False)
    if non_root and uid == 0:
        raise PodSpecError(
            f"container {container.get('name', '')}: runAsNonRoot and the image will run as "
            "root (uid 0)"
        )
    groups = [pod_sc["fsGroup"]] if pod_sc.get("fsGroup") is not None else []
    groups += [g for g in pod_sc.get("supplementalGroups") or [] if g not in groups]
    found: dict[str, Any] = {"uid": uid, "gid": gid}
    if groups:
        found["additionalGids"] = groups
    return found


def _image_user(spelt: str) -> tuple[int | None, int | None]:
    """The image's `User` ("65532", "65532:65532"); a name cannot be resolved here."""
    if not spelt:
        return None, None
    uid, _, gid = spelt.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise PodSpecError(f"image user {spelt!r}: only a numeric uid[:gid] is supported")
    return int(uid), int(gid) if gid else None


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def capabilities(spec: dict[str, Any]) -> list[str]:
    """The runtime's default set, less `drop` (ALL: every one), plus `add`."""
    drop = {_cap(c) for c in spec.get("drop") or []}
    kept = [] if "CAP_ALL" in drop else [c for c in DEFAULT_CAPABILITIES if c not in drop]
    return kept + [c for c in map(_cap, spec.get("add") or []) if c not in kept]


def _cap(name: str) -> str:
    name = name.upper()
    return name if name.startswith("CAP_") else f"CAP_{name}"


def _mounts(
    spec: dict[str, Any],
    container: dict[str, Any],
    placement: Placement,
) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {
            "destination": "/dev/mqueue",
            "type": "mqueue",
            "source": "mqueue",
            "options": ["nosuid", "noexec", "nodev"],
        },
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": ["nosuid", "noexec", "nodev", "ro"],
        },
        {
            "destination": "/sys/fs/cgroup",
            "type": "cgroup",
            "source": "cgroup",
            "options": ["nosuid", "noexec", "nodev", "relatime", "ro"],
        },
    ]
    mounts += [_bind(src, dst, readonly=True) for dst, src in placement.etc_files.items()]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise PodSpecError(f"volumeMounts {mount['name']}: no volume of that name")
        directory = placement.volume_dirs.get(mount["name"])
        if directory is None:
            kinds = sorted(k for k in volume if k != "name")
            raise PodSpecError(f"volume {mount['name']}: {kinds} is not supported here")
        # An emptyDir is the pod's to write; Secrets, ConfigMaps and projected volumes are
        # read-only, whatever the mount says.
        writable = "emptyDir" in volume and not mount.get("readOnly")
        mounts.append(_bind(directory, mount["mountPath"], readonly=not writable))
    return mounts


def empty_dir_options(source: dict[str, Any], fs_group: int | None) -> str:
    """The mount options of the tmpfs an emptyDir is: its sizeLimit bounds it (a write past
    it fails with ENOSPC); writable by everyone, as a kubelet makes it, and owned by fsGroup
    with setgid. (The runner mounts it on the host and binds it in: a runtime gives a tmpfs
    the mode of the directory it lands on, which a read-only image decides.)"""
    options = ["nosuid", "nodev"]
    if source.get("sizeLimit"):
        options.append(f"size={int(parse_quantity(source['sizeLimit']))}")
    options += ["mode=2777", f"gid={fs_group}"] if fs_group is not None else ["mode=0777"]
    return ",".join(options)


def _bind(source: str, destination: str, readonly: bool) -> dict[str, Any]:
    options = ["rbind", "nosuid", "nodev", "ro" if readonly else "rw"]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def _linux(
    container: dict[str, Any],
    placement: Placement,
    pod_sc: dict[str, Any],
    sc: dict[str, Any],
) -> dict[str, Any]:
    network: dict[str, Any] = {"type": "network"}
    if placement.netns:
        network["path"] = placement.netns
    linux: dict[str, Any] = {
        "namespaces": [
            {"type": "pid"},
            {"type": "ipc"},
            {"type": "uts"},
            {"type": "mount"},
            network,
        ],
        "resources": resources(container.get("resources") or {}, placement.pids_limit),
        "maskedPaths": list(MASKED_PATHS),
        "readonlyPaths": list(READONLY_PATHS),
    }
    if placement.cgroups_path:
        linux["cgroupsPath"] = placement.cgroups_path
    profile = seccomp(sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {})
    if profile is not None:
        linux["seccomp"] = profile
    return linux


def resources(spec: dict[str, Any], pids_limit: int) -> dict[str, Any]:
    """Cgroup limits from the container's resources: memory, CPU and the pids limit."""
    limits, requests = spec.get("limits") or {}, spec.get("requests") or {}
    found: dict[str, Any] = {
        # Devices: none but those the runtime itself creates (null, zero, urandom, ...).
        "devices": [{"allow": False, "access": "rwm"}],
        "pids": {"limit": pids_limit},
    }
    if limits.get("memory"):
        memory = int(parse_quantity(limits["memory"]))
        # swappiness 0: the limit is the container's memory, not a swap budget.
        found["memory"] = {"limit": memory, "swappiness": 0}
    cpu: dict[str, Any] = {}
    if limits.get("cpu"):
        cpu.update(quota=int(parse_quantity(limits["cpu"]) * CPU_PERIOD), period=CPU_PERIOD)
    if requests.get("cpu"):
        cpu["shares"] = max(2, int(parse_quantity(requests["cpu"]) * 1024))
    if cpu:
        found["cpu"] = cpu
    return found


def seccomp(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The OCI seccomp section of a pod's seccompProfile; None: unconfined."""
    kind = spec.get("type", "Unconfined")
    if kind == "RuntimeDefault":
        return runtime_default_profile()
    if kind == "Unconfined":
        return None
    raise PodSpecError(f"seccompProfile.type {kind}: only RuntimeDefault and Unconfined run here")


@cache
def runtime_default_profile() -> dict[str, Any]:
    """The RuntimeDefault profile (seccomp-runtime-default.json, its `comment` aside)."""
    profile = json.loads(SECCOMP_PROFILE.read_text())
    return {k: v for k, v in profile.items() if not k.startswith("comment")}
