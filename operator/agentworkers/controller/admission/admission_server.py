"""The admission webhook's HTTPS server, on threads of its own, never on kopf's event loop.

kopf registers the webhooks and keeps their configuration (URL or Service, caBundle,
rules) up to date. Served by kopf, a review would wait on its event loop behind every
watch event the operator is processing: under a burst of Workers, most of a second. This
server answers instead: a thread per connection reads the AdmissionReview, runs the check
registered under its path (the kopf handler id) against the watch-fed store, and writes
the response, so a review costs only its own few milliseconds of CPU.

A refusal of ours carries its reason and field in the Status's `details.causes`.
`GET /readyz` answers 200 once the store is complete (503 before): a readiness probe
keeps reviews off a replica that would refuse them.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import logging
import socket
import ssl
import sys
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from agentworkers.controller.infra import metrics
from agentworkers.controller.kopf.kopf_fixes import Refused, refusal_details

log = logging.getLogger(__name__)

# Seconds a connection may take to complete its TLS handshake or send a request.
CLIENT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Review:
    """What a check reads from an AdmissionReview's request."""

    body: dict[str, Any]  # the object as it would be stored
    old: dict[str, Any] | None  # as it is stored, for an update
    username: str
    dry_run: bool = False  # kubectl --dry-run=server: checked, and nothing remembered


# A check: refuses by raising (kopf.AdmissionError, or Refused with reason and field);
# may append warnings.
Check = Callable[[Review, list[str]], None]


def answer(
    request: Mapping[str, Any], checks: Mapping[str, Check], check_id: str
) -> dict[str, Any]:
    """The AdmissionReview response to one request (its `request` part)."""
    warnings: list[str] = []
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    review = Review(
        body=dict(request.get("object") or {}),
        old=request.get("oldObject"),
        username=str((request.get("userInfo") or {}).get("username", "")),
        dry_run=bool(request.get("dryRun")),
    )
    try:
        check = checks[check_id]
    except KeyError:
        response.update(allowed=False, status={"code": 404, "message": f"no check {check_id!r}"})
        return response
    try:
        check(review, warnings)
    except Refused as e:
        status = {"code": e.code or 422, "message": str(e), **refusal_details(e.error)}
        response.update(allowed=False, status=status)
    except kopf.AdmissionError as e:
        response.update(allowed=False, status={"code": e.code or 500, "message": str(e)})
    except Exception as e:  # an unexpected fault refuses (as failurePolicy Fail would)
        log.exception("admission check %s failed", check_id)
        response.update(allowed=False, status={"code": 500, "message": f"{type(e).__name__}: {e}"})
    if warnings:
        response["warnings"] = warnings
    return response


def _check_id(path: str) -> str:
    """The check a request path names: `/worker?timeout=30s` -> `worker`."""
    return urllib.parse.urlsplit(path).path.strip("/").rsplit("/", 1)[-1]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    # A response goes out as two writes (headers, then body): with Nagle's algorithm the
    # second waits for the API server to acknowledge the first, which it may delay.
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            review = json.loads(self.rfile.read(length))
            request = review["request"]
        except (ValueError, KeyError, TypeError):
            self.send_error(400, "not an AdmissionReview")
            return
        check_id = _check_id(self.path)
        with metrics.ADMISSION_SECONDS.labels(check=check_id).time():
            body = {
                "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                "kind": "AdmissionReview",
                "response": answer(request, self.server.checks, check_id),
            }
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def do_GET(self) -> None:
        if urllib.parse.urlsplit(self.path).path != "/readyz":
            self.send_error(404)
            return
        ready = self.server.ready()
        data = b"ok\n" if ready else b"the store is still being filled\n"
        self.send_response(200 if ready else 503)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass  # the API server's own metrics and our refusal counters tell the story


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        checks: Mapping[str, Check],
        ready: Callable[[], bool],
    ) -> None:
        self.context = context
        self.checks = checks
        self.ready = ready
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        # The TLS handshake happens in the connection's own thread (finish_request), so a
        # slow client never holds up accepting the next one.
        sock, address = self.socket.accept()
        sock.settimeout(CLIENT_TIMEOUT)
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), address

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()
        except (OSError, ssl.SSLError):
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints the traceback raw on stderr, a line no log reader can parse;
        # an API server that hung up (its review timed out) is not our fault.
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.debug("admission client %s went away: %r", client_address, error)
        else:
            log.exception("admission request from %s failed", client_address)


class ThreadedWebhookServer(kopf.WebhookServer):
    """kopf's WebhookServer (certificates, client config), answering on its own threads.

    `checks` maps a handler id to its check; kopf's `fn` (its own dispatch) is not used.
    `ready` says whether the checks can answer (`/readyz`).
    """

    def __init__(
        self,
        *,
        checks: Mapping[str, Check],
        ready: Callable[[], bool] = lambda: True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.checks = checks
        self.ready = ready

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        cadata, context = self._build_ssl()
        if context is None:
            raise ValueError("the admission server serves HTTPS only")
        addr = self.addr or "0.0.0.0"
        port = self.port or self._allocate_free_port()
        server = _Server((addr, port), context, self.checks, self.ready)
        thread = threading.Thread(target=server.serve_forever, name="admission", daemon=True)
        thread.start()
        try:
            host = self.host or self._get_accessible_addr(self.addr)
            config: dict[str, Any] = {"url": self._build_url("https", host, port, self.path or "")}
            if cadata is not None:
                config["caBundle"] = base64.b64encode(cadata).decode("ascii")
            log.debug("answering admission reviews at %s", config["url"])
            yield config
            # A new certificate restarts the process (tls.CertificateWatch): serve until then.
            await asyncio.Event().wait()
        finally:
            server.shutdown()
            server.server_close()
