"""The operator's API calls give up on a server that accepts and never answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import kubernetes
import pytest
import urllib3

from agentworkers.storage import BoundedApiClient, Storage


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections and never sends a byte."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def client(host: str, timeout: float) -> BoundedApiClient:
    config = kubernetes.client.Configuration()
    config.host = host
    config.retries = False
    return BoundedApiClient(config, timeout=timeout)


def test_a_call_gives_up_after_the_timeout(silent_server: str) -> None:
    storage = Storage(client(silent_server, timeout=0.5))
    start = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):
        storage.get("workers", "default", "w1")
    assert time.monotonic() - start < 5


def test_a_call_that_sets_its_own_timeout_keeps_it(silent_server: str) -> None:
    api = kubernetes.client.CoreV1Api(client(silent_server, timeout=30))
    start = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_namespace(_request_timeout=0.3)
    assert time.monotonic() - start < 5
