"""The one place that sends requests to the Kubernetes API server.

Raw JSON over the official client's connection pool: no typed models to build and
validate on the hot path, and one translation of failures. Everything above deals in
plain bodies (`dict`) and `agentworkers.errors.ApiError`:

* a refusal carries the HTTP status, the server's message and, for a refusal of ours
  (admission), its reason and field from the Status's `details.causes`;
* an unreachable or silent server is an `ApiError` with `status` None.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import prometheus_client
import urllib3
from kubernetes.client import ApiClient

from agentworkers.api.common import GROUP, VERSION
from agentworkers.errors import AgentWorkersError, ApiError

Body = dict[str, Any]
Query = list[tuple[str, str]]

JSON = "application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# (connect, read) seconds, or one bound for both.
Timeout = float | tuple[float, float]

# Core and RBAC kinds the operator and the client touch, by plural.
_CORE = {"pods": "/api/v1", "events": "/api/v1", "serviceaccounts": "/api/v1"}
_RBAC = "/apis/rbac.authorization.k8s.io/v1"
_PATHS = {
    **_CORE,
    "roles": _RBAC,
    "rolebindings": _RBAC,
    "leases": "/apis/coordination.k8s.io/v1",
}

# Every request this process sends through `Api` (kopf's own watches and patches aside):
# what the write budget in docs/scaling.md counts.
REQUESTS = prometheus_client.Counter(
    "agentworkers_api_requests_total",
    "Requests sent to the API server, by verb (LIST: a GET of a collection), resource and "
    "HTTP code ('error': no answer); the operator's own, not kopf's watches",
    ["verb", "resource", "code"],
)


# The namespace that stands for all of them: a collection across the cluster (as
# `kubectl get -A` reads it), one LIST or one WATCH whatever the namespace count.
ALL_NAMESPACES = ""


def path(plural: str, namespace: str, name: str = "", subresource: str = "") -> str:
    """The REST path of a namespaced collection or object, core or ours; with
    `ALL_NAMESPACES` the collection across every namespace."""
    root = _PATHS.get(plural, f"/apis/{GROUP}/{VERSION}")
    if namespace == ALL_NAMESPACES:
        if name:
            raise ValueError(f"{plural}/{name}: an object is read in its namespace")
        return f"{root}/{plural}"
    base = f"{root}/namespaces/{namespace}/{plural}"
    return "/".join(p for p in (base, name, subresource) if p)


def refusal(status: int | None, reason: str, data: bytes | str) -> ApiError:
    """An error response as an ApiError: the server's message, and our cause if any."""
    try:
        body = json.loads(data)
        message = str(body.get("message") or "")
        causes = (body.get("details") or {}).get("causes") or [{}]
    except (TypeError, ValueError, AttributeError):
        return ApiError(f"{status} {reason}", status)
    ours = causes[0]
    cause = None
    if ours.get("reason") and ours.get("message"):
        cause = AgentWorkersError(
            str(ours["message"]), str(ours.get("field") or ""), reason=str(ours["reason"])
        )
    rule = f"{status} {reason}: {message}" if message else f"{status} {reason}"
    return ApiError(rule, status, cause)


def _verb_and_resource(method: str, url: str, query: Query) -> tuple[str, str]:
    """As the API server's metrics name them: ("LIST", "workers") for a GET of
    /apis/.../namespaces/ns/workers, WATCH for a watch, "workers/status" for a
    subresource, the last segment of a cluster-scoped path."""
    parts = url.strip("/").split("/")
    if "namespaces" not in parts[:-2]:
        # /api/v1/pods or /apis/GROUP/VERSION/workers: a collection across namespaces.
        collection = len(parts) == (3 if parts[0] == "api" else 4)
        if method == "GET" and collection:
            return ("WATCH" if ("watch", "true") in query else "LIST"), parts[-1]
        return method, parts[-1]
    rest = parts[parts.index("namespaces") + 2 :]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if method == "GET" and len(rest) == 1:
        return ("WATCH" if ("watch", "true") in query else "LIST"), resource
    return method, resource


class SilentWatch(ApiError):
    """A watch's connection sent nothing for longer than the server would stay quiet: a
    network that lost it without a word (a partition, a NAT entry gone) looks like this."""


