"""How the operator, the runtime and the client connect to the Kubernetes API.

One order of configuration sources for all of them, controller-runtime's: the kubeconfig
given, then KUBECONFIG, then the pod's service account, then ~/.kube/config. One client
class (`agentworkers.kube.api` sends every request on it), with two habits of client-go:
every call is bounded in time, and reads that the server asks to retry later (429, or a
5xx with Retry-After) are retried.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from agentworkers.errors import ConfigError

# Seconds any one call may take unless it sets its own (a watch does); an admission
# webhook on the way may take up to 30 by itself.
REQUEST_TIMEOUT = 60.0
# Seconds to connect and finish the TLS handshake, whatever a call's own bound: a
# connection that a partition took answers no handshake, and a watch of minutes would
# otherwise wait its whole length before trying another (client-go gives a handshake 10).
CONNECT_TIMEOUT = 10.0
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ApiClient(kubernetes.client.ApiClient):
    """The official client; an attempt that hangs gives up after `timeout` seconds, or
    `CONNECT_TIMEOUT` when it cannot connect (and a read is attempted at most four times),
    so a call cannot hold a handler thread, or a user's terminal, forever."""

    def __init__(
        self, configuration: kubernetes.client.Configuration, timeout: float = REQUEST_TIMEOUT
    ) -> None:
        super().__init__(configuration)
        self.timeout = timeout

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        timeout = _request_timeout or self.timeout
        if not isinstance(timeout, tuple):
            timeout = (min(CONNECT_TIMEOUT, timeout), timeout)
        return super().call_api(method, url, header_params, body, post_params, timeout)


@dataclass(frozen=True)
class Connection:
    api: ApiClient
    # The kubeconfig context's namespace, or the service account's; else "default".
    namespace: str


def connect(
    kubeconfig: str | None = None, timeout: float = REQUEST_TIMEOUT, threads: int = 1
) -> Connection:
    """A client from the first source that exists (see the module's docstring), keeping
    a pooled connection for each of `threads` callers."""
    configuration = kubernetes.client.Configuration()
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, threads)
    configuration.client_go_retries = True  # the client's own Retry-After handling for reads
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=configuration)
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        else:
            # None: ~/.kube/config. KUBECONFIG may list several files; the loader merges them.
            kubernetes.config.load_kube_config(config_file=path, client_configuration=configuration)
            _, context = kubernetes.config.list_kube_config_contexts(config_file=path)
            namespace = context.get("context", {}).get("namespace") or "default"
    except (kubernetes.config.ConfigException, OSError) as e:
        raise ConfigError(f"no usable kubeconfig or service account: {e}") from e
    return Connection(ApiClient(configuration, timeout), namespace)
