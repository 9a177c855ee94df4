"""Worker pods in real containers: the pod runner's container mode (runc).

A pod's container runs from the project's image (one read-only rootfs shared by every
pod, under an overlay of its own: nothing is copied per pod) under the OCI config
`oci.runtime_config` makes of its spec, in a network of its own (`podnet`), with the
volumes the runner prepared. `runc run` stays in the foreground: its exit is the
container's, its stdout and stderr the container's (the runner copies them to the CRI
log file), and the signals it gets are passed on to the container. `runc events`
reports an OOM kill of the memory cgroup, for the `OOMKilled` a kubelet reports.

Everything a container leaves behind (its runc state, bundle, tmpfs mounts, network) is
under a state directory shared by the runners of this machine, recorded with the pid of
its runner: a runner that starts cleans up after those that are gone (`reap`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import image as built  # hack/image.py: the Dockerfile's image, built here
import oci
import podnet
from localcluster import alive

STATE = Path(os.environ.get("AGENTWORKERS_POD_STATE", "/run/agentworkers-pods"))
# The cgroup (under each v1 controller, or the v2 root) every container's goes under.
CGROUP_PARENT = "agentworkers"
log = logging.getLogger("podrunner")


@dataclass(frozen=True)
class Image:
    """What a container runs from: an unpacked rootfs (never written to) and the image's
    config (Entrypoint, Cmd, Env, User, WorkingDir)."""

    rootfs: Path
    config: dict[str, Any]


def image() -> Image:
    """The project's image, built from the Dockerfile (hack/image.py, cached)."""
    found = built.ensure_image()
    config = found.config
    return Image(Path(found.rootfs), config.get("config", config))


@dataclass
class Container:
    id: str
    bundle: Path
    process: subprocess.Popen[bytes] | None
    network: podnet.PodNetwork | None
    # Set when its memory cgroup killed one of its processes.
    oom: threading.Event


