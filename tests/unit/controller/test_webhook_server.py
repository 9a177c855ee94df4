"""The admission webhook registers by URL on loopback, by Service reference in a cluster."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import kopf

from agentworkers.controller.admission.admission_server import Review
from agentworkers.controller.infra.options import Options, ServiceWebhookServer
from agentworkers.controller.kopf.kopf_fixes import Refused
from agentworkers.errors import NotYourChildError


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
    server = options.webhook_server({})
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
    server = options.webhook_server({})
    assert not isinstance(server, ServiceWebhookServer)
    config = asyncio.run(_first_config(server))
    assert config["url"] == f"https://127.0.0.1:{options.webhook_port}"
    assert (tmp_path / "tls.crt").exists() and (tmp_path / "tls.key").exists()


def _review(uid: str, worker: str) -> bytes:
    request = {
        "uid": uid,
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "object": {"metadata": {"name": worker, "namespace": "team-a"}, "spec": {}},
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def _post(url: str, cafile: Path, data: bytes) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(cafile))
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=5) as answer:
        return dict(json.loads(answer.read())["response"])


def check_worker(review: Review, warnings: list[str]) -> None:
    if review.body["metadata"]["name"] == "bad":
        raise Refused(NotYourChildError("not yours", field="spec.parent"))
    warnings.append(f"hello {review.username}")


def test_reviews_are_answered_on_threads_even_while_the_event_loop_is_blocked(
    tmp_path: Path,
) -> None:
    options = Options(webhook_port=_port(), tls_dir=tmp_path)
    server = options.webhook_server({"worker": check_worker})
    configs: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    blocked = threading.Event()

    async def run() -> None:
        stream = server(None)
        configs.append(dict(await anext(stream)))
        blocked.set()
        time.sleep(3)  # the event loop is busy (as kopf's is under a burst of events)
        await stream.aclose()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),))
    thread.start()
    try:
        assert blocked.wait(10)
        url = configs[0]["url"].rstrip("/")
        started = time.monotonic()
        # The API server adds its timeout to the path.
        allowed = _post(f"{url}/worker?timeout=30s", tmp_path / "tls.crt", _review("u1", "fine"))
        assert time.monotonic() - started < 1
        assert allowed == {"uid": "u1", "allowed": True, "warnings": ["hello alice"]}
        refused = _post(f"{url}/worker", tmp_path / "tls.crt", _review("u2", "bad"))
        assert refused["allowed"] is False
        assert refused["status"]["code"] == 422
        assert refused["status"]["message"] == "NotYourChild: spec.parent: not yours"
        assert refused["status"]["details"]["causes"] == [
            {"reason": "NotYourChild", "field": "spec.parent", "message": "not yours"}
        ]
        unknown = _post(f"{url}/nosuch", tmp_path / "tls.crt", _review("u3", "fine"))
        assert unknown["allowed"] is False
    finally:
        thread.join(10)
        loop.close()


def test_readyz_says_whether_the_checks_can_answer(tmp_path: Path) -> None:
    """A readiness probe keeps the API server's reviews off a replica still filling its
    store: 503 until `ready` says so, 200 after."""
    options = Options(webhook_port=_port(), tls_dir=tmp_path)
    synced = threading.Event()
    server = options.webhook_server({}, synced.is_set)
    context = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    codes: list[int] = []

    async def run() -> None:
        stream = server(None)
        url = dict(await anext(stream))["url"].rstrip("/")

        def probe() -> int:
            try:
                with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=5) as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return int(e.code)

        codes.append(await asyncio.to_thread(probe))
        synced.set()
        codes.append(await asyncio.to_thread(probe))
        await stream.aclose()

    asyncio.run(run())
    assert codes == [503, 200]


def test_an_api_server_that_hangs_up_leaves_no_raw_traceback_on_stderr(
    tmp_path: Path, capfd: Any, caplog: Any
) -> None:
    """The operator logs JSON lines; socketserver would print a client's reset connection
    as a bare traceback on stderr (a review the API server gave up on)."""
    options = Options(webhook_port=_port(), tls_dir=tmp_path)
    checking, reset = threading.Event(), threading.Event()

    def slow(review: Review, warnings: list[str]) -> None:
        checking.set()
        reset.wait(5)  # the client resets the connection meanwhile

    server = options.webhook_server({"worker": slow})
    context = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))

    async def run() -> None:
        stream = server(None)
        url = urllib.parse.urlsplit(dict(await anext(stream))["url"])

        def hang_up() -> None:
            raw = socket.create_connection((url.hostname, url.port))
            tls = context.wrap_socket(raw, server_hostname=url.hostname)
            body = _review("u1", "fine")
            tls.sendall(
                b"POST /worker HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert checking.wait(5)
            # An RST rather than a FIN: the server's write of its answer fails.
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            tls.close()
            reset.set()

        await asyncio.to_thread(hang_up)
        await asyncio.sleep(1)  # the write, and its failure
        await stream.aclose()

    with caplog.at_level(
        logging.DEBUG, logger="agentworkers.controller.admission.admission_server"
    ):
        asyncio.run(run())
    assert "Traceback" not in capfd.readouterr().err
    assert any("went away" in r.getMessage() for r in caplog.records)
