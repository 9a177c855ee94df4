#!/usr/bin/env python3
"""A real, local Kubernetes control plane for tests and the demo.

    python hack/localcluster.py up       # build (cached) and start; prints the kubeconfig path
    python hack/localcluster.py down     # stop every process and remove the state
    python hack/localcluster.py status   # is it running, and where

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local
processes built from Go modules (hack/build-binaries.sh); kwok registers fake
nodes and moves pods through their phases. Everything listens on 127.0.0.1 only,
with TLS, client-certificate and service-account-token authentication, RBAC and
Pod Security admission on, so tests see what a real cluster does.

Network safety: fake nodes and pods get loopback addresses (127.0.0.0/8), because
the API server dials a node's address for logs, exec and port-forward.

This is a development tool. It is not a way to run production workloads.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
STATE_DIR = Path(os.environ.get("AGENTWORKERS_CLUSTER_DIR", REPO / ".cluster"))
OPERATOR_KUBECONFIG = "operator.kubeconfig"
NODE_COUNT = int(os.environ.get("AGENTWORKERS_NODES", "2"))
# Pods per fake node: room for every pod a test or bench makes (10,000 Workers across the
# two nodes). kwok completes a Job's pods but leaves a Worker's Running (no runtime runs in
# them), so with a kubelet's 110 a Worker phase filled the nodes and the scheduler retried
# the rest, loading the shared machine in Worker phases only.
NODE_PODS = int(os.environ.get("AGENTWORKERS_NODE_PODS", "5000"))
SERVICE_CIDR = "10.96.0.0/16"
# kwok hands pods addresses from this range: loopback, so nothing ever leaves the host.
# Pod IPs: the benchmarking range (RFC 2544), put whole on the loopback device, where
# (as for 127.0.0.0/8) every address in it is this machine's: a Service reaches a pod at
# its endpoint (the API server refuses loopback addresses there), and nothing sent to a
# pod IP leaves the machine. It needs CAP_NET_ADMIN; without it pods get 127.1.x.y and
# no Service reaches them. The range stays on lo after `down` (it only makes it local).
POD_CIDR = "198.18.0.0/16"
POD_CIDR_ON_LO = "198.18.0.1/16"
LOOPBACK_POD_CIDR = "127.1.0.0/16"


def local_pod_cidr() -> bool:
    """Put POD_CIDR on the loopback device, unless it is there; whether it is."""
    if _is_local("198.18.0.2"):
        return True
    subprocess.run(
        ["ip", "addr", "add", POD_CIDR_ON_LO, "dev", "lo"], check=False, capture_output=True
    )
    return _is_local("198.18.0.2")


def _is_local(ip: str) -> bool:
    route = subprocess.run(
        ["ip", "-o", "route", "get", ip], check=False, capture_output=True, text=True
    )
    return route.stdout.startswith("local ")


FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def log(message: str) -> None:
    print(f"[localcluster {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class State:
    """What `up` started, persisted so `down` and `status` (and other processes) find it."""

    bin_dir: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def save(self) -> None:
        (STATE_DIR / "state.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls) -> State | None:
        try:
            return cls(**json.loads((STATE_DIR / "state.json").read_text()))
        except FileNotFoundError:
            return None


# --- PKI -------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
    )


def make_pki(pki: Path) -> None:
    """A CA, the API server's serving certificate, one client certificate per component."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("agentworkers-local-ca")
    ca = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki / "ca.key", ca_key)
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    def issue(
        name: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> None:
        key = _key()
        builder = _builder(subject, ca_name, key).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write_key(pki / f"{name}.key", key)
        (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    server_sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(next(ipaddress.ip_network(SERVICE_CIDR).hosts())),
    ]
    server_usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
    client_usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    issue("apiserver", _name("kube-apiserver"), server_usage, server_sans)
    issue("admin", _name("agentworkers-admin", "system:masters"), client_usage, [])
    # The operator's own identity: admission tells its writes (a binding) from a user's.
    issue("operator", _name("agentworkers-operator", "system:masters"), client_usage, [])
    issue("controller-manager", _name("system:kube-controller-manager"), client_usage, [])
    issue("scheduler", _name("system:kube-scheduler"), client_usage, [])
    # kwok plays every kubelet; it is bound to a narrow ClusterRole after start-up.
    issue("kwok", _name("kwok-controller"), client_usage, [])
    issue(
        "apiserver-kubelet-client",
        _name("kube-apiserver-kubelet-client", "kubelet-api-admins"),
        client_usage,
        [],
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki / "sa.key", sa_key)
    (pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "agentworkers-local",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "agentworkers-local",
                "context": {"cluster": "agentworkers-local", "user": user},
            }
        ],
        "current-context": "agentworkers-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


