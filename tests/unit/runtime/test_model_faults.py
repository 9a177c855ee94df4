"""The model client and the agent loop against a faulty model endpoint (127.0.0.1): the
short version of `bench/faults.py --only model`, and the faults it found, one by one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from bench.fault_model_endpoint import (
    MODEL_INVARIANTS,
    OK,
    USAGE,
    Fault,
    FaultyModelEndpoint,
    model_endpoint_faults,
)

from agentworkers.runtime.models import Message, ModelError, OpenAIChatClient, Params


@pytest.fixture
def endpoint() -> Iterator[FaultyModelEndpoint]:
    with FaultyModelEndpoint() as server:
        yield server


def client(url: str, timeout: float = 0.3, retries: int = 2) -> OpenAIChatClient:
    return OpenAIChatClient(url, "sk-test", "m", timeout=timeout, retries=retries, backoff=0.01)


def ask(model: OpenAIChatClient) -> str | None:
    return model.complete([Message("user", "hi")], [], Params()).content


def test_model_endpoint_faults_short() -> None:
    report = model_endpoint_faults(runs=12, seed=7)
    report.show()
    assert len(report.faults) > 12
    assert report.violations == {name: [] for name in MODEL_INVARIANTS}


def test_a_reply_cut_mid_body_is_retried(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("cut"), OK], tools=0)
    assert ask(client(endpoint.url("r"))) == "answer r"
    assert [a.fault.kind for a in endpoint.arrivals("r")] == ["cut", "ok"]


def test_a_reply_cut_every_time_fails_naming_it(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("cut")] * 3, tools=0)
    with pytest.raises(ModelError, match=r"cut its reply short \(\d+ of \d+ bytes\)"):
        ask(client(endpoint.url("r")))
    assert len(endpoint.arrivals("r")) == 3


def test_a_reply_that_trickles_in_times_out_and_is_retried(
    endpoint: FaultyModelEndpoint,
) -> None:
    # A byte every 0.1 s: each read within the socket's 0.3 s, the whole reply ~15 s.
    endpoint.script("r", [Fault("drip", seconds=0.1), OK], tools=0)
    started = time.monotonic()
    assert ask(client(endpoint.url("r"))) == "answer r"
    assert time.monotonic() - started < 2
    assert sum(a.delivered for a in endpoint.arrivals("r")) == USAGE


def test_a_silent_endpoint_fails_saying_it_did_not_answer(
    endpoint: FaultyModelEndpoint,
) -> None:
    endpoint.script("r", [Fault("hang", seconds=2)] * 2, tools=0)
    with pytest.raises(ModelError, match=r"did not answer within 0.3 s \(after 2 attempts\)"):
        ask(client(endpoint.url("r"), retries=1))


def test_retry_after_is_capped(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("429", retry_after="3600"), OK], tools=0)
    sleeps: list[float] = []
    model = OpenAIChatClient(
        endpoint.url("r"), None, "m", timeout=1, sleep=sleeps.append, max_retry_after=0.5
    )
    assert ask(model) == "answer r"
    assert sleeps == [0.5]
