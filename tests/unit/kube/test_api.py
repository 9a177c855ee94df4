"""kube.api without a server: how a request is named in `agentworkers_api_requests_total`."""

from __future__ import annotations

import pytest

from agentworkers.kube.api import _verb_and_resource, path


@pytest.mark.parametrize(
    ("method", "url", "query", "expected"),
    [
        ("GET", path("workers", "team-a", "w1"), [], ("GET", "workers")),
        ("GET", path("workers", "team-a"), [], ("LIST", "workers")),
        ("GET", path("pods", "team-a"), [("watch", "true")], ("WATCH", "pods")),
        ("PATCH", path("workers", "team-a", "w1", "status"), [], ("PATCH", "workers/status")),
        ("POST", path("roles", "team-a"), [], ("POST", "roles")),
        ("DELETE", path("pods", "team-a", "w1"), [], ("DELETE", "pods")),
        (
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            [],
            ("POST", "selfsubjectreviews"),
        ),
    ],
)
def test_requests_are_named_as_the_api_server_names_them(
    method: str, url: str, query: list[tuple[str, str]], expected: tuple[str, str]
) -> None:
    assert _verb_and_resource(method, url, query) == expected