# --- processes -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """Is the process there and not a zombie? (In a container, PID 1 may never reap it.)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state letter follows the parenthesised command name, which may hold spaces.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def start(state: State, name: str, args: list[str]) -> None:
    logfile = (STATE_DIR / "logs" / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        [str(Path(state.bin_dir) / name), *args],
        stdout=logfile,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        # Own process group: `down` signals it whole, and a Ctrl-C in the caller's
        # terminal does not take the cluster with it mid-test.
        start_new_session=True,
        cwd=STATE_DIR,
    )
    state.pids[name] = proc.pid
    state.save()


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, state: State | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if state:
            for name, pid in state.pids.items():
                if not alive(pid):
                    tail = (STATE_DIR / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise SystemExit(
                        f"{name} exited while waiting for {what}; its log ends:\n{tail}"
                    )
        time.sleep(0.2)
    raise SystemExit(
        f"timed out after {timeout:.0f}s waiting for {what} (logs in {STATE_DIR / 'logs'})"
    )


def https_ok(url: str, pki: Path, user: str | None = "admin") -> bool:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if user:
        ctx.load_cert_chain(str(pki / f"{user}.crt"), str(pki / f"{user}.key"))
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def kubectl(state: State, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [
            str(Path(state.bin_dir) / "kubectl"),
            "--kubeconfig",
            str(STATE_DIR / "kubeconfig"),
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


KWOK_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "agentworkers:kwok-controller"}
rules:
- apiGroups: [""]
  resources: [nodes, nodes/status, pods, pods/status]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
- apiGroups: [kwok.x-k8s.io]
  resources: ["*"]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "agentworkers:kwok-controller"}
roleRef:
  {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agentworkers:kwok-controller"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kwok-controller}
---
# The API server's kubelet client (logs, exec) talks to kwok, which plays every kubelet.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "agentworkers:apiserver-kubelet-api-admin"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kubelet-api-admin"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-apiserver-kubelet-client}
"""


def node_manifest(index: int) -> dict[str, object]:
    name = f"kwok-node-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "type": "kwok",
            },
        },
        "spec": {},
        "status": {
            # Registered with both, as a kubelet does: kwok's node-initialize stage (run
            # again each time the node goes not-Ready, as the node controller marks it while
            # the API server or etcd restarts) writes the addresses a node lacks as the
            # whole list, so a node with one of them lost both, then got one back, in turn.
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": str(NODE_PODS)},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": str(NODE_PODS)},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
            },
        },
    }


def _kcm_limits() -> tuple[int, int] | None:
    """AGENTWORKERS_KCM_QPS (and _BURST, default twice the QPS): the controller manager's
    client limits; unset, its defaults (QPS 20, burst 30)."""
    qps = os.environ.get("AGENTWORKERS_KCM_QPS")
    if not qps:
        return None
    return int(qps), int(os.environ.get("AGENTWORKERS_KCM_BURST") or 2 * int(qps))


def start_controller_manager(state: State, limits: tuple[int, int] | None) -> None:
    pki = STATE_DIR / "pki"
    kubeconfig = STATE_DIR / "controller-manager.kubeconfig"
    args = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={state.ports['controller-manager']}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        # Fake nodes have no real network: nothing to allocate or route.
        "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
        "--v=1",
    ]
    if limits:
        args += [f"--kube-api-qps={limits[0]}", f"--kube-api-burst={limits[1]}"]
    start(state, "kube-controller-manager", args)


def start_etcd(state: State) -> None:
    """etcd, on its data directory: a restart keeps every object."""
    p = state.ports
    start(
        state,
        "etcd",
        [
            "--name=local",
            f"--data-dir={STATE_DIR / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
            f"--initial-cluster=local=http://127.0.0.1:{p['etcd-peer']}",
            "--quota-backend-bytes=4294967296",
            "--unsafe-no-fsync",  # a throwaway test store
            "--log-level=warn",
        ],
    )

    def etcd_ok() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p['etcd']}/health", timeout=2) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    wait_for("etcd", etcd_ok, 60, state)


def start_apiserver(state: State) -> None:
    p, pki = state.ports, STATE_DIR / "pki"
    start(
        state,
        "kube-apiserver",
        [
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={p['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            # Privileged pods are allowed by the API server so that Pod Security admission,
            # not this flag, is what refuses them in a "restricted" namespace.
            "--allow-privileged=true",
            "--enable-admission-plugins=NodeRestriction",
            # Webhooks registered by Service reference are dialled at the Service's endpoint
            # addresses (kwok's pod IPs, on loopback), not its ClusterIP: there is no kube-proxy.
            "--enable-aggregator-routing=true",
            # /debug/pprof, to see where the API server's CPU goes under a bench (loopback,
            # authenticated): `kubectl get --raw "/debug/pprof/profile?seconds=20"`.
            "--profiling=true",
            "--v=1",
        ],
    )
    wait_for("kube-apiserver", lambda: https_ok(f"{state.server}/readyz", pki), 120, state)


def restart(args: argparse.Namespace) -> int:
    """Stop one component and start it again on the same ports and data (the fault suite
    restarts the API server and etcd under a workload)."""
    state = State.load()
    if not state:
        raise SystemExit("not running: hack/localcluster.py up")
    name = {"apiserver": "kube-apiserver", "etcd": "etcd"}[args.component]
    _stop({name: state.pids[name]})
    (start_etcd if name == "etcd" else start_apiserver)(state)
    state.save()
    log(f"{name} restarted")
    return 0


def controller_manager(args: argparse.Namespace) -> int:
    """Restart the controller manager with other client limits (the benchmarks compare the
    Job controller throttled and not)."""
    state = State.load()
    if not state:
        raise SystemExit("not running: hack/localcluster.py up")
    _stop({"kube-controller-manager": state.pids["kube-controller-manager"]})
    limits = (args.qps, args.burst or 2 * args.qps) if args.qps else None
    start_controller_manager(state, limits)
    state.save()
    log(f"kube-controller-manager restarted with limits {limits or 'default'}")
    return 0


def up(args: argparse.Namespace) -> int:
    existing = State.load()
    running = existing and all(alive(existing.pids.get(c, -1)) for c in COMPONENTS)
    if existing and running and https_ok(f"{existing.server}/readyz", STATE_DIR / "pki"):
        log(f"already running at {existing.server}")
        _report(existing, args)
        return 0
    if existing:
        log("found a stale cluster; removing it")
        down(argparse.Namespace(keep=False))

    began = time.monotonic()
    build = subprocess.run(
        ["bash", str(HACK / "build-binaries.sh")], stdout=subprocess.PIPE, text=True, check=False
    )
    if build.returncode != 0:
        raise SystemExit("building the control plane failed (see the output above)")
    bin_dir = build.stdout.strip().splitlines()[-1]
    built = time.monotonic()

    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "logs").mkdir(exist_ok=True)
    pki = STATE_DIR / "pki"
    make_pki(pki)
    names = (
        "etcd",
        "etcd-peer",
        "apiserver",
        "controller-manager",
        "scheduler",
        "kwok",
        "kwok-metrics",
    )
    state = State(bin_dir=bin_dir, ports={n: free_port() for n in names})
    state.save()
    for user, file in (
        ("admin", "kubeconfig"),
        ("operator", OPERATOR_KUBECONFIG),
        ("controller-manager", "controller-manager.kubeconfig"),
        ("scheduler", "scheduler.kubeconfig"),
        ("kwok", "kwok.kubeconfig"),
    ):
        write_kubeconfig(STATE_DIR / file, state.server, pki, user)

    p = state.ports
    start_etcd(state)
    start_apiserver(state)
    kubectl(state, "apply", "-f", "-", stdin=KWOK_RBAC)
    kubectl(state, "apply", "-f", str(Path(bin_dir) / "kwok-logs-crd.yaml"))

    start_controller_manager(state, _kcm_limits())
    start(
        state,
        "kube-scheduler",
        [
            f"--kubeconfig={STATE_DIR / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={STATE_DIR / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={STATE_DIR / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={p['scheduler']}",
            "--leader-elect=false",
            "--v=1",
        ],
    )
    start(
        state,
        "kwok",
        [
            f"--kubeconfig={STATE_DIR / 'kwok.kubeconfig'}",
            f"--config={Path(bin_dir) / 'kwok-stages.yaml'}",
            "--enable-crds=Logs",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
            "--node-ip=127.0.0.1",
            f"--cidr={POD_CIDR if local_pod_cidr() else LOOPBACK_POD_CIDR}",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{p['kwok']}",
            f"--node-port={p['kwok']}",
            "--v=INFO",
        ],
    )
    for name, port in (
        ("kube-controller-manager", p["controller-manager"]),
        ("kube-scheduler", p["scheduler"]),
    ):
        wait_for(
            name,
            lambda port=port: https_ok(f"https://127.0.0.1:{port}/healthz", pki, None),
            60,
            state,
        )

    for i in range(NODE_COUNT):
        kubectl(state, "apply", "-f", "-", stdin=json.dumps(node_manifest(i)))
    wait_for(
        "kwok nodes Ready",
        lambda: (
            kubectl(
                state,
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}",
            )
            .split()
            .count("True")
            == NODE_COUNT
        ),
        60,
        state,
    )
    # The controller manager's service-account controller makes "default" in each namespace.
    wait_for(
        "the default service account",
        lambda: (
            subprocess.run(
                [
                    str(Path(bin_dir) / "kubectl"),
                    "--kubeconfig",
                    str(STATE_DIR / "kubeconfig"),
                    "get",
                    "serviceaccount",
                    "default",
                    "-n",
                    "default",
                ],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        ),
        60,
        state,
    )
    took, build_took = time.monotonic() - began, built - began
    log(f"up at {state.server} in {took:.1f}s (build/cache {build_took:.1f}s)")
    log(f"export KUBECONFIG={STATE_DIR / 'kubeconfig'} PATH={STATE_DIR / 'bin'}:$PATH")
    _report(state, args)
    return 0


def _report(state: State, args: argparse.Namespace) -> None:
    # .cluster/bin: the kubectl (and kwok) matching this control plane, at a fixed path.
    link = STATE_DIR / "bin"
    if not link.is_symlink() or os.readlink(link) != state.bin_dir:
        link.unlink(missing_ok=True)
        link.symlink_to(state.bin_dir)
    kubeconfig = STATE_DIR / "kubeconfig"
    operator = STATE_DIR / OPERATOR_KUBECONFIG
    if getattr(args, "json", False):
        info = {"kubeconfig": str(kubeconfig), "binDir": state.bin_dir, "server": state.server}
        if operator.exists():  # a cluster started before it had one has none
            info["operatorKubeconfig"] = str(operator)
        print(json.dumps(info))
    else:
        print(kubeconfig)


def _stop(pids: dict[str, int], timeout: float = 15) -> None:
    """Stop in reverse start order, each before the next: an API server whose etcd is
    already gone ignores SIGTERM for a long while."""
    for name in reversed(list(pids)):
        pid = pids[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def down(args: argparse.Namespace) -> int:
    state = State.load()
    if state:
        _stop(state.pids)
        log("stopped")
    if not args.keep and STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)
    return 0


def status(args: argparse.Namespace) -> int:
    state = State.load()
    if not state:
        print("not running")
        return 1
    for name, pid in state.pids.items():
        print(f"{name:25} pid {pid:<8} {'running' if alive(pid) else 'STOPPED'}")
    ready = https_ok(f"{state.server}/readyz", STATE_DIR / "pki")
    print(f"api server {state.server} {'ready' if ready else 'NOT READY'}")
    print(f"KUBECONFIG={STATE_DIR / 'kubeconfig'}")
    print(f"bin: {state.bin_dir}")
    return 0 if ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    u = sub.add_parser(
        "up", help="build (cached) and start the control plane; reuses a running one"
    )
    u.add_argument(
        "--json", action="store_true", help="print kubeconfig, binDir and server as JSON"
    )
    u.set_defaults(func=up)
    d = sub.add_parser("down", help="stop it and remove its state")
    d.add_argument("--keep", action="store_true", help="keep the state directory (logs, etcd data)")
    d.set_defaults(func=down)
    sub.add_parser(
        "status", help="show the processes and whether the API server is ready"
    ).set_defaults(func=status)
    k = sub.add_parser(
        "controller-manager", help="restart kube-controller-manager with other client limits"
    )
    k.add_argument("--qps", type=int, default=0, help="client QPS; 0 for the default (20)")
    k.add_argument("--burst", type=int, default=0, help="client burst; default twice the QPS")
    k.set_defaults(func=controller_manager)
    r = sub.add_parser(
        "restart", help="restart the API server or etcd, keeping their data (fault tests)"
    )
    r.add_argument("component", choices=("apiserver", "etcd"))
    r.set_defaults(func=restart)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
