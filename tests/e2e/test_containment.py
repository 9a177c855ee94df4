"""The worker pod as a boundary: real runs in real containers (hack/podrunner.py's
container mode, runc), attacked from inside with `runc exec` as the run's own user.

Each attempt below must fail as the pod's spec says it does (docs/guarantees.md, "What
the pod enforces"), and a run that breaks a limit must end as a kubelet reports it, its
Worker Failed with the kubelet's reason and one Warning Event.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runcpods
from agentworkers.api import WorkerSpec
from agentworkers.client import Client
from tests.e2e.support import (
    CONFIG,
    PROFILES,
    Cluster,
    first_revision,
    pod_runner,
    reached,
    wait_until,
)

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("runc") or not shutil.which("nft"),
        reason="containers need root, runc and nftables",
    ),
    pytest.mark.usefixtures("operator"),
]
SANDBOX_SIZE = 16  # MiB
PIDS_LIMIT = 96


@pytest.fixture(scope="session")
def image() -> runcpods.Image:
    """The image the containers run from, built (or found in the cache) before any runner
    starts: a first build takes a minute or two."""
    return runcpods.image()


@pytest.fixture
def peer() -> Iterator[socket.socket]:
    """A loopback server the pods' policy allows (as a run's model or MCP endpoint)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


@pytest.fixture
def containers(
    cluster: Cluster, namespace: str, tmp_path: Path, image: runcpods.Image, peer: socket.socket
) -> Iterator[Path]:
    """The pod runner in container mode for this test's namespace. Yields its log dir."""
    logs = tmp_path / "pods"
    allow = f"--allow=127.0.0.1:{peer.getsockname()[1]}"
    with pod_runner(cluster, namespace, logs, None, True, f"--pids-limit={PIDS_LIMIT}", allow):
        yield logs


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


def _agent(cluster: Cluster, namespace: str, **spec: Any) -> None:
    """The example agent with a scripted model that answers "idle", `spec` on top."""
    config = copy.deepcopy(CONFIG)
    config["spec"]["model"]["script"] = [{"reply": "idle"}]
    config["spec"].update(spec)
    cluster.apply(namespace, *PROFILES, config)
    first_revision(cluster, namespace)


def _secret(cluster: Cluster, namespace: str, name: str, value: str) -> None:
    cluster.apply(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "data": {"value": base64.b64encode(value.encode()).decode()},
        },
    )


def _running(client: Client, namespace: str, name: str) -> str:
    """The id of the container of an Idle interactive run."""
    wait_until(f"{name} to be Idle", lambda: client.get(name).status.phase == "Idle", timeout=90)
    found = runcpods.find(namespace, name)
    assert found, f"{name} runs in no container"
    return found


def _exec(container: str, script: str) -> subprocess.CompletedProcess[str]:
    """A shell command inside the container, as its process runs (user, limits, network)."""
    return _run(container, "sh", "-c", script)


