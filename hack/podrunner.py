#!/usr/bin/env python3
"""A local pod runner for the local control plane: a development tool, not a kubelet.

    python hack/podrunner.py [--kubeconfig K] [--namespace-prefix P] [--logs DIR]

kwok simulates nodes and pod phases but runs nothing. This tool watches the worker
pods the operator creates (label agentworkers.io/worker) and, once kwok reports one
Running, runs its container's command as a local process:

* with the pod's plain `env` values (valueFrom is not supported);
* with the pod's own service-account credentials: a token requested for the pod's
  ServiceAccount and a kubeconfig of its own, so the runtime has exactly the
  least privilege it has in a real pod;
* in a temporary directory standing in for the sandbox emptyDir (the pod's
  AGENTWORKERS_SANDBOX and working directory), removed with the process;
* its stdout and stderr appended, in the CRI log format a kubelet writes, to
  <logs>/<namespace>_<pod>.log, which a kwok `Logs` object points kwok at, so that
  `kubectl logs` shows the run.

When the process exits, the pod's status becomes Succeeded or Failed with the exit
code, as a kubelet would report it. When the pod is deleted, the process gets
SIGTERM (then SIGKILL). Only the `agentworkers` command runs: anything else is refused.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

WORKER_LABEL = "agentworkers.io/worker"
log = logging.getLogger("podrunner")


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    sandbox: Path
    home: Path


class PodRunner:
    def __init__(self, api: kubernetes.client.ApiClient, prefix: str, logs: Path) -> None:
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.prefix = prefix
        self.logs = logs
        self.runs: dict[tuple[str, str], Run] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def watch(self) -> None:
        while not self.stopping.is_set():
            stream = kubernetes.watch.Watch()
            try:
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=WORKER_LABEL,
                    timeout_seconds=60,
                ):
                    if self.stopping.is_set():
                        break
                    self.handle(event["type"], event["object"])
            except ApiException as e:
                log.warning("watch failed (%s); watching again", e.reason)
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

    def start(self, pod: kubernetes.client.V1Pod) -> None:
        namespace, name = pod.metadata.namespace, pod.metadata.name
        container = pod.spec.containers[0]
        command = [*(container.command or []), *(container.args or [])]
        if not command or command[0] != "agentworkers":
            log.warning(
                "%s/%s: refusing to run %r (only agentworkers runs here)",
                namespace,
                name,
                command[:1],
            )
            return
        sandbox = Path(tempfile.mkdtemp(prefix=f"aw-sandbox-{name}-"))
        home = Path(tempfile.mkdtemp(prefix=f"aw-pod-{name}-"))
        env = {e.name: e.value for e in container.env or [] if e.value is not None}
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
            self.runs[(namespace, name)] = Run(process, sandbox, home)
        log.info("%s/%s: started %s (pid %d)", namespace, name, " ".join(command), process.pid)
        threading.Thread(target=self.reap, args=((namespace, name),), daemon=True).start()

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
                    "cluster": {"server": config.host, "certificate-authority": config.ssl_ca_cert},
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
        shutil.rmtree(run.sandbox, ignore_errors=True)
        shutil.rmtree(run.home, ignore_errors=True)
        if code in (-signal.SIGTERM, -signal.SIGKILL):
            return  # stopped because the pod went away
        self.report(key, code)

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

    def stop(self, key: tuple[str, str]) -> None:
        with self.lock:
            run = self.runs.get(key)
        if run is None or run.process.poll() is not None:
            return
        log.info("%s/%s: pod deleted, stopping the process", *key)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGTERM)
        try:
            run.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, signal.SIGKILL)

    def shutdown(self) -> None:
        self.stopping.set()
        for key in list(self.runs):
            self.stop(key)


_write_lock = threading.Lock()


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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s podrunner %(message)s")
    args.logs.mkdir(parents=True, exist_ok=True)
    runner = PodRunner(
        kubernetes.config.new_client_from_config(config_file=args.kubeconfig),
        args.namespace_prefix,
        args.logs,
    )
    signal.signal(signal.SIGTERM, lambda *_: runner.shutdown() or sys.exit(0))
    try:
        runner.watch()
    except KeyboardInterrupt:
        runner.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