@dataclass
class Api:
    """Requests on one pooled client (`agentworkers.kube.connect`)."""

    client: ApiClient

    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        query: Query | None = None,
        content_type: str = JSON,
        timeout: Timeout | None = None,
    ) -> Body:
        response = self._send(method, url, body, query, content_type, timeout)
        data = response.data
        return cast(Body, json.loads(data)) if data else {}

    def _send(
        self,
        method: str,
        url: str,
        body: Any,
        query: Query | None,
        content_type: str,
        timeout: Timeout | None,
    ) -> Any:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.client.param_serialize(
            method, url, query_params=query, header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        verb, resource = _verb_and_resource(method, url, query or [])
        try:
            response = self.client.call_api(*request, _request_timeout=timeout).response
        except urllib3.exceptions.HTTPError as e:
            REQUESTS.labels(verb, resource, "error").inc()
            raise ApiError(f"cannot reach the API server: {e}") from e
        REQUESTS.labels(verb, resource, str(response.status)).inc()
        if response.status >= 400:
            raise refusal(response.status, response.reason, response.data)
        return response

    def open_connections(self, count: int) -> None:
        """`count` pooled connections opened now, each by a GET of /version (which every
        account may read) sent at once from threads of their own: the requests that follow
        skip their TCP and TLS handshakes. Best effort: a failure here is a later
        request's to report, and a connection the server closes while idle is opened
        again when needed."""
        with ThreadPoolExecutor(count) as pool:
            for sent in [pool.submit(self.request, "GET", "/version") for _ in range(count)]:
                with contextlib.suppress(ApiError):
                    sent.result()

    def fetch(self, url: str) -> Body | None:
        """GET, None when there is no such object."""
        try:
            return self.request("GET", url)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    # --- resources -----------------------------------------------------------------

    def get(self, plural: str, namespace: str, name: str) -> Body | None:
        return self.fetch(path(plural, namespace, name))

    def list(self, plural: str, namespace: str, *, labels: str = "", fields: str = "") -> Body:
        """The list (its `items` and `metadata.resourceVersion`)."""
        query = [(k, v) for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v]
        return self.request("GET", path(plural, namespace), query=query)

    def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Body:
        return self.request("POST", path(plural, namespace), body)

    def patch(
        self,
        plural: str,
        namespace: str,
        name: str,
        patch: Any,
        content_type: str = MERGE,
        subresource: str = "",
    ) -> Body:
        return self.request(
            "PATCH", path(plural, namespace, name, subresource), patch, content_type=content_type
        )

    def delete(
        self, plural: str, namespace: str, name: str, options: Mapping[str, Any] | None = None
    ) -> None:
        self.request("DELETE", path(plural, namespace, name), options)

    def watch(
        self,
        plural: str,
        namespace: str,
        version: str,
        seconds: int,
        *,
        labels: str = "",
        fields: str = "",
        silence: float | None = None,
    ) -> Iterator[Body]:
        """The watch events from `version` on, for at most `seconds` (the server ends it).
        A connection that sends nothing (no event, no bookmark) for `silence` seconds
        (default: the watch's length plus 30) is presumed dead: `SilentWatch`; any other
        break is an ApiError too. A `410 Gone` (the version is too old) arrives as an
        ApiError with status 410, like a refused request."""
        query = [
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ]
        query += [(k, v) for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v]
        bound = seconds + 30
        timeout = min(bound, silence or bound)  # each read; connecting has its own bound
        response = self._send("GET", path(plural, namespace), None, query, JSON, timeout)
        pending = b""
        try:
            for chunk in response.stream(amt=None, decode_content=True):
                # One event per line; a chunk may end inside one.
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise refusal(
                            status.get("code"), status.get("reason", ""), json.dumps(status)
                        )
                    yield event
        except urllib3.exceptions.ReadTimeoutError as e:
            # What lost this connection lost the idle ones pooled beside it as well: a
            # request sent on one would wait out its whole timeout. New ones, then.
            self.client.rest_client.pool_manager.clear()
            raise SilentWatch(f"the watch went silent (nothing for {timeout:.0f} s)") from e
        except urllib3.exceptions.HTTPError as e:
            raise ApiError(f"the watch broke: {e}") from e
        finally:
            response.release_conn()

    def whoami(self) -> str:
        """The username the API server knows this client by (a SelfSubjectReview)."""
        review = self.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        username = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        if not username:
            raise ApiError("the API server did not say who this client is (SelfSubjectReview)")
        return str(username)
