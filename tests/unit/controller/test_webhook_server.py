"""The admission webhook registers by URL on loopback, by Service reference in a cluster."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import kopf

from agentworkers.controller.options import Options, ServiceWebhookServer


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _first_config(server: kopf.WebhookServer) -> dict[str, Any]:
    async def handler(*_: Any, **__: Any) -> dict[str, Any]:
        return {}

    stream = server(handler)
    try:
        return dict(await anext(stream))
    finally:
        await stream.aclose()


def test_a_service_host_registers_a_service_reference(tmp_path: Path) -> None:
    options = Options(
        webhook_port=_port(), webhook_host="aw-webhook.aw-system.svc", tls_dir=tmp_path
    )
    server = options.webhook_server()
    assert isinstance(server, ServiceWebhookServer)
    config = asyncio.run(_first_config(server))
    assert "url" not in config
    assert config["service"] == {
        "name": "aw-webhook",
        "namespace": "aw-system",
        "port": options.webhook_port,
        "path": "",
    }
    assert config["caBundle"]  # the self-signed certificate the operator made


def test_loopback_registers_a_url(tmp_path: Path) -> None:
    options = Options(webhook_port=_port(), tls_dir=tmp_path)
    server = options.webhook_server()
    assert not isinstance(server, ServiceWebhookServer)
    config = asyncio.run(_first_config(server))
    assert config["url"] == f"https://127.0.0.1:{options.webhook_port}"
    assert (tmp_path / "tls.crt").exists() and (tmp_path / "tls.key").exists()