def _run(container: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runc", "--root", str(runcpods.STATE / "runc"), "exec", container, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _python(container: str, code: str) -> str:
    done = _run(container, "python3", "-c", code)
    return done.stdout.strip() + done.stderr.strip()


def _connect(container: str, host: str, port: int) -> str:
    code = (
        "import socket\n"
        "try:\n"
        f'    socket.create_connection(({host!r}, {port}), timeout=3); print("connected")\n'
        "except OSError as e:\n"
        "    print(type(e).__name__)"
    )
    return _python(container, code)


def test_a_run_s_container_holds_against_escape_attempts(
    cluster: Cluster,
    namespace: str,
    client: Client,
    containers: Path,
    tmp_path: Path,
    peer: socket.socket,
) -> None:
    _secret(cluster, namespace, "granted", "for the run")
    _secret(cluster, namespace, "not-granted", "not for the run")
    _agent(
        cluster,
        namespace,
        allowedSecrets=["granted"],
        worker={"sandboxSize": f"{SANDBOX_SIZE}Mi", "resources": {"limits": {"memory": "256Mi"}}},
    )
    script = [
        {"tool": "write_file", "args": {"path": "notes.txt", "content": "a's own"}},
        {"reply": "idle"},
    ]
    client.spawn(
        "a",
        WorkerSpec(
            agent="planner",
            initial_message="go",
            interactive=True,
            script=script,
            allowed_secrets=["granted"],
        ),
    )
    client.spawn("b", WorkerSpec(agent="planner", initial_message="go", interactive=True))
    a, b = _running(client, namespace, "a"), _running(client, namespace, "b")
    _identity(a)
    _filesystem(a, b, tmp_path)
    _kernel(a)
    _limits(a)
    _network(cluster, a, peer.getsockname()[1])
    _secrets(a, namespace)
    # Through all of it the run carried on, and the operator with it.
    assert client.get("a").status.phase == "Idle" and client.get("b").status.phase == "Idle"


def _identity(a: str) -> None:
    """Who it is: the pod's user, no capability, no way to gain one, seccomp on."""
    status = _exec(
        a, "id -u; id -G; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status"
    )
    assert status.stdout.split() == [
        "65532",
        "65532",
        "CapPrm:",
        "0000000000000000",
        "CapEff:",
        "0000000000000000",
        "NoNewPrivs:",
        "1",
        "Seccomp:",
        "2",
    ], status


def _filesystem(a: str, b: str, tmp_path: Path) -> None:
    """Writes: only the sandbox (the run's own file is there) and /tmp."""
    assert _exec(a, "cat /sandbox/notes.txt").stdout == "a's own"
    for path in ("/etc/x", "/opt/agentworkers/bin/x", "/x", "/var/run/agentworkers/secrets/x"):
        refused = _exec(a, f"echo x > {path}")
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr, path
    assert _exec(a, "echo x > /tmp/ok && echo x > /sandbox/ok").returncode == 0

    # Another run's sandbox and the host's files are not there.
    # b's sandbox holds only the folder of its own skills' mounts, none of a's files.
    assert _exec(b, "ls -A /sandbox").stdout.split() == ["skills"]
    marker = tmp_path / "host-secret"
    marker.write_text("host")
    assert _exec(a, f"cat {marker}").returncode != 0
    # Its own pid namespace: pid 1 is the run, and the host's processes are not there.
    assert "agentworkers\0run\0--worker=a\0" in _exec(a, "cat /proc/1/cmdline").stdout
    pids = _exec(a, "ls /proc").stdout.split()
    assert len([p for p in pids if p.isdigit()]) < 10, pids


def _kernel(a: str) -> None:
    """The kernel's own: module loading, the clock, mounts, all refused (EPERM)."""
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for name, call in (('init_module', 175), ('finit_module', 313), ('delete_module', 176)):\n"
        "    print(name, libc.syscall(call, 0, 0, 0), os.strerror(ctypes.get_errno()))"
    )
    said = _python(a, code).splitlines()
    assert said == [
        f"{n} -1 Operation not permitted" for n in ("init_module", "finit_module", "delete_module")
    ]
    clock = _exec(a, "date -s 2001-01-01")
    assert clock.returncode != 0 and "Operation not permitted" in clock.stderr
    mount = _exec(a, "mount -t tmpfs none /tmp")
    assert mount.returncode != 0


def _limits(a: str) -> None:
    """Limits: the sandbox's sizeLimit, the pids limit, the memory limit."""
    fill = _exec(a, f"dd if=/dev/zero of=/sandbox/fill bs=1M count={2 * SANDBOX_SIZE}")
    assert fill.returncode != 0 and "No space left on device" in fill.stderr
    size = int(_exec(a, "du -sm /sandbox/fill").stdout.split()[0])
    assert SANDBOX_SIZE - 2 <= size <= SANDBOX_SIZE
    assert _exec(a, "rm /sandbox/fill").returncode == 0
    # Forks until the kernel says no, then kills and reaps every child (the run is pid 1
    # and, as in a pod, does not reap orphans).
    code = (
        "import os, signal\n"
        "kids = []\n"
        "try:\n"
        f"    while len(kids) < {2 * PIDS_LIMIT}:\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            signal.pause(); os._exit(0)\n"
        "        kids.append(pid)\n"
        "except OSError as e:\n"
        "    print(len(kids), os.strerror(e.errno))\n"
        "for kid in kids:\n"
        "    os.kill(kid, signal.SIGKILL); os.waitpid(kid, 0)\n"
    )
    forked, error = _python(a, code).split(" ", 1)
    assert int(forked) < PIDS_LIMIT and error == "Resource temporarily unavailable"
    hog = _run(a, "python3", "-c", "x = b'x' * (512 * 2**20)")
    assert hog.returncode == 137  # the memory cgroup's OOM killer


