#!/usr/bin/env python3
"""A local pod runner for the local control plane: a development tool, not a kubelet.

    python hack/podrunner.py [--kubeconfig K] [--namespace-prefix P] [--logs DIR]
                             [--pod-server URL] [--containers] [--pids-limit N]
                             [--allow HOST:PORT ...]

Two modes. By default (process mode: what the scale benches measure, since a process
starts faster and costs less than a container) pods run as local processes as below. With
--containers (or AGENTWORKERS_POD_CONTAINERS=1; root, runc and nftables) worker pods run
in real containers (hack/runcpods.py): the project's image, the pod's securityContext,
volumes, resources and activeDeadlineSeconds enforced, a network of its own that reaches
only the API server and its config's endpoints (docs/guarantees.md, "What the pod
enforces"); other pods (an operator a `helm install` made) stay processes.

kwok simulates nodes and pod phases but runs nothing. This tool watches the pods of
namespaces under a prefix (the worker pods the operator creates, and the operator's own
pods a `helm install` of the chart makes) and, once kwok reports one Running, runs its
container as a local process, the way a kubelet would run it:

* its command, or the image's ENTRYPOINT (`agentworkers`, as the Dockerfile names it),
  then its args, from this repository's environment;
* with the pod's `env`: plain values and the downward API's fieldRef (name, namespace,
  pod IP, service account, an annotation or a label);
* its volumes (emptyDir, ConfigMap, Secret, downwardAPI) made as local directories (`items`,
  `defaultMode`, a mount inside another one, as a skill's ConfigMap inside the sandbox),
  and every argument and env value under a mount path pointed at its directory;
* listening on its own pod IP where it asks for 0.0.0.0, so two replicas do not take each
  other's ports (kwok's pod IPs are this machine's: hack/localcluster.py puts their range
  on the loopback device);
* with the pod's own service-account credentials: a token requested for the pod's
  ServiceAccount, bound to the pod (refused once it is gone), and a kubeconfig of its
  own, so the runtime has exactly the
  least privilege it has in a real pod (its server: --pod-server, when the pods are to
  reach the API server another way than the runner does, as through the fault suite's
  proxy; else the runner's own);
* in a temporary directory standing in for the sandbox emptyDir (the pod's
  AGENTWORKERS_SANDBOX and working directory), removed with the process;
* its stdout and stderr appended, in the CRI log format a kubelet writes, to
  <logs>/<namespace>_<pod>.log, which a kwok `Logs` object points kwok at, so that
  `kubectl logs` shows the run;
* each pod's events on a thread of its own, in order (a kubelet's pod workers): a
  change to a running pod rewrites its downwardAPI files (a warm pod's claim) and may
  give it an activeDeadlineSeconds.

When the process exits, the pod's status becomes Succeeded or Failed with the exit
code (OOMKilled when the memory cgroup killed the container), as a kubelet would report
it; at its activeDeadlineSeconds the pod is stopped and Failed with reason
DeadlineExceeded; a pod whose restartPolicy is Always (a Deployment's)
has its process started again instead. When the pod is deleted, the process gets
SIGTERM (then SIGKILL), and the pod object stays until the process has stopped, as a
kubelet keeps a terminating pod (kwok deletes a pod as soon as it is asked to; the runner
holds each pod it runs with a finalizer of its own, let go once the process is gone): a
Deployment's next pod (Recreate), or a pod given the same IP, comes only after it. Only
the `agentworkers` command runs: anything else is refused.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

import oci
import podnet
from localcluster import local_pod_cidr
from runcpods import Container, Runc, mount_tmpfs

# The image's ENTRYPOINT (Dockerfile): what a container without a command runs.
ENTRYPOINT = ["agentworkers"]
# Seconds before a container that exited is started again (restartPolicy Always).
RESTART_DELAY = 1.0
# Holds a pod the runner runs until its process has stopped (see the module's docstring).
FINALIZER = "agentworkers.io/pod-runner"
STRATEGIC = "application/strategic-merge-patch+json"
# Pods the operator made for Workers: the ones container mode runs in containers.
WORKER_LABEL = "agentworkers.io/worker"
# What a kubelet says of a pod it stopped at its activeDeadlineSeconds.
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
# Set (to anything but 0): worker pods run in containers (--containers).
CONTAINERS_ENV = "AGENTWORKERS_POD_CONTAINERS"
# Seconds between SIGTERM and SIGKILL when the pod does not say (its default).
GRACE_SECONDS = 30
log = logging.getLogger("podrunner")


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    sandbox: Path
    home: Path
    pod: kubernetes.client.V1Pod
    # Container mode: the container the process (`runc run`) runs.
    container: Container | None = None
    # Its downwardAPI volumes' directories, by volume name: written again when the pod's
    # labels or annotations change, as a kubelet refreshes them.
    downward: dict[str, Path] = field(default_factory=dict)


class PodRunner:
    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        prefix: str,
        logs: Path,
        pod_server: str | None = None,
        containers: Runc | None = None,
        allow: tuple[str, ...] = (),
    ) -> None:
        self.api = api
        self.pod_server = pod_server
        # Container mode: worker pods run in containers (runc); None: as local processes.
        self.containers = containers
        self.allow = [podnet.endpoint(a) for a in allow]
        self.core = kubernetes.client.CoreV1Api(api)
        self.prefix = prefix
        self.logs = logs
        self.runs: dict[tuple[str, str], Run] = {}
        self.stopped: set[tuple[str, str]] = set()  # pods gone: their processes stay stopped
        self.held: set[tuple[str, str]] = set()  # pods with the runner's finalizer
        self.expired: set[tuple[str, str]] = set()  # pods stopped at their deadline
        self.refused: set[tuple[str, str]] = set()  # pods whose container could not start
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        # Each pod's events, in order, for its own thread (`handle`).
        self.pod_workers: dict[tuple[str, str], queue.SimpleQueue[Any]] = {}

    def watch(self) -> None:
        while not self.stopping.is_set():
            stream = kubernetes.watch.Watch()
            try:
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces, timeout_seconds=60
                ):
                    if self.stopping.is_set():
                        break
                    self.handle(event["type"], event["object"])
            except ApiException as e:
                log.warning("watch failed (%s); watching again", e.reason)
            except urllib3.exceptions.HTTPError as e:
                # The API server unreachable (restarted, say): as a kubelet, wait and retry.
                log.warning("watch broke (%s); watching again", e)
                time.sleep(1)
            finally:
                stream.stop()

    def handle(self, kind: str, pod: kubernetes.client.V1Pod) -> None:
        """Hand the event to its pod's own worker thread, as a kubelet's pod workers: one
        pod's events in order, a pod's slow start (its volumes, its token) never holding
        up another's (a warm pod's claim, written to its file)."""
        key = (pod.metadata.namespace, pod.metadata.name)
        if not key[0].startswith(self.prefix):
            return
        with self.lock:
            events = self.pod_workers.get(key)
            if events is None:
                events = self.pod_workers[key] = queue.SimpleQueue()
                threading.Thread(
                    target=self.pod_worker, args=(key, events), name=f"pod {key[1]}", daemon=True
                ).start()
            events.put((kind, pod))

    def pod_worker(self, key: tuple[str, str], events: queue.SimpleQueue[Any]) -> None:
        while True:
            kind, pod = events.get()
            try:
                self.handle_now(kind, pod)
            except Exception:
                log.exception("%s/%s: handling a %s event failed", *key, kind)
            with self.lock:
                if kind == "DELETED" and events.empty():
                    self.pod_workers.pop(key, None)
                    return

    def handle_now(self, kind: str, pod: kubernetes.client.V1Pod) -> None:
        key = (pod.metadata.namespace, pod.metadata.name)
        if kind == "DELETED" or pod.metadata.deletion_timestamp:
            self.stop(key)
            return
        if pod.status.phase == "Running" and key not in self.runs and key not in self.refused:
            self.start(pod)
        elif (run := self.runs.get(key)) is not None:
            self.refresh(run, pod)

    def refresh(self, run: Run, pod: kubernetes.client.V1Pod) -> None:
        """A running pod changed: what a kubelet takes from the new version, its
        downwardAPI files (a warm pod's claim) and its activeDeadlineSeconds."""
        run.pod = pod
        volumes = {v.name: v for v in pod.spec.volumes or []}
        fs_group = (pod.spec.security_context and pod.spec.security_context.fs_group) or None
        for name, directory in run.downward.items():
            if (volume := volumes.get(name)) is not None and volume.downward_api:
                files = self.downward_files(pod, volume.downward_api)
                mode = volume.downward_api.default_mode
                self.write_files(directory, files, fs_group, 0o644 if mode is None else mode)

    def start(self, pod: kubernetes.client.V1Pod, before: Run | None = None) -> None:
        """Run `pod`'s container; `before`: its run that exited (a restart keeps its volumes)."""
        namespace, name = pod.metadata.namespace, pod.metadata.name
        container = pod.spec.containers[0]
        if self.containers and WORKER_LABEL in (pod.metadata.labels or {}):
            if self.hold(pod):
                self.start_container(pod)
            return
        command = [*(container.command or ENTRYPOINT), *(container.args or [])]
        if command[0] != "agentworkers":
            log.warning(
                "%s/%s: refusing to run %r (only agentworkers runs here)",
                namespace,
                name,
                command[:1],
            )
            return
        if container.ports and not local_pod_cidr():
            log.warning("%s/%s: its pod IP is not this machine's: unreachable", namespace, name)
        if before is not None:
            sandbox, home = before.sandbox, before.home
        elif not self.hold(pod):
            return  # gone meanwhile
        else:
            sandbox = Path(tempfile.mkdtemp(prefix=f"aw-sandbox-{name}-"))
            home = Path(tempfile.mkdtemp(prefix=f"aw-pod-{name}-"))
        mounts = self.make_volumes(pod, container, home / "volumes", sandbox)
        env = {e.name: self.env_value(pod, e) for e in container.env or []}
        env = {k: local(v, mounts, pod) for k, v in env.items() if v is not None}
        command = [local(arg, mounts, pod) for arg in command]
        env.update(
            # As a container runtime sets it: the pod's hostname (an operator replica's
            # identity on its Lease).
            HOSTNAME=pod.spec.hostname or name,
            AGENTWORKERS_SECRETS_DIR=str(self.mount_secrets(pod, home / "secrets")),
            AGENTWORKERS_SANDBOX=str(sandbox),
            HOME=str(sandbox),
            PATH=os.environ.get("PATH", ""),
            KUBECONFIG=str(self.pod_kubeconfig(pod, home)),
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "agentworkers.cli", *command[1:]],
            cwd=sandbox,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        volumes = {v.name: v for v in pod.spec.volumes or []}
        downward = {
            m.name: mounts[m.mount_path]
            for m in container.volume_mounts or []
            if m.mount_path in mounts and volumes[m.name].downward_api
        }
        self.started(Run(process, sandbox, home, pod, downward=downward), " ".join(command))

    def start_container(self, pod: kubernetes.client.V1Pod) -> None:
        """Run a worker pod's container in a container of its own (container mode)."""
        assert self.containers is not None
        key = key_of(pod)
        spec = self.api.sanitize_for_serialization(pod)
        made = self.containers.create()
        root = made.bundle / "volumes"
        try:
            made_dirs = self.make_volumes(pod, pod.spec.containers[0], root)
            dirs = {name: str(path) for name, path in made_dirs.items()}
            env = {e.name: self.env_value(pod, e) for e in pod.spec.containers[0].env or []}
            env = {k: v for k, v in env.items() if v is not None}
            server = urlsplit(self.pod_server or self.api.configuration.host)
            # As a kubelet tells a pod where its API server is (the runtime's in-cluster
            # configuration reads these and the token directory).
            env.update(
                KUBERNETES_SERVICE_HOST=server.hostname or "",
                KUBERNETES_SERVICE_PORT=str(server.port or 443),
            )
            allowed = [podnet.endpoint(server.geturl()), *self.endpoints_of(pod, env), *self.allow]
            process = self.containers.run(made, spec, env, dirs, allowed)
        except oci.PodSpecError as e:
            # As a kubelet: the container is not created, and the pod says why.
            self.refused.add(key)
            self.containers.remove(made)
            log.warning("%s/%s: %s", *key, e)
            self.waiting(key, "CreateContainerConfigError", str(e))
            return
        except Exception:
            self.refused.add(key)
            self.containers.remove(made)
            log.exception("%s/%s: the container did not start", *key)
            self.waiting(key, "RunContainerError", "the local runner could not start it")
            return
        volumes = {v.name: v for v in pod.spec.volumes or []}
        downward = {n: d for n, d in made_dirs.items() if volumes[n].downward_api}
        run = Run(process, made.bundle, made.bundle, pod, made, downward)
        self.started(run, f"container {made.id}")

    def started(self, run: Run, what: str) -> None:
        """Follow a run that started: its output to the pod's log, its exit (`reap`)."""
        key = key_of(run.pod)
        logfile = self.logs / f"{key[0]}_{key[1]}.log"
        self.point_kwok_at(run.pod, logfile)
        for stream, pipe in (("stdout", run.process.stdout), ("stderr", run.process.stderr)):
            threading.Thread(target=cri_copy, args=(pipe, logfile, stream), daemon=True).start()
        with self.lock:
            self.runs[key] = run
            late = self.stopping.is_set()
        log.info("%s/%s: started %s (pid %d)", *key, what, run.process.pid)
        threading.Thread(target=self.reap, args=(key,), daemon=True).start()
        if late:  # started by a pod's thread after `shutdown` went through the runs
            self.stop(key)

    def wait(self, key: tuple[str, str], run: Run) -> int:
        """The run's exit code, once it exits; at the pod's activeDeadlineSeconds it is
        stopped first, as a kubelet stops it."""
        begun = run.pod.status.start_time or dt.datetime.now(dt.UTC)
        while True:
            # Read again each second: a pod may be given a deadline while it runs (a warm
            # pod, when a run claims it), as a kubelet takes it from the pod's new version.
            deadline = run.pod.spec.active_deadline_seconds
            left = deadline - (dt.datetime.now(dt.UTC) - begun).total_seconds() if deadline else 1.0
            if left <= 0:
                self.deadline(key, run)
                return run.process.wait()
            try:
                return run.process.wait(timeout=min(left, 1.0))
            except subprocess.TimeoutExpired:
                continue

    def deadline(self, key: tuple[str, str], run: Run) -> None:
        with self.lock:
            if self.runs.get(key) is not run or self.stopping.is_set():
                return
            self.expired.add(key)
        log.info("%s/%s: past its activeDeadlineSeconds; stopping it", *key)
        self.terminate(run)

    def endpoints_of(self, pod: kubernetes.client.V1Pod, env: dict[str, str]) -> list[Any]:
        """Where the run's config says its model and MCP servers are: its policy allows
        them (as the chart's NetworkPolicy lists them)."""
        urls: list[str] = []
        effective = yaml.safe_load(env.get("AGENTWORKERS_EFFECTIVE_CONFIG") or "{}") or {}
        if effective.get("baseURL"):
            urls.append(effective["baseURL"])
        urls += [s["url"] for s in effective.get("mcpServers") or [] if s.get("url")]
        found = []
        for url in urls:
            try:
                found.append(podnet.endpoint(url))
            except (OSError, ValueError) as e:
                log.warning("%s/%s: endpoint %s: %s", *key_of(pod), url, e)
        return found

    @staticmethod
    def env_value(pod: kubernetes.client.V1Pod, var: kubernetes.client.V1EnvVar) -> str | None:
        """A plain value, or the downward API's fieldRef; other sources are not supported."""
        if var.value is not None or var.value_from is None or var.value_from.field_ref is None:
            return var.value
        fields = {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": pod.metadata.namespace,
            "metadata.uid": pod.metadata.uid,
            "status.podIP": pod.status.pod_ip,
            "spec.serviceAccountName": pod.spec.service_account_name,
        }
        path = var.value_from.field_ref.field_path
        # metadata.annotations['<key>'] and metadata.labels['<key>'], as a kubelet reads them.
        if found := re.fullmatch(r"metadata\.(annotations|labels)\['([^']+)'\]", path):
            return (getattr(pod.metadata, found[1]) or {}).get(found[2], "")
        return fields.get(path)

    def make_volumes(
        self,
        pod: kubernetes.client.V1Pod,
        container: kubernetes.client.V1Container,
        root: Path,
        sandbox: Path | None = None,
    ) -> dict[str, Path]:
        """Each emptyDir, ConfigMap, Secret and projected volume the container mounts, as a
        local directory: ConfigMap and Secret keys as files (`items`, modes and fsGroup
        honoured, as a kubelet writes them).

        Container mode (no `sandbox`): a directory under `root` per volume, by its name
        (runc binds each at its mount path, outer ones first); an emptyDir is a tmpfs of
        its own that its sizeLimit bounds. Process mode: by the mount path the container
        sees; the emptyDir at the working directory is `sandbox`; a mount inside another
        mount (a skill's ConfigMap inside the sandbox) is made inside that one's directory.
        """
        volumes = {v.name: v for v in pod.spec.volumes or []}
        fs_group = (pod.spec.security_context and pod.spec.security_context.fs_group) or None
        made: dict[str, Path] = {}
        # Outer mounts first: an inner one is made inside the outer one's directory.
        for mount in sorted(container.volume_mounts or [], key=lambda m: len(m.mount_path)):
            volume = volumes.get(mount.name)
            key = mount.name if sandbox is None else mount.mount_path
            if volume is None or key in made:
                continue
            directory = root / mount.name
            if sandbox is not None:
                outer = [p for p in made if mount.mount_path.startswith(p.rstrip("/") + "/")]
                if volume.empty_dir is not None and mount.mount_path == container.working_dir:
                    directory = sandbox
                elif outer:
                    enclosing = max(outer, key=len)
                    directory = made[enclosing] / os.path.relpath(mount.mount_path, enclosing)
            if volume.empty_dir is not None and sandbox is None:
                source = self.api.sanitize_for_serialization(volume.empty_dir)
                mount_tmpfs(directory, oci.empty_dir_options(source, fs_group))
            elif volume.empty_dir is not None:
                directory.mkdir(parents=True, exist_ok=True)
            elif volume.config_map or volume.secret or volume.projected or volume.downward_api:
                self.fill_volume(pod, volume, directory, fs_group)
            else:
                continue
            made[key] = directory
        return made

    def fill_volume(
        self,
        pod: kubernetes.client.V1Pod,
        volume: kubernetes.client.V1Volume,
        directory: Path,
        fs_group: int | None,
    ) -> None:
        """A ConfigMap, Secret or projected volume's files, as a kubelet writes them: the
        keys (or `items`), each with its mode (the item's, else defaultMode, else 0644),
        owned by root and fsGroup. A projected volume (the service-account token volume
        the API server adds to a pod) gets each of its sources' files."""
        directory.mkdir(parents=True, exist_ok=True)
        source = volume.config_map or volume.secret or volume.projected or volume.downward_api
        default = source.default_mode if source.default_mode is not None else 0o644
        files: dict[str, tuple[bytes, int | None]] = {}
        if volume.projected:
            for part in volume.projected.sources or []:
                files.update(self.projected_files(pod, part))
        elif volume.downward_api:
            files = self.downward_files(pod, volume.downward_api)
        else:
            data = self.volume_data(pod, volume.config_map, volume.secret)
            files = {i.path: (data[i.key], i.mode) for i in self.items(source, data)}
        self.write_files(directory, files, fs_group, default)

    @staticmethod
    def write_files(
        directory: Path,
        files: dict[str, tuple[bytes, int | None]],
        fs_group: int | None,
        default: int,
    ) -> None:
        """Each file whole or not at all (written aside, then renamed over), as a kubelet's
        atomic writer: a reader never sees half a file."""
        for relative, (content, mode) in files.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            aside = path.with_name(f".{path.name}.tmp")
            aside.write_bytes(content)
            os.chown(aside, 0, fs_group or 0)
            aside.chmod(mode if mode is not None else default)
            aside.replace(path)

    def downward_files(
        self, pod: kubernetes.client.V1Pod, source: Any
    ) -> dict[str, tuple[bytes, int | None]]:
        """The files of a downwardAPI volume or projection: each item's field, empty for
        an annotation or label the pod does not have (as a kubelet writes it)."""
        files: dict[str, tuple[bytes, int | None]] = {}
        for item in source.items or []:
            if item.field_ref is None:
                continue
            field_ = kubernetes.client.V1EnvVarSource(field_ref=item.field_ref)
            value = self.env_value(pod, kubernetes.client.V1EnvVar(name="", value_from=field_))
            files[item.path] = ((value or "").encode(), item.mode)
        return files

    def volume_data(
        self,
        pod: kubernetes.client.V1Pod,
        config_map: Any,
        secret: Any,
    ) -> dict[str, bytes]:
        """The keys of a ConfigMap or Secret (volume or projection source); none if missing."""
        try:
            if config_map:
                found = self.core.read_namespaced_config_map(
                    config_map.name, pod.metadata.namespace
                )
                return {k: v.encode() for k, v in (found.data or {}).items()}
            found = self.core.read_namespaced_secret(
                secret.secret_name if hasattr(secret, "secret_name") else secret.name,
                pod.metadata.namespace,
            )
            return {k: base64.b64decode(v) for k, v in (found.data or {}).items()}
        except ApiException as e:
            log.warning("%s/%s: volume source: %s", *key_of(pod), e.reason)
            return {}

    @staticmethod
    def items(source: Any, data: dict[str, bytes]) -> list[Any]:
        """The `items` of a volume source that exist, else every key as a file of its name."""
        if source.items:
            return [i for i in source.items if i.key in data]
        return [kubernetes.client.V1KeyToPath(key=k, path=k) for k in sorted(data)]

    def projected_files(
        self, pod: kubernetes.client.V1Pod, part: kubernetes.client.V1VolumeProjection
    ) -> dict[str, tuple[bytes, int | None]]:
        """The files of one source of a projected volume."""
        if part.service_account_token:
            return {part.service_account_token.path: (self.pod_token(pod).encode(), None)}
        if part.config_map or part.secret:
            source = part.config_map or part.secret
            data = self.volume_data(pod, part.config_map, part.secret)
            return {i.path: (data[i.key], i.mode) for i in self.items(source, data)}
        return self.downward_files(pod, part.downward_api) if part.downward_api else {}

    def mount_secrets(self, pod: kubernetes.client.V1Pod, root: Path) -> Path:
        """Each Secret volume's keys as files under root/<secret>/, as a kubelet mounts them."""
        for volume in pod.spec.volumes or []:
            if not volume.secret:
                continue
            name = volume.secret.secret_name
            directory = root / name
            directory.mkdir(parents=True, exist_ok=True)
            try:
                secret = self.core.read_namespaced_secret(name, pod.metadata.namespace)
            except ApiException as e:
                log.warning(
                    "%s/%s: secret %s: %s",
                    pod.metadata.namespace,
                    pod.metadata.name,
                    name,
                    e.reason,
                )
                continue
            for key, value in (secret.data or {}).items():
                (directory / key).write_bytes(base64.b64decode(value))
                (directory / key).chmod(0o400)
        return root

    def pod_token(self, pod: kubernetes.client.V1Pod) -> str:
        """A token of the pod's own ServiceAccount, bound to the pod as a kubelet requests
        it: the API server refuses it once the pod is gone (docs/scaling.md, "Warm pool")."""
        bound = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
        request = self.core.create_namespaced_service_account_token(
            pod.spec.service_account_name or "default",
            pod.metadata.namespace,
            {"spec": {"expirationSeconds": 3600, "audiences": [], "boundObjectRef": bound}},
        )
        return str(request.status.token)

    def pod_kubeconfig(self, pod: kubernetes.client.V1Pod, home: Path) -> Path:
        """Credentials of the pod's own ServiceAccount, as a mounted token would give."""
        account = pod.spec.service_account_name or "default"
        token = self.pod_token(pod)
        config = self.api.configuration
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.pod_server or config.host,
                        "certificate-authority": config.ssl_ca_cert,
                    },
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": "pod",
                    "context": {
                        "cluster": "local",
                        "user": account,
                        "namespace": pod.metadata.namespace,
                    },
                }
            ],
            "current-context": "pod",
        }
        path = home / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)
        return path

    def point_kwok_at(self, pod: kubernetes.client.V1Pod, logfile: Path) -> None:
        """A kwok Logs object: `kubectl logs` of this pod reads (and follows) the file."""
        logfile.touch()
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace},
            "spec": {"logs": [{"containers": ["agent"], "logsFile": str(logfile), "follow": True}]},
        }
        with contextlib.suppress(ApiException):  # logs are a convenience, never a failure
            kubernetes.client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                "kwok.x-k8s.io", "v1alpha1", pod.metadata.namespace, "logs", body
            )

    def reap(self, key: tuple[str, str]) -> None:
        run = self.runs[key]
        code = self.wait(key, run)
        with self.lock:
            self.runs.pop(key, None)
            stopped = key in self.stopped
            self.stopped.discard(key)
            expired = key in self.expired
            self.expired.discard(key)
        oom = run.container is not None and run.container.oom.is_set()
        if run.container is not None:
            assert self.containers is not None
            self.containers.remove(run.container)
        elif (
            not (stopped or expired or self.stopping.is_set())
            and run.pod.spec.restart_policy == "Always"
        ):
            # Its volumes stay, as a kubelet keeps a pod's emptyDirs across container
            # restarts (an operator's self-made certificate with them).
            log.info("%s/%s: exited %d; starting it again", *key, code)
            time.sleep(RESTART_DELAY)
            if not self.stopping.is_set():
                self.start(run.pod, run)
                return
        shutil.rmtree(run.sandbox, ignore_errors=True)
        shutil.rmtree(run.home, ignore_errors=True)
        if stopped or self.stopping.is_set():
            return  # stopped because the pod went away
        # Killed by a signal from outside (not for its pod's deletion): reported as a
        # kubelet does, 128 plus the signal's number.
        code = 128 - code if code < 0 else code
        if expired:
            self.report(key, code, "DeadlineExceeded", DEADLINE_MESSAGE)
        else:
            self.report(key, code, ended="OOMKilled" if oom else None)

    def report(
        self,
        key: tuple[str, str],
        code: int,
        reason: str | None = None,
        message: str | None = None,
        ended: str | None = None,
    ) -> None:
        """What a kubelet reports when the container exits: the pod's `reason` and
        `message` when it stopped the pod itself (DeadlineExceeded), the container's
        `ended` reason (OOMKilled; else Completed or Error by the exit code)."""
        namespace, name = key
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        phase = "Succeeded" if code == 0 and not reason else "Failed"
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PodCompleted",
                    "lastTransitionTime": now,
                }
            ],
            "containerStatuses": container_statuses(
                terminated={
                    "exitCode": code,
                    "reason": ended or ("Completed" if code == 0 else "Error"),
                    "finishedAt": now,
                }
            ),
        }
        if reason:
            status.update(reason=reason, message=message or reason)
        with contextlib.suppress(ApiException):
            self.core.patch_namespaced_pod_status(name, namespace, {"status": status})
        log.info("%s/%s: exited %d -> %s %s", namespace, name, code, phase, reason or ended or "")

    def waiting(self, key: tuple[str, str], reason: str, message: str) -> None:
        """A container that could not be created: waiting, with why (as a kubelet says)."""
        status = {
            "containerStatuses": container_statuses(waiting={"reason": reason, "message": message})
        }
        with contextlib.suppress(ApiException):
            self.core.patch_namespaced_pod_status(key[1], key[0], {"status": status})

    def hold(self, pod: kubernetes.client.V1Pod) -> bool:
        """The runner's finalizer on `pod`; False if the pod is gone."""
        key = key_of(pod)
        try:
            self.core.patch_namespaced_pod(
                key[1], key[0], {"metadata": {"finalizers": [FINALIZER]}}, _content_type=STRATEGIC
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        with self.lock:
            self.held.add(key)
        return True

    def release(self, key: tuple[str, str]) -> None:
        """Let the pod go: its process has stopped (or never ran)."""
        with self.lock:
            if key not in self.held:
                return
            self.held.discard(key)
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        with contextlib.suppress(ApiException):  # gone already
            self.core.patch_namespaced_pod(key[1], key[0], patch, _content_type=STRATEGIC)

    def stop(self, key: tuple[str, str]) -> None:
        with self.lock:
            run = self.runs.get(key)
        if run is not None and run.process.poll() is None:
            with self.lock:
                self.stopped.add(key)
            log.info("%s/%s: pod deleted, stopping the process", *key)
            self.terminate(run)
        self.refused.discard(key)
        self.release(key)

    def terminate(self, run: Run) -> None:
        """SIGTERM, then SIGKILL after the pod's grace period; returns once it stopped."""
        grace = run.pod.spec.termination_grace_period_seconds
        grace = GRACE_SECONDS if grace is None else grace
        if run.container is None:
            grace = min(grace, 10)  # a local process: the operator's pods stop quickly
        self.signal(run, signal.SIGTERM)
        try:
            run.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.signal(run, signal.SIGKILL)
            run.process.wait()

    def signal(self, run: Run, sig: signal.Signals) -> None:
        if run.container is not None:
            assert self.containers is not None
            self.containers.signal(run.container, sig.name.removeprefix("SIG"))
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, sig)

    def shutdown(self) -> None:
        self.stopping.set()
        for key in list(self.runs):
            self.stop(key)
        for key in list(self.held):  # pods whose process ended on its own
            self.release(key)
        if self.containers is not None:
            self.containers.close()  # what the reaping threads had no time left to remove


