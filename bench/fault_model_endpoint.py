"""Model endpoint faults: the worker runtime against a faulty chat-completions server.

    python bench/faults.py --only model [--model-runs 40]

``FaultyModelEndpoint`` is a fake OpenAI-compatible chat-completions server on
127.0.0.1 (a random port), scripted per run and per request: each request a run makes
takes the next fault of that run's script (an ``ok`` once the script is spent). Replies
stream as the runtime asks (server-sent ``chat.completion.chunk`` events, usage last,
``tests/model_servers.py`` writes them):

- ``ok``: a reply with its usage (``PROMPT_TOKENS`` + ``COMPLETION_TOKENS``): a
  ``list_files`` call while the request carries fewer tool results than the run's
  ``tools``, then the run's answer (``answer <run>``), as a model would, whatever the
  retries before it;
- ``slow``: the same reply, its events ``seconds`` apart: each within the client's
  timeout, the whole past it (no fault for a streaming client: it must succeed);
- ``429``: Too Many Requests with a ``Retry-After``; ``500``; ``400`` (not retryable);
- ``hang``: no answer for ``seconds``, then the connection closed;
- ``cut``: a 200 whose stream stops half-way, the connection closed mid-body;
- ``stall``: a 200 whose stream stops half-way, then silence for ``seconds`` (past the
  client's timeout).

Each request's arrival (and when the server finished answering it) is recorded, so the
scenario can check the waits between attempts.

Scenario "model endpoint faults" (``model_endpoint_faults``) runs the real runtime, in
process: an ``AgentLoop`` with an ``OpenAIChat`` driver (the ``openai`` SDK) per run,
each against its own script of faults (within the retry bound, past it, a 400, a token
budget), all at once.
Invariants (all expected 0), checked on what a user sees (the status the loop reports,
its output or error) and on what the server saw:

- a run that did not end as its faults imply: Done with its answer when each call's
  faults are within the retry bound, Failed otherwise;
- a failure whose error does not name its cause (``HTTP 429``, ``HTTP 500``,
  ``HTTP 400``, ``did not answer within``, ``cut its reply short``, ``token_budget``);
- attempts other than the bound implies (a retryable fault not retried, a 400
  retried, more than ``retries`` retries in all, the SDK's and the runtime's);
- a retry sooner than its wait or much later (more than ``SLACK`` after it: a
  Retry-After past the cap not capped). The wait: the server's Retry-After, capped;
  else after a cut or a stall the runtime's backoff (doubling per cut of the call), else
  the SDK's (0.5 s doubling per retry of its request, less up to a quarter of jitter);
- tokens counted other than once per reply received (a retried call counted twice, a
  cut reply counted);
- a model call made after the run's token budget was spent;
- a run that did not end within its bound (a hung run).

Loopback only; bounded in count (``runs``) and time (each run's bound).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from bench.faults import Report  # noqa: E402
from tests.model_servers import Call, Turn, openai_chunks  # noqa: E402

from agentworkers.core.effective import EffectiveConfig  # noqa: E402
from agentworkers.runtime.events import EventBus  # noqa: E402
from agentworkers.runtime.loop import DONE, FAILED, AgentLoop  # noqa: E402
from agentworkers.runtime.providers.openai_chat import OpenAIChat  # noqa: E402
from agentworkers.runtime.tools import Sandbox, Toolbox  # noqa: E402

PROMPT_TOKENS = 100
COMPLETION_TOKENS = 20
USAGE = PROMPT_TOKENS + COMPLETION_TOKENS
PARTS = (PROMPT_TOKENS, COMPLETION_TOKENS)
SLACK = 1.0  # how much later than its wait a retry may come (a loaded machine)
EARLY = 0.02  # clock and scheduling tolerance for "sooner than its wait"
# A timeout runs on the client's clock, from when it sent its request: the server sees
# the request a little later (more so with every run at once).
EARLY_AFTER_TIMEOUT = 0.15

MODEL_INVARIANTS = (
    "run not ended as faults imply",
    "failure without its cause",
    "attempts not as bounded",
    "retry sooner than its wait",
    "retry far past its wait",
    "tokens not counted once",
    "call past the token budget",
    "run hung",
)
RETRYABLE = ("429", "500", "hang", "cut", "stall")
ANSWERS = ("ok", "slow")
CAUSES = {
    "429": "HTTP 429",
    "500": "HTTP 500",
    "400": "HTTP 400",
    "hang": "did not answer within",
    "stall": "cut its reply short",
    "cut": "cut its reply short",
    "budget": "token_budget",
}
# The openai SDK's own backoff (its _constants): 0.5 s doubling, at most 8 s, less up to
# a quarter of jitter.
SDK_BACKOFF, SDK_MAX_BACKOFF, SDK_JITTER = 0.5, 8.0, 0.25


@dataclass(frozen=True)
class Fault:
    kind: str  # ok, slow, 429, 500, 400, hang, cut, stall
    retry_after: str | None = None  # 429's Retry-After header
    seconds: float = 0.0  # hang, stall: how long; slow: the gap between events

    def __str__(self) -> str:
        if self.kind == "429" and self.retry_after is not None:
            return f"429 (Retry-After {self.retry_after})"
        if self.kind in ("hang", "stall", "slow"):
            return f"{self.kind} {self.seconds:g} s"
        return self.kind


OK = Fault("ok")


@dataclass
class Arrival:
    """One request as the server saw it."""

    at: float  # monotonic, when its connection was accepted
    fault: Fault
    call: int  # messages in the request: the same for a call's retries
    ended: float = 0.0  # when the server began its answer, or stopped it (cut, stall)
    delivered: int = 0  # tokens of a reply sent whole, else 0


@dataclass
class _Run:
    faults: list[Fault]
    tools: int
    arrivals: list[Arrival] = field(default_factory=list)


class FaultyModelEndpoint:
    """A chat-completions server on 127.0.0.1 that answers each run's requests with the
    faults of its script; ``url(run)`` is the run's base URL."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.started = time.monotonic()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                endpoint._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FaultyModelEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()  # hanging and stalling answers give up
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def script(self, run: str, faults: list[Fault], tools: int = 1) -> None:
        with self._lock:
            self._runs[run] = _Run(list(faults), tools)

    def url(self, run: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{run}/v1"

    def arrivals(self, run: str) -> list[Arrival]:
        with self._lock:
            return list(self._runs[run].arrivals)

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        accepted = self._server.accepted.pop(id(h.request), time.monotonic())
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        name = h.path.strip("/").split("/")[0]
        with self._lock:
            run = self._runs[name]
            fault = run.faults.pop(0) if run.faults else OK
            arrival = Arrival(accepted, fault, len(body["messages"]))
            run.arrivals.append(arrival)
        h.close_connection = True
        if fault.kind == "hang":
            self._stop.wait(fault.seconds)
            arrival.ended = time.monotonic()
            return  # closed without a word
        if fault.kind in ("429", "500", "400"):
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            arrival.ended = time.monotonic()
            _send(h, int(fault.kind), {"error": {"message": f"injected {fault}"}}, headers)
            return
        answered = sum(1 for m in body["messages"] if m["role"] == "tool")
        turn = (
            Turn(calls=(Call("list_files", "{}", f"call_{answered}"),), usage=PARTS)
            if answered < run.tools
            else Turn(text=f"answer {name}", usage=PARTS)
        )
        events = list(openai_chunks(turn, body["model"], True))
        half = len(events) // 2
        arrival.ended = time.monotonic()
        if not _stream_head(h):
            return
        for i, event in enumerate(events):
            if fault.kind in ("cut", "stall") and i == half:
                arrival.ended = time.monotonic()
                if fault.kind == "stall":
                    self._stop.wait(fault.seconds)
                return  # closed mid-body, without the last chunk
            if i and fault.kind == "slow" and self._stop.wait(fault.seconds):
                return
            # Counted before its last event goes: the client may act on it at once.
            arrival.delivered = USAGE if i == len(events) - 1 else 0
            data = event.encode()
            end = b"0\r\n\r\n" if i == len(events) - 1 else b""
            if not _write(h, b"%x\r\n%s\r\n%s" % (len(data), data, end)):
                arrival.delivered = 0
                return  # the client gave up: it hung up


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Every run connects at once: a backlog of 5 drops SYNs, and a client's connect
    # times out before the kernel tries again (an attempt the server never sees).
    request_queue_size = 1024

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.accepted: dict[int, float] = {}  # id(socket): when accepted

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        self.accepted[id(connection)] = time.monotonic()
        return connection, address


def _send_head(
    h: BaseHTTPRequestHandler, status: int, length: int, headers: dict[str, str]
) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(length))
    h.send_header("Connection", "close")
    for name, value in headers.items():
        h.send_header(name, value)
    h.end_headers()


