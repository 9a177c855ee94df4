"""Fake model endpoints on loopback that speak the vendors' wire protocols, for tests.

``ModelServer`` is one HTTP server on 127.0.0.1 (a random port) that answers

- ``POST /v1/chat/completions``: OpenAI's chat completions: a ``chat.completion`` JSON
  object, or with ``"stream": true`` server-sent events of ``chat.completion.chunk``
  objects (role, content and tool-call deltas, the choice's ``finish_reason``, a last
  chunk with ``usage`` and no choices when ``stream_options.include_usage`` asks for it),
  then ``data: [DONE]``;
- ``POST /v1/messages``: Anthropic's Messages API: a ``message`` JSON object, or with
  ``"stream": true`` its event stream: ``message_start``, per content block
  ``content_block_start`` / ``content_block_delta`` (``text_delta``, ``thinking_delta``
  and ``signature_delta``, ``input_json_delta``) / ``content_block_stop``, a ``ping``,
  ``message_delta`` (stop reason and usage) and ``message_stop``;

as the vendors document them. Point the ``openai`` SDK at ``openai_url`` and the
``anthropic`` SDK at ``anthropic_url``.

Each request takes the next ``Turn`` of ``turns`` (a reply, told once for both
protocols), else asks ``respond`` (a function of the request's JSON body). A turn can
also be a fault: an HTTP error status with the vendor's error body and headers, silence
before any answer (``hang``), a stream cut after some events (``cut_after``: the
connection closed mid-body, or with ``clean_cut`` the body ended before the stream's last
event), silence mid-stream (``stall``), or events spaced out (``gap``). Streams come in
a chunked body on a kept-alive connection, as real servers send them. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNATURE = "sig-" + "0" * 16  # a thinking block's signature, to be given back verbatim


@dataclass(frozen=True)
class Call:
    """One tool call of a reply: ``arguments`` as the raw JSON text the model wrote."""

    name: str
    arguments: str = "{}"
    id: str = ""


@dataclass(frozen=True)
class Turn:
    """One answer. ``finish``: the vendor's word (``stop``, ``length``, ``content_filter``
    / ``end_turn``, ``max_tokens``, ``refusal``...), by default the one that fits
    (tool calls or a plain answer). ``usage``: (prompt, completion), None to send none."""

    text: str | None = None
    calls: tuple[Call, ...] = ()
    thinking: str | None = None
    finish: str | None = None
    usage: tuple[int, int] | None = (11, 7)
    refusal: str | None = None  # OpenAI's delta.refusal
    status: int = 200
    error: str = "injected"
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0  # seconds of silence before anything
    cut_after: int | None = None  # events sent before the connection closes
    stall: float = 0.0  # seconds of silence at cut_after, before closing
    clean_cut: bool = False  # at cut_after, end the body properly (else break it)
    gap: float = 0.0  # seconds between events


@dataclass
class Seen:
    """One request: ``headers`` with lower-case names."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    port: int  # the client's: one per connection


