"""The Event recorder posts each Event once, however often a pass reaches it again."""

from __future__ import annotations

from typing import Any

from agentworkers.errors import ApiError
from agentworkers.kube.events import Recorder


class Posts:
    """Stands in for kube.api.Api: records what would be posted; fails while `down`."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.down = False

    def create(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise ApiError("cannot reach the API server: refused")
        self.events.append(body)
        return body


WORKER = {
    "apiVersion": "agentworkers.io/v1alpha1",
    "kind": "Worker",
    "metadata": {"name": "w1", "namespace": "team-a", "uid": "u1", "resourceVersion": "7"},
}


def recorder(posts: Posts, window: float = 600.0, size: int = 10_000) -> Recorder:
    return Recorder(posts, window=window, size=size)  # type: ignore[arg-type]


def test_a_repeated_event_is_posted_once() -> None:
    posts = Posts()
    events = recorder(posts)
    assert events.post(WORKER, "Warning", "PodLost", "pod w1 was deleted")
    # The pass ran again (a conflict on its status write) and reached the same decision.
    assert not events.post(WORKER, "Warning", "PodLost", "pod w1 was deleted")
    assert events.post(WORKER, "Warning", "Killed", "killed: stop")
    assert [(e["reason"], e["involvedObject"]["uid"]) for e in posts.events] == [
        ("PodLost", "u1"),
        ("Killed", "u1"),
    ]


def test_an_event_that_could_not_be_posted_is_tried_again() -> None:
    posts = Posts()
    events = recorder(posts)
    posts.down = True
    assert not events.post(WORKER, "Warning", "PodLost", "gone")  # logged, never raised
    posts.down = False
    assert events.post(WORKER, "Warning", "PodLost", "gone")
    assert len(posts.events) == 1


def test_it_remembers_a_bounded_number_for_a_bounded_time() -> None:
    posts = Posts()
    events = recorder(posts, size=2)
    for reason in ("A", "B", "C"):
        events.post(WORKER, "Normal", reason, "x")
    assert events.post(WORKER, "Normal", "A", "x")  # forgotten: the oldest went first
    expired = recorder(posts, window=0.0)
    expired.post(WORKER, "Normal", "D", "x")
    assert expired.post(WORKER, "Normal", "D", "x")
