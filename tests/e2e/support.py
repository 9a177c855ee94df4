"""What every end-to-end test needs: a handle on a real cluster, kubectl, and waiting."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import kubernetes
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
# The example agent "planner" and its two standalone profiles: what most tests run on.
CONFIG: dict[str, Any] = yaml.safe_load((EXAMPLES / "agentconfig.yaml").read_text())
PROFILES: list[dict[str, Any]] = list(
    yaml.safe_load_all((EXAMPLES / "virtualagentprofiles.yaml").read_text())
)
T = TypeVar("T")


def worker(name: str, **spec: Any) -> dict[str, Any]:
    """A Worker of the example agent "planner", with `spec` on top."""
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name},
        "spec": {"agent": "planner", **spec},
    }


@dataclass(frozen=True)
class Cluster:
    """A running API server: the local control plane, or (AGENTWORKERS_CLUSTER=existing) yours."""

    kubeconfig: Path
    bin_dir: Path | None
    api: kubernetes.client.ApiClient
    # The operator's own identity (the local control plane issues one); None: kubeconfig's.
    operator_kubeconfig: Path | None = None

    @classmethod
    def from_info(cls, info: dict[str, str]) -> Cluster:
        """The cluster `hack/localcluster.py up --json` reports."""
        api = kubernetes.config.new_client_from_config(config_file=info["kubeconfig"])
        operator = info.get("operatorKubeconfig")
        return cls(
            Path(info["kubeconfig"]),
            Path(info["binDir"]),
            api,
            Path(operator) if operator else None,
        )

    def as_operator(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """kubectl with the operator's own credentials: a write admission cannot tell from
        the operator's (as when the webhook is off), for testing the handlers' checks."""
        assert self.operator_kubeconfig, "this cluster has no separate operator identity"
        return self.kubectl(
            f"--kubeconfig={self.operator_kubeconfig}", *args, stdin=stdin, check=check
        )

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        if self.bin_dir:
            env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as a user would; with check=False the caller reads the refusal."""
        kubectl = str(self.bin_dir / "kubectl") if self.bin_dir else "kubectl"
        result = subprocess.run(
            [kubectl, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(
        self, namespace: str, *objects: dict[str, Any], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """kubectl apply, in the order given (profiles before their config: one revision)."""
        return self.kubectl(
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
            stdin="\n---\n".join(json.dumps(o) for o in objects),
            check=check,
        )


def apply_example_skills(cluster: Cluster, namespace: str) -> None:
    """The skills the example agent lists, as their ConfigMaps (examples/skills)."""
    cluster.kubectl("apply", "-n", namespace, "-k", str(EXAMPLES / "skills"))


def wait_until(
    what: str, probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.2
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def settled(client: Any, name: str, timeout: float = 60) -> Any:
    """The Worker `name` once it has ended, Done or Failed, and the operator has said so
    (Ready False): a runtime reports its end itself, at times before any pass of the
    operator recorded its pod (a warm run, an operator restarting)."""

    def ended() -> Any:
        info = client.get(name)
        ready = next((c for c in info.status.conditions if c.type == "Ready"), None)
        done = info.status.phase in ("Done", "Failed") and ready and ready.status == "False"
        return done and info

    return wait_until(f"{name} to end", ended, timeout=timeout)


def reached(client: Any, name: str, phase: str, timeout: float = 90) -> Any:
    """The Worker `name` once it is `phase`; an ended run (Done, Failed) once the operator
    has said so too (`settled`), and failing at once if it ended otherwise."""
    if phase in ("Done", "Failed"):
        info = settled(client, name, timeout)
        assert info.status.phase == phase, info.status
        return info
    return wait_until(
        f"{name} to be {phase}",
        lambda: (info := client.get(name)).status.phase == phase and info,
        timeout=timeout,
    )


def built(script: str) -> Path:
    """The bin directory a hack/build-*.sh script prints last (its cached build; a cold one
    takes minutes: `make tools` does them all up front)."""
    result = subprocess.run(
        ["bash", str(REPO / "hack" / script)], stdout=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"hack/{script} failed (its output is above)")
    return Path(result.stdout.strip().splitlines()[-1])


def readyz(port: int, processes: Iterable[tuple[subprocess.Popen[bytes], Path]]) -> bool:
    """Whether a controller's health endpoint on `port` says ready; a process of its that
    exited fails the test with the end of its log."""
    for process, log in processes:
        if process.poll() is not None:
            raise AssertionError(f"{log.stem} exited:\n{log.read_text()[-3000:]}")
    return answers(f"http://127.0.0.1:{port}/readyz")


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not stopped within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Operator:
    """`agentworkers operator` as a subprocess: the way a user runs it, on loopback ports."""

    # Logs of the operators started in this session, and those running, for failure reports.
    started: ClassVar[list[Path]] = []
    running: ClassVar[list[Operator]] = []
    process: subprocess.Popen[bytes]
    log: Path
    metrics_url: str
    args: list[str]
    env: dict[str, str]

    @classmethod
    def of_own(
        cls, cluster: Cluster, workdir: Path, prefix: str, *extra: str
    ) -> contextlib.AbstractContextManager[Operator]:
        """An operator of its own for the namespaces `<prefix>-*`, with a webhook of its own
        (the benches and the fault suite: no other operator reviews their namespaces)."""
        return cls.start(
            cluster,
            workdir,
            f"--namespace={prefix}-*",
            f"--webhook-name=agentworkers-{prefix}.io",
            *extra,
        )

    @classmethod
    @contextlib.contextmanager
    def start(cls, cluster: Cluster, workdir: Path, *extra: str) -> Iterator[Operator]:
        log = workdir / "operator.log"
        cls.started.append(log)
        metrics_port = free_port()
        args = [
            sys.executable,
            "-m",
            "agentworkers.cli",
            "operator",
            f"--kubeconfig={cluster.operator_kubeconfig or cluster.kubeconfig}",
            f"--webhook-port={free_port()}",
            f"--metrics-port={metrics_port}",
            f"--liveness=http://127.0.0.1:{free_port()}/healthz",
            f"--tls-dir={workdir / 'tls'}",
            *extra,
        ]
        running = cls(
            cls._spawn(args, cluster.env, log),
            log,
            f"http://127.0.0.1:{metrics_port}/metrics",
            args,
            cluster.env,
        )
        cls.running.append(running)
        try:
            running.wait_ready(cluster)
            yield running
        finally:
            cls.running.remove(running)
            running.stop()
            # Its webhooks outlive a stop on purpose (writes fail closed while no operator
            # answers); an operator that is gone for good takes them along.
            if "--no-webhook" not in args:
                cluster.kubectl(
                    "delete",
                    "validatingwebhookconfiguration",
                    running.webhook_name,
                    "--ignore-not-found",
                    check=False,
                )

    @staticmethod
    def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)

    def crash(self, cluster: Cluster, while_down: Callable[[], None] | None = None) -> None:
        """SIGKILL (no graceful stop: a crash at whatever line it was), then start again;
        `while_down` is called in between."""
        self.process.kill()
        self.process.wait()
        if while_down is not None:
            while_down()
        self.process = self._spawn(self.args, self.env, self.log)
        self.wait_ready(cluster)

    def restart(self, cluster: Cluster) -> None:
        """Stop (SIGTERM) and start again, as a rollout or a crash-restart would."""
        self.stop()
        self.process = self._spawn(self.args, self.env, self.log)
        self.wait_ready(cluster)

    @property
    def webhook_name(self) -> str:
        """The ValidatingWebhookConfiguration this operator manages."""
        given = (a.split("=", 1)[1] for a in self.args if a.startswith("--webhook-name="))
        return next(given, "agentworkers.io")

    def wait_ready(self, cluster: Cluster) -> None:
        """Metrics served and, unless it runs without one, its webhook pointing at it and
        ready to answer."""
        wait_until("the operator to serve its metrics", self.ready, timeout=60)
        if "--no-webhook" in self.args:
            return
        port = next(a.split("=", 1)[1] for a in self.args if a.startswith("--webhook-port="))

        def registered() -> bool:
            found = cluster.kubectl(
                "get",
                "validatingwebhookconfiguration",
                self.webhook_name,
                "-o",
                "json",
                check=False,
            )
            if found.returncode != 0:
                return False
            hooks = json.loads(found.stdout).get("webhooks") or []
            return bool(hooks) and all(
                f":{port}/" in h["clientConfig"].get("url", "") for h in hooks
            )

        wait_until("the operator's admission webhook to be registered", registered, timeout=60)
        wait_until("the operator's store to be filled (/readyz)", self.admits, timeout=60)

    def admits(self) -> bool:
        """Does its admission server say it is ready (`GET /readyz`)?"""
        port = next(a.split("=", 1)[1] for a in self.args if a.startswith("--webhook-port="))
        # Its certificate is self-signed: only the answer's code matters here.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/readyz", context=context, timeout=1
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def sample(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include `labels` (0: none yet)."""
        return sum(
            sample.value
            for family in text_string_to_metric_families(self.metrics())
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )

    def passed_every(self, handler: str, kind: str) -> bool:
        """Has this process (since its start) passed over every object of a kind in its
        store, once at least? Its start's listing queues each once, after it has stored
        them all: as many passes as objects, whatever their result, covers them."""
        stored = self.sample("agentworkers_store_objects", kind=kind)
        return 0 < stored <= self.sample("agentworkers_reconciles_total", handler=handler)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the operator exited:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())

    def state(self) -> str:
        """What a stalled operator is doing: its passes and queues by the metrics, and its
        threads' stacks (py-spy, when installed)."""
        try:
            wanted = ("agentworkers_reconciles_total", "agentworkers_store_objects")
            lines = [m for m in self.metrics().splitlines() if m.startswith(wanted)]
        except OSError as e:
            lines = [f"metrics: {e}"]
        spy = Path(sys.executable).with_name("py-spy")
        if spy.exists():
            dump = subprocess.run(
                [str(spy), "dump", "--pid", str(self.process.pid)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            lines.append(dump.stdout + dump.stderr)
        return "\n".join(lines)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def first_revision(cluster: Cluster, namespace: str, agent: str = "planner") -> dict[str, Any]:
    """Wait for the agent's first AgentConfigRevision; its `activeRevision`."""
    status: dict[str, Any] = {}

    def active() -> str | None:
        status.update(cluster.kubectl_json("get", "ac", agent, "-n", namespace).get("status", {}))
        return status.get("activeRevision")

    try:
        return wait_until(f"{agent}'s first revision", active)
    except AssertionError as e:
        raise AssertionError(f"{e}; its status: {json.dumps(status)}") from None


def install_crds(cluster: Cluster) -> None:
    """The checked-in CRDs, applied and established (a no-op when they already are)."""
    files = [f"-f={f}" for f in sorted((REPO / "crds").glob("*.yaml"))]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *files)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *files)


def log_excerpt(log: Path, namespace: str | None, lines: int = 40) -> str:
    """The last `lines` lines of an operator's JSON log that concern `namespace` or are
    warnings and errors: what a failed test's report needs, without the other tests' noise."""
    wanted = []
    for raw in log.read_text(errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            wanted.append(raw)  # a traceback or a crash: always worth showing
            continue
        ref = line.get("object") or line.get("k8s_ref") or {}
        # kopf's JSON log names a warning's severity "warn".
        if (namespace and ref.get("namespace") == namespace) or line.get("severity") in (
            "warn",
            "error",
            "critical",
        ):
            wanted.append(raw)
    return "\n".join(wanted[-lines:])


def local_cluster() -> Cluster:
    """The local control plane (started, or built and started, by hack/localcluster.py)."""
    up = subprocess.run(
        [sys.executable, str(REPO / "hack" / "localcluster.py"), "up", "--json"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return Cluster.from_info(json.loads(up.stdout.strip().splitlines()[-1]))


@contextlib.contextmanager
def pod_runner(
    cluster: Cluster,
    namespace_prefix: str,
    logs: Path,
    pod_server: str | None = None,
    containers: bool | None = None,
    *extra: str,
) -> Iterator[subprocess.Popen[bytes]]:
    """hack/podrunner.py for the pods of namespaces starting with `namespace_prefix`;
    `pod_server`: the API server URL the pods get (default: the cluster's own);
    `containers`: worker pods in containers (runc) or as local processes (None: as
    $AGENTWORKERS_POD_CONTAINERS says, processes by default); `extra`: its other flags."""
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "podrunner.log").open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "hack" / "podrunner.py"),
                f"--kubeconfig={cluster.kubeconfig}",
                f"--namespace-prefix={namespace_prefix}",
                f"--logs={logs}",
                *([f"--pod-server={pod_server}"] if pod_server else []),
                *(
                    []
                    if containers is None
                    else ["--containers" if containers else "--no-containers"]
                ),
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster.env,
        )
    try:
        yield process
    finally:
        # It stops each pod's process as a kubelet would (SIGTERM, then SIGKILL): an
        # operator's graceful stop may take a while.
        stop(process, 60)


def answers(url: str) -> bool:
    """Whether a GET of `url` (a health endpoint) answers 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def process_with(env: dict[str, str], command: str) -> int | None:
    """The pid of a local process (a pod the pod runner runs) whose environment has every
    `env` entry and whose command line has `command`."""
    wanted = {f"{k}={v}".encode() for k, v in env.items()}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = set((proc / "environ").read_bytes().split(b"\0"))
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if wanted <= environ and command.encode() in cmdline:
            return int(proc.name)
    return None


def is_local(ip: str) -> bool:
    """An address of this machine: 127.0.0.0/8, or kwok's pod range, which
    hack/localcluster.py puts on the loopback device. Nothing sent there leaves it."""
    route = subprocess.run(
        ["ip", "-o", "route", "get", ip], check=False, capture_output=True, text=True
    )
    return ipaddress.ip_address(ip).is_loopback or route.stdout.startswith("local ")


@contextlib.contextmanager
def pod_watch(
    cluster: Cluster, namespace: str, on_event: Callable[[str, Any], None]
) -> Iterator[None]:
    """Call `on_event(type, pod)` for every change to the namespace's pods while the block
    runs. The watch reconnects on one resourceVersion: a watch started afresh would list
    the pods again and never see one deleted in between. Only an expired version ("410
    Gone") starts over from a listing."""
    stop = threading.Event()
    core = kubernetes.client.CoreV1Api(cluster.api)

    def watch() -> None:
        stream = kubernetes.watch.Watch()
        while not stop.is_set():
            since = {"resource_version": stream.resource_version} if stream.resource_version else {}
            try:
                for event in stream.stream(
                    core.list_namespaced_pod, namespace, timeout_seconds=10, **since
                ):
                    on_event(event["type"], event["object"])
                    if stop.is_set():
                        return
            except kubernetes.client.ApiException as e:
                if e.status != 410:
                    raise
                stream.resource_version = None

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()


class SpecWatch:
    """When each agentworkers object's spec change reached a watcher (as the operator
    sees them): how far apart one apply puts a commit's objects."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.seen: list[tuple[float, str, str]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch, args=(cluster, namespace, plural), daemon=True)
            for plural in ("agentconfigs", "virtualagentprofiles")
        ]
        self._generations: dict[str, int] = {}

    def _watch(self, cluster: Cluster, namespace: str, plural: str) -> None:
        api = kubernetes.client.CustomObjectsApi(cluster.api)
        watch = kubernetes.watch.Watch()
        for event in watch.stream(
            api.list_namespaced_custom_object,
            "agentworkers.io",
            "v1alpha1",
            namespace,
            plural,
            timeout_seconds=120,
        ):
            arrived = time.monotonic()
            meta = event["object"]["metadata"]
            key = f"{plural}/{meta['name']}"
            if event["type"] == "DELETED" or self._generations.get(key) != meta["generation"]:
                self._generations[key] = meta["generation"]
                self.seen.append((arrived, key, event["type"]))
            if self._stop.is_set():
                watch.stop()

    def __enter__(self) -> SpecWatch:
        for thread in self._threads:
            thread.start()
        time.sleep(0.5)  # both watches listening
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def spread(self, since: float) -> tuple[float, int]:
        """Seconds between the first and the last spec change after `since`, and how many."""
        times = [t for t, _, _ in self.seen if t >= since]
        return (max(times) - min(times), len(times)) if times else (0.0, 0)