def _network(cluster: Cluster, a: str, allowed: int) -> None:
    """The network: its API server and the endpoint the policy allows, nothing else (a
    loopback port of this test's own, on loopback or on every address, is not reachable)."""
    with (
        socket.create_server(("127.0.0.1", 0)) as lo,
        socket.create_server(("0.0.0.0", 0)) as every,
    ):
        host_port = every.getsockname()[1]
        assert _connect(a, "127.0.0.1", lo.getsockname()[1]) == "ConnectionRefusedError"
        gateway = _python(a, 'import socket; print(open("/proc/net/route").read().split()[13])')
        gateway_ip = socket.inet_ntoa(bytes.fromhex(gateway)[::-1])
        assert gateway_ip.startswith("198.19.")
        assert _connect(a, gateway_ip, host_port) in ("TimeoutError", "timeout")
        server = cluster.api.configuration.host.rsplit(":", 1)
        assert _connect(a, server[0].removeprefix("https://"), int(server[1])) == "connected"
        assert _connect(a, "127.0.0.1", allowed) == "connected"


def _secrets(a: str, namespace: str) -> None:
    """Secrets: the one granted is mounted (read-only); the other is neither mounted nor
    readable with the run's token, which is refused beyond its Role."""
    mounted = _exec(a, "ls /var/run/agentworkers/secrets")
    assert mounted.stdout.split() == ["granted"], mounted
    assert _exec(a, "cat /var/run/agentworkers/secrets/granted/value").stdout == "for the run"
    code = (
        "from kubernetes import client, config\n"
        "from kubernetes.client.exceptions import ApiException\n"
        "config.load_incluster_config(); api = client.CoreV1Api()\n"
        'for call in (lambda: api.read_namespaced_secret("not-granted", api_namespace),\n'
        '             lambda: api.list_namespaced_pod("kube-system"),\n'
        "             lambda: api.list_namespaced_secret(api_namespace)):\n"
        "    try:\n"
        "        call(); print(200)\n"
        "    except ApiException as e:\n"
        "        print(e.status)\n"
    ).replace("api_namespace", repr(namespace))
    assert _python(a, code).split() == ["403", "403", "403"]


def test_a_run_s_own_commands_fail_where_the_pod_says_and_the_run_goes_on(
    cluster: Cluster, namespace: str, client: Client, containers: Path, tmp_path: Path
) -> None:
    """The same attempts, made by the agent itself: a scripted model calls run_command for
    each, each comes back to it failed as the pod's spec says, and the run goes on to its
    answer; the operator and another run are untouched."""
    marker = tmp_path / "host-file"
    marker.write_text("host")
    _agent(cluster, namespace, worker={"sandboxSize": f"{SANDBOX_SIZE}Mi"})
    with socket.create_server(("127.0.0.1", 0)) as unlisted:
        attempts = {
            "whoami": "id -u",
            "root filesystem": "echo x > /etc/x",
            "host file": f"cat {marker}",
            "clock": "date -s 2001-01-01",
            "sandbox size": f"dd if=/dev/zero of=fill bs=1M count={2 * SANDBOX_SIZE}; "
            "s=$?; rm -f fill; exit $s",
            "network": "python3 -c 'import socket; "
            f'socket.create_connection(("127.0.0.1", {unlisted.getsockname()[1]}), timeout=3)\'',
            "the model key": "env",
        }
        script: list[dict[str, Any]] = [
            {"tool": "run_command", "args": {"command": line}} for line in attempts.values()
        ]
        client.spawn(
            "bystander", WorkerSpec(agent="planner", initial_message="go", interactive=True)
        )
        client.spawn(
            "agent",
            WorkerSpec(agent="planner", initial_message="go", script=[*script, {"reply": "done"}]),
        )
        info = reached(client, "agent", "Done", timeout=120)
    assert info.status.output == "done"
    logs = cluster.kubectl("logs", "agent", "-n", namespace).stdout
    events = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    results = [e["payload"]["result"] for e in events if e["kind"] == "tool_result"]
    said = dict(zip(attempts, results, strict=True))
    assert said["whoami"]["exit_code"] == 0 and said["whoami"]["stdout"].strip() == "65532"
    assert "Read-only file system" in said["root filesystem"]["stderr"]
    assert "No such file" in said["host file"]["stderr"]
    assert "Operation not permitted" in said["clock"]["stderr"]
    assert "No space left on device" in said["sandbox size"]["stderr"]
    assert "ConnectionRefusedError" in said["network"]["stderr"]
    env = dict(line.split("=", 1) for line in said["the model key"]["stdout"].splitlines())
    assert set(env) <= {"PATH", "HOME", "LANG", "TMPDIR", "PWD", "SHLVL", "_"}, env
    for name, result in said.items():
        if name not in ("whoami", "the model key"):
            assert result["exit_code"] != 0, (name, result)
    assert client.get("bystander").status.phase == "Idle"