class Runc:
    """Runs pods' containers with runc; one per runner."""

    def __init__(self, state: Path = STATE, pids_limit: int = oci.DEFAULT_PIDS_LIMIT) -> None:
        if not shutil.which("runc"):
            raise SystemExit("container mode needs runc (apt-get install runc)")
        self.root = state / "runc"
        self.bundles = state / "bundles"
        self.bundles.mkdir(parents=True, exist_ok=True)
        self.networks = podnet.Networks(state)
        self.pids_limit = pids_limit
        self.image = image()
        self.live: dict[str, Container] = {}
        # One removal at a time: a reaping thread and `close` may remove the same container.
        self.removing = threading.Lock()
        self.reap()

    def runc(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runc", "--root", str(self.root), *args], capture_output=True, text=True, check=check
        )

    def create(self) -> Container:
        """A container's id and bundle directory, for the runner to put its volumes in
        (`volumes/`) before `run`."""
        id = f"aw-{uuid.uuid4().hex[:8]}"
        bundle = self.bundles / id
        (bundle / "volumes").mkdir(parents=True)
        (bundle / "owner").write_text(str(os.getpid()))
        return Container(id, bundle, None, None, threading.Event())

    def run(
        self,
        container: Container,
        pod: dict[str, Any],
        env: dict[str, str],
        volume_dirs: dict[str, str],
        allowed: list[podnet.Endpoint],
    ) -> subprocess.Popen[bytes]:
        """Run `pod`'s container; raises oci.PodSpecError if it cannot run as specified
        (and anything else that went wrong), having removed what it made."""
        try:
            rootfs = self._rootfs(container.bundle)
            container.network = self.networks.create(container.id[3:], allowed)
            placement = oci.Placement(
                rootfs=str(rootfs),
                volume_dirs=volume_dirs,
                etc_files=self._etc_files(pod, container.bundle),
                netns=container.network.netns_path,
                cgroups_path=f"/{CGROUP_PARENT}/{container.id}",
                pids_limit=self.pids_limit,
                env=env,
            )
            config = oci.runtime_config(pod, self.image.config, placement)
            (container.bundle / "config.json").write_text(json.dumps(config, indent=1))
            # Whose container this is: for `runc exec` by hand, and the tests' (`find`).
            meta = pod["metadata"]
            (container.bundle / "pod").write_text(f"{meta['namespace']}/{meta['name']}")
            container.process = subprocess.Popen(
                ["runc", "--root", str(self.root), "run", "--bundle", str(container.bundle),
                 container.id],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        except BaseException:
            self.remove(container)
            raise
        self.live[container.id] = container
        threading.Thread(target=self._watch_oom, args=(container,), daemon=True).start()
        return container.process

    def _rootfs(self, bundle: Path) -> Path:
        """The image's rootfs under an overlay of the container's own: nothing is copied,
        and the mount points runc makes (for volumes the image has no directory for) land
        in the container's upper layer, never in the image shared by every container."""
        rootfs, upper, work = bundle / "rootfs", bundle / "upper", bundle / "work"
        for directory in (rootfs, upper, work):
            directory.mkdir()
        options = f"lowerdir={self.image.rootfs},upperdir={upper},workdir={work}"
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(rootfs)], check=True
        )
        return rootfs

    @staticmethod
    def _etc_files(pod: dict[str, Any], bundle: Path) -> dict[str, str]:
        """/etc/hostname, /etc/hosts and an empty /etc/resolv.conf, as a kubelet writes them."""
        name = pod["metadata"]["name"]
        files = {
            "/etc/hostname": f"{name}\n",
            "/etc/hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{name}\n",
            "/etc/resolv.conf": "",  # no DNS: the local peers are addresses
        }
        found = {}
        for target, text in files.items():
            path = bundle / Path(target).name
            path.write_text(text)
            path.chmod(0o644)
            found[target] = str(path)
        return found

    def _watch_oom(self, container: Container) -> None:
        """Set `container.oom` when its memory cgroup kills a process (`runc events`)."""
        events = None
        assert container.process is not None
        for _ in range(100):  # until the container exists (runc run has made it)
            if container.process.poll() is not None:
                return
            if self.runc("state", container.id).returncode == 0:
                events = subprocess.Popen(
                    ["runc", "--root", str(self.root), "events", "--interval=1h", container.id],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                break
            threading.Event().wait(0.05)
        if events is None or events.stdout is None:
            return
        with events.stdout:
            for line in events.stdout:
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("type") == "oom":
                        container.oom.set()
        events.wait()

    def signal(self, container: Container, signal: str) -> None:
        """Send `signal` (TERM, KILL) to the container's processes."""
        done = self.runc("kill", "--all", container.id, signal)
        if done.returncode != 0:
            log.warning("%s: runc kill %s: %s", container.id, signal, done.stderr.strip())

    def exec(self, container_id: str, *command: str) -> subprocess.CompletedProcess[str]:
        """A command in a running container, as its user, under its limits."""
        return self.runc("exec", container_id, *command)

    def remove(self, container: Container) -> None:
        """Everything the container had, once it stopped (again: a no-op)."""
        with self.removing:
            self.live.pop(container.id, None)
            if container.bundle.exists():
                self._remove(container.id, container.bundle, container.network)

    def close(self) -> None:
        """Every container of this runner stopped and removed (the runner is stopping),
        also one it was still making when it was told to stop."""
        for container in list(self.live.values()):
            self.runc("kill", "--all", container.id, "KILL")
            if container.process is not None:
                container.process.wait()
            self.remove(container)
        self.reap(mine=True)

    def _remove(self, id: str, bundle: Path, network: podnet.PodNetwork | None) -> None:
        """Runc's state, the network, the mounts, the bundle (its record last), the cgroups."""
        self.runc("delete", "--force", id)
        if network is not None:
            self.networks.delete(network)
        _unmount_under(bundle)
        shutil.rmtree(bundle, ignore_errors=True)
        for controller in Path("/sys/fs/cgroup").iterdir():
            with contextlib.suppress(OSError):
                (controller / CGROUP_PARENT / id).rmdir()

    def reap(self, mine: bool = False) -> None:
        """Containers (and networks) of runners that are gone (crashed), or (`mine`) of
        this one: stopped and removed."""
        with self.removing:
            for bundle in self.bundles.iterdir():
                try:
                    owner = int((bundle / "owner").read_text())
                except (OSError, ValueError):
                    owner = 0
                if owner != os.getpid() if mine else owner and alive(owner):
                    continue
                log.info("removing container %s (its runner stopped)", bundle.name)
                self.runc("kill", "--all", bundle.name, "KILL")
                self._remove(bundle.name, bundle, None)
        self.networks.reap(mine)


def find(namespace: str, name: str, state: Path = STATE) -> str | None:
    """The id of the container a pod runs in on this machine, if it runs in one."""
    for record in (state / "bundles").glob("*/pod"):
        with contextlib.suppress(OSError):
            if record.read_text() == f"{namespace}/{name}":
                return record.parent.name
    return None


def mount_tmpfs(directory: Path, options: str) -> None:
    """An emptyDir's tmpfs on the host, for a bind mount into the container."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], check=True)


def _unmount_under(root: Path) -> None:
    """Unmount every mount below `root` (an emptyDir's tmpfs), deepest first."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
