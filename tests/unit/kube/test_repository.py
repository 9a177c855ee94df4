"""The repository's own habits that need no API server: the writes it leaves out."""

from __future__ import annotations

from typing import Any

from agentworkers.core.access import access_objects, role_rules
from agentworkers.kube.repository import Storage


class _Api:
    """Records what would be sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def create(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(("POST", plural))
        return body

    def patch(self, plural: str, namespace: str, name: str, patch: Any, **_: Any) -> Any:
        self.sent.append(("PATCH", plural))
        return {}


def test_a_role_s_rules_are_not_written_again_as_they_were_last_written() -> None:
    api = _Api()
    storage = Storage(api)  # type: ignore[arg-type]
    parent = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": "parent", "namespace": "ns", "uid": "u-1"},
    }
    _, role, binding = access_objects(parent, "planner", [])
    assert storage.ensure_access([role, binding])
    # The same rules, asked again by every pass of a child not started yet: no write.
    assert storage.set_role_rules("ns", "worker-parent", role_rules("parent", "planner", []))
    assert api.sent == [("POST", "roles"), ("POST", "rolebindings")]
    with_kid = role_rules("parent", "planner", ["kid"])
    assert storage.set_role_rules("ns", "worker-parent", with_kid)
    assert storage.set_role_rules("ns", "worker-parent", with_kid)
    assert api.sent.count(("PATCH", "roles")) == 1
