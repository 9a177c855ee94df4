"""Everything between agentworkers and the Kubernetes API server.

`connection` finds the cluster; `api` sends every request (raw JSON, one error type);
`watch` is the one list-then-watch loop (the client and the runtime); `store` is the
operator's watch-fed cache; `repository` is what the controller and admission read and
write; `events` posts Events, each once.
"""

from agentworkers.kube.api import Api
from agentworkers.kube.connection import (
    CONNECT_TIMEOUT,
    REQUEST_TIMEOUT,
    SERVICE_ACCOUNT_NAMESPACE,
    ApiClient,
    Connection,
    connect,
)

__all__ = [
    "CONNECT_TIMEOUT",
    "REQUEST_TIMEOUT",
    "SERVICE_ACCOUNT_NAMESPACE",
    "Api",
    "ApiClient",
    "Connection",
    "connect",
]