class ModelServer:
    """The fake endpoints (see the module docstring). A context manager."""

    def __init__(self, respond: Callable[[dict[str, Any]], Turn] | None = None) -> None:
        self.turns: list[Turn] = []
        self.respond = respond
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                server._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [s.body for s in self.seen]

    def _next(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            if self.turns:
                return self.turns.pop(0)
        if self.respond is None:
            return Turn(status=500, error="no turn left")
        return self.respond(body)

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        with self._lock:
            headers = {k.lower(): v for k, v in h.headers.items()}
            self.seen.append(Seen(h.path, headers, body, h.client_address[1]))
        turn = self._next(body)
        anthropic = h.path.rstrip("/").endswith("/messages")
        if turn.hang:
            self._stop.wait(turn.hang)
            h.close_connection = True
            return  # closed without a word
        if turn.status != 200:
            _json(h, turn.status, _error(anthropic, turn), turn.headers)
            return
        model = body.get("model", "")
        if not body.get("stream"):
            reply = (
                _anthropic_message(turn, model) if anthropic else _openai_completion(turn, model)
            )
            _json(h, 200, reply, turn.headers)
            return
        events = (
            _anthropic_events(turn, model)
            if anthropic
            else openai_chunks(turn, model, (body.get("stream_options") or {}).get("include_usage"))
        )
        self._stream(h, turn, events)

    def _stream(self, h: BaseHTTPRequestHandler, turn: Turn, events: Iterator[str]) -> None:
        """Server-sent events in a chunked body, the connection kept for the next request
        as a real server does; a cut closes it without the last chunk."""
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        for name, value in turn.headers.items():
            h.send_header(name, value)
        h.end_headers()
        try:
            events = list(events)
            for sent, event in enumerate(events):
                if turn.cut_after is not None and sent >= turn.cut_after:
                    h.wfile.flush()
                    self._stop.wait(turn.stall)
                    if turn.clean_cut:  # the body ends well, the stream too soon
                        h.wfile.write(b"0\r\n\r\n")
                    h.close_connection = True
                    return
                if sent and turn.gap and self._stop.wait(turn.gap):
                    return
                data = event.encode()
                # The last event and the body's end in one write, as a buffered server
                # sends them.
                end = b"0\r\n\r\n" if sent == len(events) - 1 else b""
                h.wfile.write(b"%x\r\n%s\r\n%s" % (len(data), data, end))
                h.wfile.flush()
        except OSError:
            h.close_connection = True  # the client hung up


def _json(h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    try:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)
    except OSError:
        pass


def _error(anthropic: bool, turn: Turn) -> dict[str, Any]:
    if anthropic:
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(turn.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": turn.error}}
    return {"error": {"message": turn.error, "type": "server_error", "code": None}}


# --- OpenAI chat completions -----------------------------------------------------------


def _openai_finish(turn: Turn) -> str:
    return turn.finish or ("tool_calls" if turn.calls else "stop")


def _call_id(call: Call, i: int) -> str:
    return call.id or f"call_{i}"


def _openai_usage(turn: Turn) -> dict[str, int] | None:
    if turn.usage is None:
        return None
    prompt, completion = turn.usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _openai_completion(turn: Turn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.refusal:
        message["refusal"] = turn.refusal
    if turn.thinking:
        message["reasoning_content"] = turn.thinking
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": _call_id(c, i),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(turn.calls)
        ]
    reply: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(turn)}],
    }
    if (usage := _openai_usage(turn)) is not None:
        reply["usage"] = usage
    return reply


def openai_chunks(turn: Turn, model: str, include_usage: bool) -> Iterator[str]:
    """A turn as chat.completion.chunk events (``data: ...`` lines), ``[DONE]`` last."""
    created = int(time.time())

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(data)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.thinking):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(turn.text):
        yield chunk({"content": piece})
    for piece in _pieces(turn.refusal):
        yield chunk({"refusal": piece})
    for i, call in enumerate(turn.calls):
        head = {"index": i, "id": _call_id(call, i), "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, _openai_finish(turn))
    if include_usage and (usage := _openai_usage(turn)) is not None:
        yield chunk(None, usage=usage)
    yield "data: [DONE]\n\n"


def _pieces(text: str | None, size: int = 8) -> list[str]:
    """Text in small deltas, as a model streams it."""
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


# --- Anthropic Messages ----------------------------------------------------------------


def _anthropic_stop(turn: Turn) -> str:
    return turn.finish or ("tool_use" if turn.calls else "end_turn")


def _anthropic_blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking:
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": SIGNATURE})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    for i, call in enumerate(turn.calls):
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{i}",
                "name": call.name,
                "input": call.arguments,  # raw: decoded (or not) by the caller
            }
        )
    return blocks


def _anthropic_message(turn: Turn, model: str) -> dict[str, Any]:
    content = [
        {**b, "input": json.loads(b["input"])} if b["type"] == "tool_use" else b
        for b in _anthropic_blocks(turn)
    ]
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _anthropic_stop(turn),
        "stop_sequence": None,
    }
    if turn.usage is not None:
        message["usage"] = {"input_tokens": turn.usage[0], "output_tokens": turn.usage[1]}
    return message


def _anthropic_events(turn: Turn, model: str) -> Iterator[str]:
    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

    start: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    if turn.usage is not None:
        start["usage"] = {"input_tokens": turn.usage[0], "output_tokens": 1}
    yield event("message_start", {"message": start})
    for index, block in enumerate(_anthropic_blocks(turn)):
        kind = block["type"]
        if kind == "thinking":
            empty: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            empty = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        else:
            empty = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(block["input"])
            ]
        yield event("content_block_start", {"index": index, "content_block": empty})
        if index == 0:
            yield event("ping", {})
        for delta in deltas:
            yield event("content_block_delta", {"index": index, "delta": delta})
        yield event("content_block_stop", {"index": index})
    delta: dict[str, Any] = {
        "delta": {"stop_reason": _anthropic_stop(turn), "stop_sequence": None},
    }
    if turn.usage is not None:
        delta["usage"] = {"output_tokens": turn.usage[1]}
    yield event("message_delta", delta)
    yield event("message_stop", {})
