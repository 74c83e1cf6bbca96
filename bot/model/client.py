"""The LLM client: `openai.AsyncOpenAI` against any OpenAI-compatible `llm.base_url`.

We retry ourselves (tenacity) instead of letting the openai client do it, so the attempt
count, the backoff and the Retry-After cap are ours and the retries never multiply: the
client is built with `max_retries=0`. Retried: 429, 5xx, 408/409, timeouts, connection
errors and bodies that are not JSON (a proxy's HTML error page; openai raises a plain
JSON error for those, not an `APIError`). Anything else (400, 401, 403, 404) fails at once,
and so does a 5xx whose message says the request is not supported (an image sent to a
text-only model): it would fail the same way every time. The server's message is kept
(`LLMError.detail`, masked and cut to a line) and logged: it is what an operator needs.

Bounds: every call asks for at most `llm.*max_tokens` tokens of answer, and has a wall
clock deadline (`llm.answer_deadline_s`, or the turn's, `turn_deadline`, if sooner): a
server can stream for ever, and `timeout_s` is per read. At the deadline the text
streamed so far is the answer, with a note that it was cut off; nothing streamed is an
LLMError. A call cut off (by the deadline or an error mid-stream) still records its
usage, estimated.

Requests go through the client's generic `post` rather than `chat.completions.create`:
`create` walks the whole request (every message, every tool schema) through openai's
TypedDict transformer, which changes nothing for plain JSON like ours and was half of
the call's CPU. Chunks likewise stay the JSON dicts they arrive as instead of being
built into models (openai's stream still turns an `error` event into an `APIError`). And
the HTTP transport is aiohttp's (openai's own `DefaultAioHttpClient`) rather than the
default pure-Python one, which took twice the CPU per call under concurrency; aiohttp is
a dependency of ours anyway. Figures: bench/RESULTS.md (throughput rounds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import openai
from openai import AsyncStream
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from bot.config.settings import LLMSettings
from bot.model.alternation import alternating
from bot.runtime.metrics import record_llm_call, record_usage_row
from bot.runtime.redact import scrub, secret_values
from memory.contract.types import Message, ToolCall
from memory.storage.usage import TokenUsage, UsageRecorder, kind_from_context
from memory.text.server_error import not_supported, server_message
from memory.text.server_url import server_url
from memory.text.tokens import Calibration, estimate_tokens, request_tokens

__all__ = ["AssistantTurn", "LLMClient", "LLMError", "MissingApiKey", "TokenUsage"]

log = logging.getLogger(__name__)

OnDelta = Callable[[str], Awaitable[None]]

RETRY_AFTER_CAP_S = 30.0
# Transcription time allowed per MB of audio (beyond `timeout_s`): 20 MB -> 300 s.
TRANSCRIBE_S_PER_MB = 15.0
# `object`: openai hands each chunk over as parsed JSON, unconverted.
_CHUNKS = AsyncStream[object]
# What `create` sends: bearer auth only (the client's default would also try admin keys).
_OPTIONS: openai.RequestOptions = {"security": {"bearer_auth": True}}
_RETRY_STATUS = {408, 409, 429}
# The loop time by which the current chat turn must end (set by `turn_deadline`).
_turn_deadline: ContextVar[float | None] = ContextVar("mnemo_turn_deadline", default=None)
# What a cut-off answer ends with, for the user and the model's next turn alike; in
# parentheses, as a bracket holding a number would read as a citation (memory.actions.citations).
CUT_NOTE = "(cut off: the answer took longer than {seconds:g} s)"


@contextlib.contextmanager
def turn_deadline(seconds: float) -> Iterator[None]:
    """Model calls in this block end within `seconds` from now, all of them together."""
    token = _turn_deadline.set(asyncio.get_running_loop().time() + seconds)
    try:
        yield
    finally:
        _turn_deadline.reset(token)


class MissingApiKey(RuntimeError):
    """No API key configured; the message names the variable to set."""


class LLMError(RuntimeError):
    """The model could not be reached or refused; `reason` is one short plain line."""

    def __init__(
        self, reason: str, *, attempts: int = 1, retryable: bool = False, detail: str = ""
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts
        self.retryable = retryable
        # The server's own message (one line, secrets masked): for logs, not users.
        self.detail = detail

    def described(self) -> str:
        """The reason with the server's message, for logs and operators."""
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


