"""The repository's own habits that need no API server: the writes it leaves out."""

from __future__ import annotations

from typing import Any

from agentworkers.core.access import access_objects, role_rules
from agentworkers.kube import repository
from agentworkers.kube.repository import Storage
from agentworkers.kube.store import Store


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
    assert api.sent == [("POST", "roles"), ("POST", "rolebindings")]
    # The same rules, asked again by every pass of a child not started yet: one write.
    with_kid = role_rules("parent", "planner", ["kid"])
    for _ in range(3):
        assert storage.set_role_rules("ns", "worker-parent", with_kid)
    assert api.sent.count(("PATCH", "roles")) == 1
    assert storage.set_role_rules("ns", "worker-parent", role_rules("parent", "planner", []))
    assert api.sent.count(("PATCH", "roles")) == 2  # other rules: written


def test_a_process_remembers_a_bounded_number_of_roles(monkeypatch: Any) -> None:
    monkeypatch.setattr(repository, "ROLES_REMEMBERED", 2)
    api = _Api()
    storage = Storage(api)  # type: ignore[arg-type]
    rules = role_rules("w", "planner", ["kid"])
    for name in ("worker-a", "worker-b", "worker-c", "worker-a"):
        storage.set_role_rules("ns", name, rules)
    assert api.sent.count(("PATCH", "roles")) == 4  # worker-a forgotten: written again


def test_an_object_read_past_the_store_is_still_news_to_its_own_pass() -> None:
    """The e2e stall this round: a warm pool's pass read a new AgentConfig from the API
    (the store had not heard of it yet); its watch event then came as no news, and no pass
    ever cut its first revision."""
    config = {"metadata": {"name": "planner", "namespace": "ns", "resourceVersion": "7"}}

    class _Reads(_Api):
        def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
            self.sent.append(("GET", plural))
            return config

        def patch(self, plural: str, namespace: str, name: str, patch: Any, **_: Any) -> Any:
            self.sent.append(("PATCH", plural))
            return {**config, "metadata": {**config["metadata"], "resourceVersion": "8"}}

    store = Store(judged=frozenset({"agentconfigs"}))
    storage = Storage(_Reads(), store)  # type: ignore[arg-type]
    assert storage.get("agentconfigs", "ns", "planner") == config
    assert store.get("agentconfigs", "ns", "planner") is not None  # kept meanwhile
    store.observed("agentconfigs", config)
    assert store.news("agentconfigs", "ns", "planner")
    # A write's echo, though, is no news: its pass has seen it.
    assert storage.patch_status("agentconfigs", "ns", "planner", {"x": 1}) == "8"
    store.observed(
        "agentconfigs", {**config, "metadata": {**config["metadata"], "resourceVersion": "8"}}
    )
    assert not store.news("agentconfigs", "ns", "planner")
