"""Everything between the operator and the Kubernetes API: how to connect, and the
watch-fed store the operator reads from instead of the API server."""

from agentworkers.kube.connection import (
    REQUEST_TIMEOUT,
    SERVICE_ACCOUNT_NAMESPACE,
    ApiClient,
    ConfigError,
    Connection,
    connect,
    whoami,
)

__all__ = [
    "REQUEST_TIMEOUT",
    "SERVICE_ACCOUNT_NAMESPACE",
    "ApiClient",
    "ConfigError",
    "Connection",
    "connect",
    "whoami",
]