@dataclass
class AssistantTurn:
    """One model answer: text and/or tool calls. `usage` is the server's report as sent
    (None when it sent none); `tokens` the counts read from it."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    # Set by the client: the report read, or our estimate when the server sent none.
    accounted: TokenUsage | None = None

    @property
    def tokens(self) -> TokenUsage:
        return self.accounted if self.accounted is not None else TokenUsage.from_report(self.usage)

    def to_message(self) -> Message:
        return Message(
            role="assistant",
            content=self.content,
            tool_calls=list(self.tool_calls),
            reasoning=self.reasoning,
        )


def _default_http_client() -> Any:
    """openai's aiohttp transport, or None (openai's default) where it is unavailable."""
    factory = getattr(openai, "DefaultAioHttpClient", None)
    if factory is None:
        return None
    try:
        return factory()
    except RuntimeError:  # an openai without its aiohttp transport installed
        return None


def require_api_key(settings: LLMSettings) -> None:
    """Fail at startup, with the variable to set, rather than on the first message.
    Credentials in `llm.base_url` are the request's authentication: no key needed."""
    if server_url(settings.base_url).basic_auth:
        if settings.api_key.get_secret_value().strip():
            log.warning(
                "llm.base_url carries a user and password: they are sent as HTTP Basic "
                "auth, and llm.api_key is not sent (a request has one Authorization header)"
            )
        return
    if not settings.api_key.get_secret_value().strip():
        raise MissingApiKey(
            "no LLM API key: set OPENAI_API_KEY (or llm.api_key in the config); "
            "a local OpenAI-compatible server accepts any non-empty key"
        )


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, LLMError) and exc.retryable


def _retry_after(exc: BaseException | None) -> float | None:
    response = getattr(getattr(exc, "__cause__", None), "response", None)
    if response is None:
        return None
    raw = response.headers.get("retry-after-ms")
    try:
        if raw is not None:
            return float(raw) / 1000
        raw = response.headers.get("retry-after")
        return float(raw) if raw is not None else None
    except ValueError:  # an HTTP date: rare from model APIs, fall back to our backoff
        return None