def _stream_head(h: BaseHTTPRequestHandler) -> bool:
    """A 200 with a chunked event stream; False when the client hung up."""
    try:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()
    except OSError:
        return False
    return True


def _send(h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str]) -> bool:
    data = json.dumps(body).encode()
    try:
        _send_head(h, status, len(data), headers)
    except OSError:
        return False
    return _write(h, data)


def _write(h: BaseHTTPRequestHandler, data: bytes) -> bool:
    """False when the client hung up."""
    try:
        h.wfile.write(data)
        h.wfile.flush()
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Settings:
    """The clients' settings: ``timeout`` (of silence), ``retries`` (in all, per call),
    the runtime's ``backoff`` after a cut (doubling each cut) and the cap on a server's
    Retry-After."""

    timeout: float = 0.5
    retries: int = 3
    backoff: float = 0.05
    max_retry_after: float = 1.5

    def wait(self, after: Fault, sdk: int, cuts: int) -> tuple[float, float]:
        """The least and the most wait before the retry of a request that met ``after``,
        the SDK having retried ``sdk`` times since it opened its request and the runtime
        ``cuts`` times in this call."""
        if after.kind in ("cut", "stall"):
            ours = float(self.backoff * 2**cuts)
            return ours, ours
        if after.retry_after is not None:
            capped = min(float(after.retry_after), self.max_retry_after)
            return capped, capped
        most = min(SDK_BACKOFF * 2**sdk, SDK_MAX_BACKOFF)
        return most * (1 - SDK_JITTER), most

    def bound(self, faults: list[Fault], calls: int) -> float:
        """How long a run may take, at most: each fault's time and wait, and its calls."""
        most_wait = max(self.max_retry_after, SDK_MAX_BACKOFF, self.backoff * 2**self.retries)
        spent = sum(self.timeout + most_wait + 10 * f.seconds for f in faults)
        return float(spent + calls * self.timeout + 5)


