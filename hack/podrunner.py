#!/usr/bin/env python3
"""A local pod runner for the local control plane: a development tool, not a kubelet.

    python hack/podrunner.py [--kubeconfig K] [--namespace-prefix P] [--logs DIR]
                             [--pod-server URL]

kwok simulates nodes and pod phases but runs nothing. This tool watches the pods of
namespaces under a prefix (the worker pods the operator creates, and the operator's own
pods a `helm install` of the chart makes) and, once kwok reports one Running, runs its
container as a local process, the way a kubelet would run it:

* its command, or the image's ENTRYPOINT (`agentworkers`, as the Dockerfile names it),
  then its args, from this repository's environment;
* with the pod's `env`: plain values and the downward API's fieldRef (name, namespace,
  pod IP, service account);
* its volumes (emptyDir, ConfigMap, Secret) made as local directories (`items`,
  `defaultMode`, a mount inside another one, as a skill's ConfigMap inside the sandbox),
  and every argument and env value under a mount path pointed at its directory;
* listening on its own pod IP where it asks for 0.0.0.0, so two replicas do not take each
  other's ports (kwok's pod IPs are this machine's: hack/localcluster.py puts their range
  on the loopback device);
* with the pod's own service-account credentials: a token requested for the pod's
  ServiceAccount and a kubeconfig of its own, so the runtime has exactly the
  least privilege it has in a real pod (its server: --pod-server, when the pods are to
  reach the API server another way than the runner does, as through the fault suite's
  proxy; else the runner's own);
* in a temporary directory standing in for the sandbox emptyDir (the pod's
  AGENTWORKERS_SANDBOX and working directory), removed with the process;
* its stdout and stderr appended, in the CRI log format a kubelet writes, to
  <logs>/<namespace>_<pod>.log, which a kwok `Logs` object points kwok at, so that
  `kubectl logs` shows the run.

When the process exits, the pod's status becomes Succeeded or Failed with the exit
code, as a kubelet would report it; a pod whose restartPolicy is Always (a Deployment's)
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
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from localcluster import local_pod_cidr

# The image's ENTRYPOINT (Dockerfile): what a container without a command runs.
ENTRYPOINT = ["agentworkers"]
# Seconds before a container that exited is started again (restartPolicy Always).
RESTART_DELAY = 1.0
# Holds a pod the runner runs until its process has stopped (see the module's docstring).
FINALIZER = "agentworkers.io/pod-runner"
STRATEGIC = "application/strategic-merge-patch+json"
log = logging.getLogger("podrunner")


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    sandbox: Path
    home: Path
    pod: kubernetes.client.V1Pod


class PodRunner:
    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        prefix: str,
        logs: Path,
        pod_server: str | None = None,
    ) -> None:
        self.api = api
        self.pod_server = pod_server
        self.core = kubernetes.client.CoreV1Api(api)
        self.prefix = prefix
        self.logs = logs
        self.runs: dict[tuple[str, str], Run] = {}
        self.stopped: set[tuple[str, str]] = set()  # pods gone: their processes stay stopped
        self.held: set[tuple[str, str]] = set()  # pods with the runner's finalizer
        self.lock = threading.Lock()
        self.stopping = threading.Event()

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
        key = (pod.metadata.namespace, pod.metadata.name)
        if not key[0].startswith(self.prefix):
            return
        if kind == "DELETED" or pod.metadata.deletion_timestamp:
            self.stop(key)
            return
        if pod.status.phase == "Running" and key not in self.runs:
            self.start(pod)

    def start(self, pod: kubernetes.client.V1Pod, before: Run | None = None) -> None:
        """Run `pod`'s container; `before`: its run that exited (a restart keeps its volumes)."""
        namespace, name = pod.metadata.namespace, pod.metadata.name
        container = pod.spec.containers[0]
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
        mounts = self.mount_volumes(pod, container, home / "volumes", sandbox)
        env = {e.name: self.env_value(pod, e) for e in container.env or []}
        env = {k: local(v, mounts, pod) for k, v in env.items() if v is not None}
        command = [local(arg, mounts, pod) for arg in command]
        env.update(
            AGENTWORKERS_SECRETS_DIR=str(self.mount_secrets(pod, home / "secrets")),
            AGENTWORKERS_SANDBOX=str(sandbox),
            HOME=str(sandbox),
            PATH=os.environ.get("PATH", ""),
            KUBECONFIG=str(self.pod_kubeconfig(pod, home)),
        )
        logfile = self.logs / f"{namespace}_{name}.log"
        self.point_kwok_at(pod, logfile)
        process = subprocess.Popen(
            [sys.executable, "-m", "agentworkers.cli", *command[1:]],
            cwd=sandbox,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for stream, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
            threading.Thread(target=cri_copy, args=(pipe, logfile, stream), daemon=True).start()
        with self.lock:
            self.runs[(namespace, name)] = Run(process, sandbox, home, pod)
        log.info("%s/%s: started %s (pid %d)", namespace, name, " ".join(command), process.pid)
        threading.Thread(target=self.reap, args=((namespace, name),), daemon=True).start()

    @staticmethod
    def env_value(pod: kubernetes.client.V1Pod, var: kubernetes.client.V1EnvVar) -> str | None:
        """A plain value, or the downward API's fieldRef; other sources are not supported."""
        if var.value is not None or var.value_from is None or var.value_from.field_ref is None:
            return var.value
        fields = {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": pod.metadata.namespace,
            "status.podIP": pod.status.pod_ip,
            "spec.serviceAccountName": pod.spec.service_account_name,
        }
        return fields.get(var.value_from.field_ref.field_path)

    def mount_volumes(
        self,
        pod: kubernetes.client.V1Pod,
        container: kubernetes.client.V1Container,
        root: Path,
        sandbox: Path,
    ) -> dict[str, Path]:
        """Each mounted emptyDir, ConfigMap and Secret volume as a local directory (keys as
        files, `items` and the modes honoured), by the mount path the container sees. The
        emptyDir at the working directory is `sandbox`; a mount inside another mount (a
        skill's ConfigMap inside the sandbox) is made inside that one's directory."""
        volumes = {v.name: v for v in pod.spec.volumes or []}
        mounts: dict[str, Path] = {}
        for mount in sorted(container.volume_mounts or [], key=lambda m: len(m.mount_path)):
            volume = volumes.get(mount.name)
            if volume is None or not (volume.empty_dir or volume.config_map or volume.secret):
                continue
            outer = [p for p in mounts if mount.mount_path.startswith(p.rstrip("/") + "/")]
            if volume.empty_dir and mount.mount_path == container.working_dir:
                directory = sandbox
            elif outer:
                enclosing = max(outer, key=len)
                directory = mounts[enclosing] / os.path.relpath(mount.mount_path, enclosing)
            else:
                directory = root / mount.name
            directory.mkdir(parents=True, exist_ok=True)
            data: dict[str, bytes] = {}
            source = volume.config_map or volume.secret
            try:
                if volume.config_map:
                    found = self.core.read_namespaced_config_map(
                        volume.config_map.name, pod.metadata.namespace
                    )
                    data = {k: v.encode() for k, v in (found.data or {}).items()}
                elif volume.secret:
                    found = self.core.read_namespaced_secret(
                        volume.secret.secret_name, pod.metadata.namespace
                    )
                    data = {k: base64.b64decode(v) for k, v in (found.data or {}).items()}
            except ApiException as e:
                # A kubelet keeps such a pod waiting unless the volume is optional; the
                # runner mounts it empty either way, and says so.
                log.warning("%s/%s: volume %s: %s", *key_of(pod), mount.name, e.reason)
            items = source.items if source else None
            default_mode = (source.default_mode if source else None) or 0o644
            files = {i.key: (i.path, i.mode) for i in items} if items else {}
            files = files or {k: (k, None) for k in data}
            for key, (path, mode) in files.items():
                if key in data:
                    target = directory / path
                    target.unlink(missing_ok=True)  # a restart writes it again, read-only or not
                    target.write_bytes(data[key])
                    target.chmod(mode or default_mode)
            mounts[mount.mount_path] = directory
        return mounts

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

    def pod_kubeconfig(self, pod: kubernetes.client.V1Pod, home: Path) -> Path:
        """Credentials of the pod's own ServiceAccount, as a mounted token would give."""
        account = pod.spec.service_account_name or "default"
        request = self.core.create_namespaced_service_account_token(
            account,
            pod.metadata.namespace,
            {"spec": {"expirationSeconds": 3600, "audiences": []}},
        )
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
            "users": [{"name": account, "user": {"token": request.status.token}}],
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
        code = run.process.wait()
        with self.lock:
            self.runs.pop(key, None)
            stopped = key in self.stopped
            self.stopped.discard(key)
        if not (stopped or self.stopping.is_set()) and run.pod.spec.restart_policy == "Always":
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
        self.report(key, 128 - code if code < 0 else code)

    def report(self, key: tuple[str, str], code: int) -> None:
        """What a kubelet reports when the container exits."""
        namespace, name = key
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        phase = "Succeeded" if code == 0 else "Failed"
        status = {
            "phase": phase,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PodCompleted",
                    "lastTransitionTime": now,
                }
            ],
            "containerStatuses": [
                {
                    "name": "agent",
                    "ready": False,
                    "restartCount": 0,
                    "image": "agentworkers",
                    "imageID": "",
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Completed" if code == 0 else "Error",
                            "finishedAt": now,
                        }
                    },
                }
            ],
        }
        with contextlib.suppress(ApiException):
            self.core.patch_namespaced_pod_status(name, namespace, {"status": status})
        log.info("%s/%s: exited %d -> %s", namespace, name, code, phase)

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
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, signal.SIGTERM)
            try:
                run.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.process.pid, signal.SIGKILL)
                run.process.wait()
        self.release(key)

    def shutdown(self) -> None:
        self.stopping.set()
        for key in list(self.runs):
            self.stop(key)
        for key in list(self.held):  # pods whose process ended on its own
            self.release(key)


_write_lock = threading.Lock()


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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s podrunner %(message)s")
    args.logs.mkdir(parents=True, exist_ok=True)
    runner = PodRunner(
        kubernetes.config.new_client_from_config(config_file=args.kubeconfig),
        args.namespace_prefix,
        args.logs,
        args.pod_server,
    )
    signal.signal(signal.SIGTERM, lambda *_: runner.shutdown() or sys.exit(0))
    try:
        runner.watch()
    except KeyboardInterrupt:
        runner.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
