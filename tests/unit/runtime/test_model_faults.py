"""The openai driver and the agent loop against a faulty model endpoint (127.0.0.1): the
short version of `bench/faults.py --only model`, and its stream faults one by one."""

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

from agentworkers.runtime.models import Message, ModelError, Params
from agentworkers.runtime.providers.openai_chat import OpenAIChat


@pytest.fixture
def endpoint() -> Iterator[FaultyModelEndpoint]:
    with FaultyModelEndpoint() as server:
        yield server


def client(url: str, timeout: float = 0.3, retries: int = 2) -> OpenAIChat:
    return OpenAIChat(url, "sk-test", "m", timeout=timeout, retries=retries, backoff=0.01)


def ask(model: OpenAIChat) -> str | None:
    return model.complete([Message("user", "hi")], [], Params()).content


def test_model_endpoint_faults_short() -> None:
    report = model_endpoint_faults(runs=12, seed=7)
    report.show()
    assert len(report.faults) > 12
    assert report.violations == {name: [] for name in MODEL_INVARIANTS}


def test_a_stream_cut_mid_body_is_retried(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("cut"), OK], tools=0)
    assert ask(client(endpoint.url("r"))) == "answer r"
    assert [a.fault.kind for a in endpoint.arrivals("r")] == ["cut", "ok"]


def test_a_stream_cut_every_time_fails_naming_it(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("cut")] * 3, tools=0)
    with pytest.raises(ModelError, match=r"cut its reply short \(connection lost: .*3 attempts"):
        ask(client(endpoint.url("r")))
    assert len(endpoint.arrivals("r")) == 3


def test_a_stream_that_stalls_times_out_and_is_retried(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("stall", seconds=2), OK], tools=0)
    started = time.monotonic()
    assert ask(client(endpoint.url("r"))) == "answer r"
    assert time.monotonic() - started < 1.5
    assert sum(a.delivered for a in endpoint.arrivals("r")) == USAGE


def test_a_slow_stream_succeeds_past_the_timeout(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("slow", seconds=0.15)], tools=0)
    started = time.monotonic()
    assert ask(client(endpoint.url("r"))) == "answer r"
    assert time.monotonic() - started > 0.3  # longer than the timeout, in one attempt
    assert len(endpoint.arrivals("r")) == 1


def test_a_silent_endpoint_fails_saying_it_did_not_answer(
    endpoint: FaultyModelEndpoint,
) -> None:
    endpoint.script("r", [Fault("hang", seconds=2)] * 2, tools=0)
    with pytest.raises(ModelError, match=r"did not answer within 0.3 s \(after 2 attempts\)"):
        ask(client(endpoint.url("r"), retries=1))


def test_retry_after_is_capped(endpoint: FaultyModelEndpoint) -> None:
    endpoint.script("r", [Fault("429", retry_after="3600"), OK], tools=0)
    model = OpenAIChat(endpoint.url("r"), None, "m", timeout=1, max_retry_after=0.5)
    started = time.monotonic()
    assert ask(model) == "answer r"
    assert 0.5 <= time.monotonic() - started < 2