def _timed_out(exc: BaseException) -> bool:
    """openai's aiohttp transport reports every aiohttp connection error, a refused
    connection included, as a connect *timeout*: ask what aiohttp itself raised."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError):
            return isinstance(cause, aiohttp.ServerTimeoutError | TimeoutError)
        cause = cause.__cause__
    return True


def _translate(exc: BaseException, secrets: tuple[str, ...] = ()) -> LLMError:
    """Map whatever the openai client raised to an LLMError with a plain reason (and the
    server's message, `secrets` masked, as its detail)."""
    if isinstance(exc, openai.APITimeoutError) and _timed_out(exc):
        return LLMError("the language model timed out", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return LLMError("the language model could not be reached", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = server_message(exc, secrets)
        if status == 429:
            return LLMError(
                "the language model is rate-limiting us (HTTP 429)", retryable=True, detail=detail
            )
        if status in (401, 403):
            return LLMError(
                f"the language model refused our API key (HTTP {status})", detail=detail
            )
        if status == 404:
            return LLMError(
                "the language model or endpoint was not found (HTTP 404)", detail=detail
            )
        if not_supported(detail):
            return LLMError(
                f"the language model cannot handle this request (HTTP {status})", detail=detail
            )
        if 400 <= status < 500 and status not in _RETRY_STATUS:
            return LLMError(
                f"the language model refused the request (HTTP {status})", detail=detail
            )
        return LLMError(
            f"the language model answered HTTP {status}",
            retryable=status >= 500 or status in _RETRY_STATUS,
            detail=detail,
        )
    if isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError):
        return LLMError("the language model sent a malformed answer", retryable=True)
    if isinstance(exc, openai.APIError):
        # Errors inside a stream (an `error` event) arrive as a bare APIError.
        detail = server_message(exc, secrets)
        return LLMError(
            "the language model failed mid-answer",
            retryable=not not_supported(detail),
            detail=detail,
        )
    raise exc


class LLMClient:
    """`complete` (streaming, tools) for the chat; `generate` (one prompt) for summaries;
    `transcribe` for voice messages."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        http_client: Any = None,
        backoff_s: float = 0.5,
        backoff_cap_s: float = 8.0,
        usage: UsageRecorder | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.settings = settings
        # Where each call's tokens go (the database, through the app's recorder; by
        # default only the metrics), and what learns the estimate's error per model.
        self.usage = usage or UsageRecorder(observers=[record_usage_row])
        self.calibration = calibration or Calibration()
        self.backoff_s = backoff_s
        self.backoff_cap_s = backoff_cap_s
        url = server_url(settings.base_url)
        self._client = openai.AsyncOpenAI(
            base_url=url.base_url,
            # A local server needs some key; a missing real key is caught by require_api_key.
            api_key=settings.api_key.get_secret_value() or "unset",
            default_headers=url.headers,  # Basic auth from the URL replaces the key
            timeout=settings.timeout_s,
            max_retries=0,
            http_client=http_client if http_client is not None else _default_http_client(),
        )
        # Masked in the server's error messages (the log record factory masks the
        # installed ones again; `doctor` and tests print them without it).
        self._secrets = secret_values(settings.api_key.get_secret_value(), *url.secrets)
        self._token_param = "max_tokens"  # or max_completion_tokens: _renamed_bound

    async def close(self) -> None:
        await self._client.close()

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = _retry_after(exc)
        if hinted is not None:
            return max(0.0, min(hinted, RETRY_AFTER_CAP_S))
        base = min(self.backoff_cap_s, self.backoff_s * 2 ** (state.attempt_number - 1))
        return base * (0.5 + random.random() / 2)  # jitter: replicas must not retry in step

    async def _with_retries(self, call: Callable[[], Awaitable[Any]]) -> Any:
        attempts = self.settings.max_retries + 1
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=self._wait,
            retry=retry_if_exception(_is_retryable),
            reraise=True,
        )
        last = 0
        try:
            async for attempt in retrying:
                last = attempt.retry_state.attempt_number
                with attempt:
                    try:
                        return await call()
                    except (LLMError, openai.OpenAIError, json.JSONDecodeError) as exc:
                        err = exc if isinstance(exc, LLMError) else _translate(exc, self._secrets)
                        err.detail = scrub(err.detail)
                        if err.retryable and last < attempts:
                            log.warning(
                                "LLM call failed (attempt %d of %d): %s",
                                last,
                                attempts,
                                err.described(),
                            )
                        elif err.detail:
                            log.warning("LLM call failed: %s", err.described())
                        if err is exc:
                            raise
                        raise err from exc
        except LLMError as exc:
            exc.attempts = last
            raise
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    async def complete(
        self,
        messages: list[Message] | list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: OnDelta | None = None,
        model: str | None = None,
        kind: str | None = None,
    ) -> AssistantTurn:
        """One streamed model turn. `on_delta` receives the whole text so far after each
        text delta (a retry starts the text over). Raises LLMError. `kind` labels the
        metrics and the usage row (chat | summary | reflect | recall; by default the
        context's, `memory.storage.usage.call_kind`, else chat) and picks the answer's bound.
        Cut off at its deadline, the turn is the text so far plus CUT_NOTE, with
        `finish_reason` "deadline"."""
        kind = kind or kind_from_context()
        # In the shape every chat template accepts (bot.model.alternation), whoever built it.
        payload = alternating([m.to_openai() if isinstance(m, Message) else m for m in messages])
        kwargs: dict[str, Any] = {
            "model": model or self.settings.model,
            "messages": payload,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            kwargs["tools"] = tools
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        max_tokens = self._max_tokens(kind)
        if max_tokens:
            kwargs[self._token_param] = max_tokens
        partial = _Partial()

        async def call() -> AssistantTurn:
            nonlocal partial
            partial = _Partial()  # a retry starts over
            stream = await self._client.post(
                "/chat/completions",
                body=kwargs,
                cast_to=object,
                options=_OPTIONS,
                stream=True,
                stream_cls=_CHUNKS,
            )
            try:
                return await _collect(stream, on_delta, partial)
            except Exception:
                # Cut off mid-answer: what was streamed was generated, and is paid for.
                await self._record_cut(partial, kind, kwargs["model"], payload, tools)
                raise

        seconds, deadline = self._deadline()
        try:
            try:
                turn: AssistantTurn = await self._measured(call, kind, deadline)
            except LLMError as exc:
                if not (max_tokens and self._renamed_bound(exc, kwargs)):
                    raise
                turn = await self._measured(call, kind, deadline)
        except _DeadlinePassed:
            if not partial.text:
                await self._record_cut(partial, kind, kwargs["model"], payload, tools)
                raise LLMError(f"the language model did not answer within {seconds:g} s") from None
            turn = partial.turn()
            turn.tool_calls = []  # half-streamed calls cannot be run
            turn.finish_reason = "deadline"
            log.warning("model call cut off at its deadline of %g s", seconds)
        await self._account(turn, kind, kwargs["model"], payload, tools)
        if turn.finish_reason == "deadline":
            turn.content = f"{turn.content.rstrip()}\n\n{CUT_NOTE.format(seconds=seconds)}"
        return turn

    def _renamed_bound(self, exc: LLMError, kwargs: dict[str, Any]) -> bool:
        """OpenAI's reasoning models refuse `max_tokens` and ask for
        `max_completion_tokens` (which many local servers do not know): switch to it
        when told to, for this and every later call; whether to ask again."""
        if self._token_param != "max_tokens" or "max_completion_tokens" not in exc.detail:
            return False
        log.info("the model server asks for max_completion_tokens: sending that instead")
        self._token_param = "max_completion_tokens"
        kwargs["max_completion_tokens"] = kwargs.pop("max_tokens")
        return True

    def _max_tokens(self, kind: str) -> int:
        s = self.settings
        bounds = {
            "summary": s.summary_max_tokens,
            "recall": s.recall_max_tokens,
            "reflect": s.reflect_max_tokens,
        }
        return bounds.get(kind, s.max_tokens)

    def _deadline(self) -> tuple[float, float]:
        """(seconds, loop time) of the call's deadline: its own or its turn's, sooner."""
        now = asyncio.get_running_loop().time()
        deadline = now + self.settings.answer_deadline_s
        turn = _turn_deadline.get()
        if turn is not None and turn < deadline:
            return self.settings.turn_deadline_s, turn
        return self.settings.answer_deadline_s, deadline

    async def _record_cut(
        self,
        partial: _Partial,
        kind: str,
        model: str,
        payload: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> None:
        """The usage row of a call cut off after its answer began (estimated: the
        server's report comes at the end)."""
        if partial.chunks:
            await self._account(partial.turn(), kind, model, payload, tools)

    async def _account(
        self,
        turn: AssistantTurn,
        kind: str,
        model: str,
        payload: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> None:
        """Record the turn's usage: the server's report, or our estimate flagged as one;
        a report also calibrates the estimate for `model` (requests with images aside:
        their cost is the server's own rule)."""
        estimated, images = request_tokens(payload, tools)
        reported = TokenUsage.from_report(turn.usage)
        if reported.prompt or reported.completion:
            turn.accounted = reported
            if not images:
                self.calibration.observe(model, estimated, reported.prompt)
        else:
            answer = turn.content + "".join(c.name + c.arguments for c in turn.tool_calls)
            turn.accounted = TokenUsage(estimated, 0, estimate_tokens(answer), estimated=True)
        await self.usage.record(self.usage.row(kind, model, turn.accounted))

    async def transcribe(self, data: bytes, filename: str) -> str:
        """The text spoken in `data` (an audio file; the server infers its format from
        `filename`'s extension) by `llm.transcription_model`, retried like `complete`.
        Raises LLMError (also when no transcription model is configured)."""
        model = self.settings.transcription_model
        if not model:
            raise LLMError("no transcription model is configured (llm.transcription_model)")

        async def call() -> str:
            # The SDK's `create` here: it builds the multipart body, one request per message.
            result = await self._client.audio.transcriptions.create(
                model=model, file=(filename, data), timeout=self._transcribe_timeout(data)
            )
            spoken = getattr(result, "text", None)
            if not isinstance(spoken, str):
                raise _malformed()
            return spoken.strip()

        spoken: str = await self._measured(call, "transcription")
        # Transcription endpoints report audio seconds or nothing: the transcript's
        # tokens are counted as the output, estimated.
        tokens = TokenUsage(0, 0, estimate_tokens(spoken), estimated=True)
        await self.usage.record(self.usage.row("transcription", model, tokens))
        return spoken

    def _transcribe_timeout(self, data: bytes) -> float:
        """`llm.timeout_s`, stretched for long recordings: a server transcribes a 20 MB
        file (about 20 minutes of voice) in well over the 60 s a chat answer gets."""
        return max(self.settings.timeout_s, TRANSCRIBE_S_PER_MB * len(data) / 1_000_000)

    async def _measured(
        self, call: Callable[[], Awaitable[Any]], kind: str, deadline: float | None = None
    ) -> Any:
        """`call` with retries, its latency and failure counted under `kind`; raises
        `_DeadlinePassed` at the loop time `deadline`."""
        started = time.monotonic()
        try:
            async with asyncio.timeout_at(deadline) as timer:
                result = await self._with_retries(call)
        except LLMError as exc:
            cause = exc.__cause__ or exc
            record_llm_call(time.monotonic() - started, kind=kind, error=type(cause).__name__)
            raise
        except TimeoutError:
            if not timer.expired():
                raise
            record_llm_call(time.monotonic() - started, kind=kind, error="deadline")
            raise _DeadlinePassed() from None
        record_llm_call(time.monotonic() - started, kind=kind)
        return result

    async def generate(self, prompt: str, model: str | None = None) -> str:
        """One prompt, one answer, no tools (the summarizer's `generate`). An answer the
        server cut at its length limit, or our deadline, is an LLMError: a summary
        missing its end must not replace what it summarizes."""
        turn = await self.complete(
            [Message(role="user", content=prompt)],
            model=model or self.settings.summary_model or None,
            kind="summary",
        )
        if turn.finish_reason in ("length", "deadline"):
            raise LLMError(
                f"the summary was cut off (finish_reason: {turn.finish_reason}); "
                "llm.summary_max_tokens or the server's limit is too low"
            )
        return turn.content


class _DeadlinePassed(Exception):
    """The call's deadline passed (what was streamed is in its `_Partial`)."""


def _malformed() -> LLMError:
    return LLMError("the language model sent a malformed answer", retryable=True)


def _dict(value: Any) -> dict[str, Any]:
    """A JSON object of a chunk, {} for null; anything else is a malformed answer."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _malformed()
    return value


@dataclass
class _Partial:
    """What one attempt has streamed so far (kept when the attempt is cut off)."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    chunks: int = 0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None

    def turn(self) -> AssistantTurn:
        return AssistantTurn(
            content="".join(self.text),
            reasoning="".join(self.reasoning) or None,
            tool_calls=[
                ToolCall(
                    id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}"
                )
                for i, c in sorted(self.calls.items())
            ],
            finish_reason=self.finish_reason,
            usage=self.usage,
        )


async def _collect(stream: Any, on_delta: OnDelta | None, partial: _Partial) -> AssistantTurn:
    text, reasoning, calls = partial.text, partial.reasoning, partial.calls
    async with stream:
        async for raw in stream:
            partial.chunks += 1
            chunk = _dict(raw)
            usage = chunk.get("usage")
            if usage is not None:
                partial.usage = {k: v for k, v in _dict(usage).items() if v is not None}
            choices = chunk.get("choices")
            if not choices:  # the final usage chunk has `choices: []`
                continue
            if not isinstance(choices, list):
                raise _malformed()
            choice = _dict(choices[0])
            if choice.get("finish_reason"):
                partial.finish_reason = str(choice["finish_reason"])
            delta = _dict(choice.get("delta"))
            extra = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(extra, str) and extra:
                reasoning.append(extra)
            for tc in delta.get("tool_calls") or []:
                tc = _dict(tc)
                index = tc.get("index")
                slot = calls.setdefault(
                    index if isinstance(index, int) else 0, {"id": "", "name": "", "arguments": ""}
                )
                if tc.get("id"):
                    slot["id"] = str(tc["id"])
                function = _dict(tc.get("function"))
                if function.get("name"):
                    slot["name"] += str(function["name"])
                if function.get("arguments"):
                    slot["arguments"] += str(function["arguments"])
            content = delta.get("content")
            if content:
                text.append(str(content))
                if on_delta is not None:
                    await on_delta("".join(text))
    if not partial.chunks:
        # Not one SSE event: an error page or other non-stream body (a proxy in between).
        raise _malformed()
    return partial.turn()
