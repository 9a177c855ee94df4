"""Connecting to the API: where the configuration comes from, bounded calls, and reads
retried when the server asks (against loopback servers, no cluster)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml

from agentworkers import kube
from agentworkers.errors import ApiError, ConfigError
from agentworkers.kube import connection as kube_connection


def kubeconfig(path: Path, server: str, namespace: str | None = None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": context}],
                "current-context": "ctx",
            }
        )
    )
    return path


@pytest.fixture
def no_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No KUBECONFIG, not in a pod, and a HOME without ~/.kube/config."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(
        kubernetes.config.kube_config,
        "KUBE_CONFIG_DEFAULT_LOCATION",
        str(tmp_path / ".kube" / "config"),
    )
    return tmp_path


def test_the_kubeconfig_given_wins_and_names_the_namespace(
    no_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "KUBECONFIG", str(kubeconfig(no_sources / "env", "http://127.0.0.1:1", "from-env"))
    )
    given = kubeconfig(no_sources / "given", "http://127.0.0.1:2", "team-a")
    connection = kube.connect(str(given))
    assert connection.api.configuration.host == "http://127.0.0.1:2"
    assert connection.namespace == "team-a"


def test_then_kubeconfig_from_the_environment(
    no_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")  # KUBECONFIG still wins
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(no_sources / "env", "http://127.0.0.1:3")))
    connection = kube.connect()
    assert connection.api.configuration.host == "http://127.0.0.1:3"
    assert connection.namespace == "default"


def test_then_the_pods_service_account(no_sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    account = no_sources / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("not read until a TLS call")
    (account / "namespace").write_text("agents\n")
    incluster = kubernetes.config.incluster_config
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setattr(kube_connection, "SERVICE_ACCOUNT_NAMESPACE", account / "namespace")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    connection = kube.connect()
    assert connection.api.configuration.host == "https://127.0.0.1:6443"
    assert connection.namespace == "agents"


def test_with_no_source_the_error_says_so(no_sources: Path) -> None:
    with pytest.raises(ConfigError, match="no usable kubeconfig or service account"):
        kube.connect()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections and never sends a byte."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_call_gives_up_after_the_timeout(silent_server: str, tmp_path: Path) -> None:
    api = kube.connect(str(kubeconfig(tmp_path / "c", silent_server)), timeout=0.5).api
    start = time.monotonic()
    with pytest.raises(ApiError, match="cannot reach the API server") as refused:
        kube.Api(api).get("workers", "default", "w1")
    assert refused.value.status is None
    assert time.monotonic() - start < 5


def test_a_call_that_sets_its_own_timeout_keeps_it(silent_server: str, tmp_path: Path) -> None:
    api = kube.connect(str(kubeconfig(tmp_path / "c", silent_server)), timeout=30).api
    start = time.monotonic()
    with pytest.raises(ApiError, match="cannot reach the API server"):
        kube.Api(api).request("GET", "/api/v1/namespaces", timeout=0.3)
    assert time.monotonic() - start < 5


class Busy(http.server.BaseHTTPRequestHandler):
    """Answers 429 with Retry-After until `busy` requests have been refused, then 200."""

    busy = 0
    seen = 0

    def do_GET(self) -> None:
        type(self).seen += 1
        if type(self).seen <= type(self).busy:
            self.send_response(429)
            self.send_header("Retry-After", "1")
            body = b'{"kind":"Status","code":429,"message":"storage is (re)initializing"}'
        else:
            self.send_response(200)
            body = b'{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}'
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_a_read_the_server_asks_to_retry_is_retried(tmp_path: Path) -> None:
    Busy.busy, Busy.seen = 2, 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        api = kube.connect(str(kubeconfig(tmp_path / "c", url))).api
        assert kube.Api(api).request("GET", "/api/v1/namespaces")["items"] == []
        assert Busy.seen == 3
    finally:
        server.shutdown()
        server.server_close()
