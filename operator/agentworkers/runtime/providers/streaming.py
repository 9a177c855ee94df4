"""What the two SDK drivers share: one streamed call, its retries and its errors' words.

Each vendor's SDK opens the stream: it retries 408, 409, 429 and 5xx answers, timeouts
and refused connections itself (with its backoff and jitter, honouring a Retry-After).
The call's requests, the SDK's and these retries together, are at most ``retries + 1``.
A Retry-After longer than ``max_retry_after`` (30 s) is cut to it before the SDK reads
it (the anthropic SDK would wait for any, an hour included): a worker waits its turn,
not its deadline. Once a stream has begun the SDK
retries nothing, so a stream cut mid-reply (the connection lost, silence past the
timeout, the body ended before its last event) is retried here, up to the same bound,
the wait doubling from ``backoff``. The error after the last attempt says what
happened, in the same words for every provider: ``returned HTTP 503``, ``did not
answer within 120 s``, ``unreachable``, ``cut its reply short``, with the number of
HTTP requests the call made when more than one.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import httpx2

from agentworkers.runtime.models import BODY_EXCERPT, ModelError, Reply

T = TypeVar("T")
MAX_RETRY_AFTER = 30.0


class StreamCut(Exception):
    """The stream ended before its reply's last event."""


@dataclass(frozen=True)
class SdkErrors:
    """One SDK's exception classes (openai and anthropic have twins of each)."""

    status: type[Exception]  # APIStatusError: an HTTP error status
    timeout: type[Exception]  # APITimeoutError (a subclass of connection)
    connection: type[Exception]  # APIConnectionError
    api: type[Exception]  # APIError: any other, e.g. an error event mid-stream


class Attempts:
    """The SDK's httpx hooks: count one call's HTTP requests, the SDK's retries included
    (it does not say how often it retried), and cap a Retry-After."""

    def __init__(self, max_retry_after: float) -> None:
        self.count = 0
        self.max_retry_after = max_retry_after

    def hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        return {"request": [self._request], "response": [self._response]}

    def _request(self, _request: httpx2.Request) -> None:
        self.count += 1

    def _response(self, response: httpx2.Response) -> None:
        for name, unit in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
            try:
                wait = float(response.headers.get(name, "")) / unit
            except ValueError:
                continue  # absent, or an HTTP date
            if wait > self.max_retry_after:
                response.headers[name] = f"{self.max_retry_after * unit:g}"

    def said(self) -> str:
        return f" (after {self.count} attempts)" if self.count > 1 else ""


class StreamedCall:
    """Runs one model call: ``start`` opens the stream (the SDK retrying), ``collect``
    reads it to a Reply (raising StreamCut or the SDK's errors when it breaks). A stream
    cut is retried after ``backoff``, doubling with each cut of the call."""

    def __init__(
        self,
        url: str,
        errors: SdkErrors,
        timeout: float,
        retries: int,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        max_retry_after: float = MAX_RETRY_AFTER,
    ) -> None:
        self.url = url
        self.attempts = Attempts(max_retry_after)
        self._errors = errors
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._sleep = sleep

    def __call__(self, start: Callable[[int], T], collect: Callable[[T], Reply]) -> Reply:
        """``start(retries)``: open the stream, the SDK retrying at most ``retries`` times,
        what is left of the call's bound (its requests so far count against it)."""
        self.attempts.count = 0
        e = self._errors
        for cut in itertools.count():
            try:
                stream = start(max(self._retries - self.attempts.count, 0))
            except e.status as error:
                raise self._status_error(error) from error
            except e.timeout as error:
                raise self._error(f"did not answer within {self._timeout:g} s") from error
            except e.connection as error:
                raise self._error(f"unreachable: {_cause(error)}") from error
            try:
                return collect(stream)
            # Mid-stream, which the SDK retries never: a cut, a transport error (the
            # anthropic SDK lets httpx's through), an error event (e.g. overloaded).
            except (StreamCut, httpx2.TransportError, e.api) as error:
                if self.attempts.count > self._retries:
                    raise self._error(f"cut its reply short ({self._cut(error)})") from error
                self._sleep(self._backoff * 2**cut)
        raise AssertionError("unreachable: the loop returns or raises")

    def _error(self, what: str, status: int | None = None, body: str = "") -> ModelError:
        return ModelError(f"model endpoint {self.url} {what}{self.attempts.said()}", status, body)

    def _status_error(self, error: Exception) -> ModelError:
        status = int(getattr(error, "status_code", 0))
        body = getattr(error, "body", None)
        text = json.dumps(body) if body is not None else str(error)
        response = getattr(error, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        wait = f" (Retry-After {retry_after})" if retry_after else ""
        return ModelError(
            f"model endpoint {self.url} returned HTTP {status}{wait}{self.attempts.said()}: "
            f"{text[:BODY_EXCERPT]}",
            status=status,
            body=text,
        )

    def _cut(self, error: Exception) -> str:
        if isinstance(error, StreamCut):
            return str(error)
        if isinstance(error, self._errors.timeout | httpx2.TimeoutException):
            return f"nothing for {self._timeout:g} s mid-reply"
        if isinstance(error, self._errors.connection | httpx2.TransportError):
            return f"connection lost: {_cause(error)}"
        return f"an error event: {str(error)[:BODY_EXCERPT]}"


class SdkModel:
    """What the two SDK drivers set up alike: the endpoint (`DEFAULT_URL` when the config
    names none), the model, one `StreamedCall` to `PATH`, and the vendor's SDK client
    (`SDK`, on an httpx client `HTTPX` with the call's hooks), retrying as the call says.
    `_sdk_key`: the key as the SDK takes it."""

    DEFAULT_URL: ClassVar[str]
    PATH: ClassVar[str]
    ERRORS: ClassVar[SdkErrors]
    SDK: ClassVar[Callable[..., Any]]
    HTTPX: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        max_retry_after: float = MAX_RETRY_AFTER,
    ) -> None:
        self.base_url = (base_url or self.DEFAULT_URL).rstrip("/")
        self.model = model
        self._call = StreamedCall(
            f"{self.base_url}{self.PATH}",
            self.ERRORS,
            timeout,
            retries,
            backoff,
            sleep,
            max_retry_after,
        )
        self._api_key = api_key
        self._sdk = self.SDK(
            api_key=self._sdk_key(api_key),
            base_url=self.base_url,
            timeout=timeout,
            max_retries=retries,
            http_client=self.HTTPX(event_hooks=self._call.attempts.hooks()),
        )

    @staticmethod
    def _sdk_key(api_key: str | None) -> str | None:
        return api_key


def _cause(error: BaseException) -> str:
    """The transport's own words under the SDK's generic "Connection error."."""
    cause = error if isinstance(error, httpx2.TransportError) else error.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