def test_a_run_past_its_memory_limit_ends_oomkilled_and_its_worker_says_so(
    cluster: Cluster, namespace: str, client: Client, containers: Path
) -> None:
    # Less than the runtime needs to start: its memory cgroup kills it.
    _agent(cluster, namespace, worker={"resources": {"limits": {"memory": "24Mi"}}})
    client.spawn("hungry", WorkerSpec(agent="planner", initial_message="go"))
    _failed_with(
        cluster, namespace, client, "hungry", "OOMKilled", "exited 137 (SIGKILL): OOMKilled"
    )


def test_a_run_past_its_deadline_ends_deadline_exceeded_and_its_worker_says_so(
    cluster: Cluster, namespace: str, client: Client, containers: Path
) -> None:
    _agent(cluster, namespace, worker={"deadlineSeconds": 20})
    client.spawn("slow", WorkerSpec(agent="planner", initial_message="go", interactive=True))
    # It waits Idle (in its container) until its deadline stops it.
    _running(client, namespace, "slow")
    _failed_with(
        cluster, namespace, client, "slow", "DeadlineExceeded", "longer than the specified deadline"
    )
    pod = cluster.kubectl_json("get", "pod", "slow", "-n", namespace)
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "DeadlineExceeded")


def _failed_with(
    cluster: Cluster, namespace: str, client: Client, name: str, reason: str, message: str
) -> None:
    """The Worker Failed with `reason` (its Ready condition) and one Warning Event of it."""
    info = reached(client, name, "Failed")
    assert message in (info.status.error or ""), info.status.error
    ready = next(c for c in info.status.conditions if c.type == "Ready")
    assert ready.reason == reason, ready
    events = cluster.kubectl_json(
        "get",
        "events",
        "-n",
        namespace,
        f"--field-selector=involvedObject.name={name},type=Warning",
    )["items"]
    assert [e["reason"] for e in events if e["involvedObject"]["kind"] == "Worker"] == [reason]


def test_what_a_crashed_runner_left_is_removed_by_the_next_one(
    cluster: Cluster, namespace: str, client: Client, tmp_path: Path, image: runcpods.Image
) -> None:
    _agent(cluster, namespace)
    with pod_runner(cluster, namespace, tmp_path / "pods", None, True) as runner:
        client.spawn("left", WorkerSpec(agent="planner", initial_message="go", interactive=True))
        first = _running(client, namespace, "left")
        runner.kill()  # a crash: its container, network and mounts stay behind
        runner.wait()
    bundle = runcpods.STATE / "bundles" / first
    assert bundle.is_dir() and _leftovers(first)
    with pod_runner(cluster, namespace, tmp_path / "again", None, True):
        wait_until(
            "what the crashed runner left to go",
            lambda: not bundle.exists() and not _leftovers(first),
            timeout=30,
        )
        # ... and the pod runs again, as a kubelet starts a pod's container it lost.
        wait_until("the pod's new container", lambda: runcpods.find(namespace, "left"))


def _leftovers(container: str) -> list[str]:
    """What of a container is still on this machine: its runc state, nft table, network
    namespace, mounts, cgroups."""
    id = container.removeprefix("aw-")
    found = []
    if (runcpods.STATE / "runc" / container).exists():
        found.append("runc state")
    nft = ["nft", "list", "tables"]
    tables = subprocess.run(nft, capture_output=True, text=True, check=True).stdout
    if f"aw-{id}" in tables:
        found.append("nft table")
    if Path(f"/var/run/netns/aw-{id}").exists():
        found.append("netns")
    if str(runcpods.STATE / "bundles" / container) in Path("/proc/self/mounts").read_text():
        found.append("mounts")
    found += [str(c) for c in Path("/sys/fs/cgroup").glob(f"*/agentworkers/{container}")]
    return found