@dataclass(frozen=True)
class Plan:
    """One run: its faults, its tool calls (its answer takes ``tools + 1`` model calls),
    its token budget (0: none)."""

    name: str
    faults: list[Fault]
    tools: int = 1
    budget: int = 0

    def expected(self, retries: int) -> tuple[str, str, int, int]:
        """(status, the failure's cause or the answer, requests made, tokens counted),
        as the runtime's contract says."""
        faults, requests, tokens, replies = list(self.faults), 0, 0, 0
        while True:
            if self.budget and tokens >= self.budget:
                return FAILED, CAUSES["budget"], requests, tokens
            for attempt in range(retries + 1):
                fault = faults.pop(0) if faults else OK
                requests += 1
                if fault.kind in ANSWERS:
                    break
                if fault.kind not in RETRYABLE or attempt == retries:
                    return FAILED, CAUSES[fault.kind], requests, tokens
            tokens += USAGE
            replies += 1
            if self.budget and tokens > self.budget:
                return FAILED, CAUSES["budget"], requests, tokens
            if replies > self.tools:
                return DONE, f"answer {self.name}", requests, tokens


def plans(runs: int, settings: Settings, rng: random.Random) -> list[Plan]:
    """``runs`` runs: most with retryable faults within the bound before each call, some
    past it (retries + 1 in a row), a few with a 400, a few with a token budget that
    retried calls must not spend."""

    def make(kind: str) -> Fault:
        if kind == "429":
            return Fault("429", rng.choice(["1", "3600", None]))
        if kind in ("hang", "stall"):
            return Fault(kind, seconds=settings.timeout * 3)
        if kind == "slow":
            return Fault("slow", seconds=settings.timeout * 0.6)
        return Fault(kind)

    def fault() -> Fault:
        return make(rng.choice(RETRYABLE))

    def within(calls: int) -> list[Fault]:
        faults: list[Fault] = []
        for _ in range(calls):
            answer = make("slow") if rng.random() < 0.2 else OK
            faults += [fault() for _ in range(rng.randint(0, settings.retries))] + [answer]
        return faults

    out = []
    kinds = ["within", "past", "400", "budget"]
    for i in range(runs):
        name = f"run-{i:03d}"
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds + ["within"] * 3)
        if kind == "within":
            out.append(Plan(name, within(2)))
        elif kind == "past":
            # The first call's faults past the bound, each kind in turn over the runs.
            past = make(RETRYABLE[(i // len(kinds)) % len(RETRYABLE)])
            out.append(Plan(name, [past] * (settings.retries + 1)))
        elif kind == "400":
            out.append(Plan(name, [*within(1), Fault("400")]))
        else:
            # Three calls' worth of replies, a budget of two and a half: the third call
            # passes it (and fails the run); its retries must not count.
            out.append(Plan(name, within(3), tools=2, budget=USAGE * 5 // 2))
    return out


def model_endpoint_faults(
    runs: int = 40, seed: int | None = None, settings: Settings | None = None
) -> Report:
    """``runs`` runs of the real agent loop and OpenAI client, each against its own script
    of model endpoint faults, all at once; the invariants in the module docstring."""
    settings = settings or Settings()
    seed = random.randrange(2**32) if seed is None else seed
    workload = plans(runs, settings, random.Random(seed))
    injected = sum(1 for p in workload for f in p.faults if f.kind not in ANSWERS)
    report = Report(
        "model endpoint faults",
        f"{runs} runs of the agent loop (seed {seed}), {injected} faults (429, 500, 400, "
        f"hang, cut, stall, slow), {settings.retries} retries, timeout {settings.timeout:g} s",
        MODEL_INVARIANTS,
    )
    ends: dict[str, float] = {}
    with FaultyModelEndpoint() as endpoint, tempfile.TemporaryDirectory() as sandbox:
        for plan in workload:
            endpoint.script(plan.name, plan.faults, plan.tools)

        def run(plan: Plan) -> None:
            _run(endpoint, plan, settings, sandbox, report)
            ends[plan.name] = time.monotonic()

        with ThreadPoolExecutor(min(32, max(1, runs))) as pool:
            for future in [pool.submit(run, p) for p in workload]:
                future.result()
        served = [
            (a.at, a, p.name)
            for p in workload
            for a in endpoint.arrivals(p.name)
            if a.fault.kind not in ANSWERS
        ]
        served.sort(key=lambda s: s[0])
        report.faults = [
            f"{a.fault} to {n} at {a.at - endpoint.started:.1f} s" for _, a, n in served
        ]
        last_fault = max((s[0] for s in served), default=endpoint.started)
        report.converged_seconds = max(ends.values(), default=last_fault) - last_fault
    return report


def _run(
    endpoint: FaultyModelEndpoint, plan: Plan, s: Settings, sandbox: str, report: Report
) -> None:
    v = report.violations
    config = EffectiveConfig(
        agent="faults",
        provider="openai",
        model="fake",
        tools=("list_files",),
        token_budget=plan.budget,
    )
    client = OpenAIChat(
        endpoint.url(plan.name),
        "sk-faults",
        "fake",
        timeout=s.timeout,
        retries=s.retries,
        backoff=s.backoff,
        max_retry_after=s.max_retry_after,
    )
    statuses: list[tuple[str, str | None, str | None]] = []
    usage: list[int] = []
    loop = AgentLoop(
        config,
        client,
        Toolbox.for_config(config, Sandbox(sandbox).tools()),
        EventBus(plan.name),
        lambda *status: statuses.append(status),
    )
    loop.on_usage = lambda prompt, completion: usage.append(prompt + completion)
    status, cause, requests, tokens = plan.expected(s.retries)
    bound = s.bound(plan.faults, plan.tools + 1)
    loop.send("go")
    try:
        loop.finish(timeout=bound)
    except TimeoutError:
        v["run hung"].append(f"{plan.name}: not ended within {bound:.1f} s")
        loop.close(timeout=0)
        return
    seen, output, error = statuses[-1] if statuses else ("", None, None)
    faults = ", ".join(map(str, plan.faults)) or "none"
    if seen != status or (status == DONE and output != cause):
        v["run not ended as faults imply"].append(
            f"{plan.name} ({faults}): {seen} {output or error!r}, expected {status} {cause!r}"
        )
    elif status == FAILED and cause not in (error or ""):
        v["failure without its cause"].append(f"{plan.name}: {error!r}, expected {cause!r}")
    arrivals = endpoint.arrivals(plan.name)
    if len(arrivals) != requests:
        v["attempts not as bounded"].append(
            f"{plan.name} ({faults}): {len(arrivals)} requests, expected {requests}"
        )
    _check_waits(plan.name, arrivals, s, report)
    delivered = sum(a.delivered for a in arrivals)
    if not loop.tokens == delivered == tokens or (usage and usage[-1] != loop.tokens):
        v["tokens not counted once"].append(
            f"{plan.name}: counted {loop.tokens} (reported {usage[-1:]}), "
            f"replies received {delivered}, expected {tokens}"
        )
    spent = 0
    for a in arrivals:
        if plan.budget and spent >= plan.budget:
            v["call past the token budget"].append(
                f"{plan.name}: a call after {spent} of {plan.budget} tokens"
            )
        spent += a.delivered


def _check_waits(name: str, arrivals: list[Arrival], s: Settings, report: Report) -> None:
    """Each retry (a request of the same call as the one before) comes no sooner than its
    wait after the failed attempt, and not much later."""
    attempt = sdk = cuts = 0
    for before, after in itertools.pairwise(arrivals):
        if after.call != before.call or before.fault.kind in ANSWERS:
            attempt = sdk = cuts = 0
            continue
        least, most = s.wait(before.fault, sdk, cuts)
        if before.fault.kind in ("cut", "stall"):
            cuts, sdk = cuts + 1, 0  # the runtime opens a new request: the SDK's count anew
        else:
            sdk += 1
        # A hang fails when the client's timeout runs out after its request, a stall
        # after its last event; the rest at once.
        timed_out = before.fault.kind in ("hang", "stall")
        failed = (before.at if before.fault.kind == "hang" else before.ended) + (
            s.timeout if timed_out else 0
        )
        gap = after.at - failed
        what = (
            f"{name}: retry {attempt + 1} {gap:.2f} s after {before.fault}, "
            f"wait {least:.2f}-{most:.2f} s"
        )
        if gap < least - (EARLY_AFTER_TIMEOUT if timed_out else EARLY):
            report.violations["retry sooner than its wait"].append(what)
        elif gap > most + SLACK:
            report.violations["retry far past its wait"].append(what)
        attempt += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    report = model_endpoint_faults(args.runs, args.seed)
    report.show()
    print(json.dumps({"clean": report.clean}))
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