_write_lock = threading.Lock()


def container_statuses(**state: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's one container, not ready, in `state` (waiting or terminated), as a kubelet
    reports it."""
    return [
        {
            "name": "agent",
            "ready": False,
            "restartCount": 0,
            "image": "agentworkers",
            "imageID": "",
            "state": state,
        }
    ]


def key_of(pod: kubernetes.client.V1Pod) -> tuple[str, str]:
    return pod.metadata.namespace, pod.metadata.name


def local(value: str, mounts: dict[str, Path], pod: kubernetes.client.V1Pod) -> str:
    """An argument or env value as it means here: a mount path made local, and 0.0.0.0
    (every address of the pod's own network) made the pod's own IP."""
    for mount_path, directory in sorted(mounts.items(), key=lambda m: -len(m[0])):
        # A path, alone or after a flag's "=": /etc/agentworkers/x, --tls-dir=/var/run/...
        found = re.search(rf"(^|=){re.escape(mount_path)}(?=/|$)", value)
        if found:
            value = value[: found.end(1)] + str(directory) + value[found.end() :]
            break
    return value.replace("0.0.0.0", pod.status.pod_ip) if pod.status.pod_ip else value


def cri_copy(pipe: Any, logfile: Path, stream: str) -> None:
    """Copy a pipe to the log file line by line, as `<time> <stream> F <line>` (CRI format)."""
    with pipe:
        for raw in iter(pipe.readline, b""):
            stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with _write_lock, logfile.open("a", encoding="utf-8") as out:
                out.write(f"{stamp} {stream} F {line}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    parser.add_argument(
        "--namespace-prefix", default="", help="only pods in namespaces starting with this"
    )
    parser.add_argument(
        "--logs", type=Path, default=Path(tempfile.gettempdir()) / "agentworkers-pods"
    )
    parser.add_argument(
        "--pod-server",
        help="the API server URL the pods are given (default: the runner's own)",
    )
    parser.add_argument(
        "--containers",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get(CONTAINERS_ENV, "") not in ("", "0"),
        help=f"run worker pods in containers (runc, root); default: ${CONTAINERS_ENV}",
    )
    parser.add_argument(
        "--pids-limit",
        type=int,
        default=oci.DEFAULT_PIDS_LIMIT,
        help="processes and threads a container may have (a kubelet's podPidsLimit)",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an endpoint every container may reach, besides its API server and its "
        "config's model and MCP endpoints (as the chart's networkPolicy.endpoints)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s podrunner %(message)s")
    args.logs.mkdir(parents=True, exist_ok=True)
    runner = PodRunner(
        kubernetes.config.new_client_from_config(config_file=args.kubeconfig),
        args.namespace_prefix,
        args.logs,
        args.pod_server,
        Runc(pids_limit=args.pids_limit) if args.containers else None,
        tuple(args.allow),
    )
    signal.signal(signal.SIGTERM, lambda *_: runner.shutdown() or sys.exit(0))
    try:
        runner.watch()
    except KeyboardInterrupt:
        runner.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
