"""A real local HTTP server speaking the OpenAI Chat Completions API, scriptable per test.

Usage::

    async with FakeOpenAI() as llm:              # echo mode by default
        settings.llm.base_url = llm.base_url     # "http://127.0.0.1:PORT/v1"
        llm.push(text("hello"), error(500), tool_call("memory", {"action": "status"}))
        ...
        llm.requests                             # every request body received, in order

Each request to `POST /v1/chat/completions` takes the next scripted response from the
queue (`push`); when the queue is empty the `responder` answers (default: `echo`, which
replies "echo: <last user message>"). Both `stream: true` (SSE chunks with text deltas,
tool-call deltas the way OpenAI sends them, and a final usage chunk with `choices: []`)
and plain JSON answers are served.

Scripted responses:
  text(content, pause_s=)       an assistant answer (streamed in small deltas, `pause_s`
                                seconds apart: a slow model whose answer the bot streams)
  tool_call(name, args) / tool_calls([...])   an assistant turn calling tools
  error(status, retry_after=)   an HTTP error with an OpenAI-style JSON error body
  hang()                        never answers (the client must time out)
  forever(piece, pause_s=)      streams `piece` again and again, never finishing, until
                                the client hangs up (`streaming` counts such streams)
  truncated(content)            an answer the server cut at its length limit
                                (`finish_reason: length`)
  llama_error(status, message)  an error with llama.cpp's body: {"error": {"code",
                                "message", "type"}}
  garbage(body)                 a 200 whose body is not JSON
  empty()                       an answer with no text and no tool calls
  gated(event, response)        waits for `event` (an asyncio.Event) before answering

Transcriptions: `POST /v1/audio/transcriptions` (multipart, as the SDK's
`audio.transcriptions.create` sends it) answers `{"text": ...}` from its own queue,
`push_transcription(text("hello"), error(500), ...)` (every kind above but `empty`;
`text("")` is an empty transcript), else `transcribe_responder(upload)` (default: "fake
transcript of <filename>"). `transcriptions` records each request as an `Upload`
(model, filename, file bytes); they are not in `requests`.

Usage: every answer reports `usage` the way mnemo estimates the request
(`memory.text.tokens.request_tokens`: the messages, their tool calls, the tool schemas) times
`prompt_scale` (1.0; a server whose tokenizer counts otherwise), the answer's estimated
tokens as completion, and `cached_tokens` when set; `report_usage = False` sends none
(chat and embeddings), as some servers do.

Embeddings: `POST /v1/embeddings` answers a deterministic vector per input: a hashed bag
of its words (`fake_embedding`), so texts sharing words are close, of `embedding_dim`
dimensions (change it to play a server whose model changed). Switches: `push_embedding(
error(500), error(429, retry_after=0), ...)` scripts failures (then answers resume);
`embeddings_status = 404` answers every request with that error (a server without the
endpoint); `rejects(text) -> bool` refuses (400) a request holding such an input, as a
server refuses input too long. An empty input is refused (400), as real servers do.
`embedding_requests` records each request body (not in `requests`);
`wait_for_embedding_requests(n)` waits for n of them.

Strict alternation (`strict = True`, the default): like llama.cpp serving Gemma's or
Mistral's official chat template, a chat request must be one optional leading system
message, then user and assistant turns alternating from a user turn (an assistant turn
calling tools is followed by its `tool` results, then the assistant again); anything
else gets HTTP 400 "Conversation roles must alternate user/assistant/user/assistant"
(`alternation_violation`), recorded in `requests` and `rejected` like any request.
`strict = False` only where a test needs the server to take what it is given.

`pause()` / `resume()` hold every request at arrival until resumed; `wait_for_requests(n)`
waits until n requests have arrived; `in_flight` counts requests not yet answered.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import math
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from memory.text.tokens import estimate_tokens, request_tokens

__all__ = [
    "FakeOpenAI",
    "Response",
    "Upload",
    "echo",
    "empty",
    "alternation_violation",
    "fake_embedding",
    "error",
    "forever",
    "llama_error",
    "truncated",
    "gated",
    "garbage",
    "hang",
    "text",
    "tool_call",
    "tool_calls",
]


@dataclass
class Response:
    """One scripted answer. Build it with the helper functions below."""

    kind: str  # "reply" | "error" | "hang" | "garbage" | "gated"
    content: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, args json)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    gate: asyncio.Event | None = None
    then: Response | None = None
    chunk_size: int = 8
    pause_s: float = 0.0  # between streamed deltas
    finish_reason: str | None = None  # None: "stop", or "tool_calls" with calls


@dataclass
class Upload:
    """One transcription request as received."""

    model: str
    filename: str
    file: bytes
    fields: dict[str, str]  # the other form fields


_ids = itertools.count(1)


def text(content: str, *, chunk_size: int = 8, pause_s: float = 0.0) -> Response:
    return Response("reply", content=content, chunk_size=chunk_size, pause_s=pause_s)


def empty() -> Response:
    return Response("reply", content="")


def tool_calls(calls: list[tuple[str, dict[str, Any] | str]], content: str = "") -> Response:
    """An assistant turn calling every `(name, arguments)` in `calls`."""
    out = []
    for name, args in calls:
        raw = args if isinstance(args, str) else json.dumps(args)
        out.append((f"call_{next(_ids)}", name, raw))
    return Response("reply", content=content, calls=out)


def tool_call(name: str, arguments: dict[str, Any] | str) -> Response:
    return tool_calls([(name, arguments)])


def error(status: int, *, retry_after: float | None = None, message: str = "") -> Response:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    body = json.dumps(
        {
            "error": {
                "message": message or f"fake error {status}",
                "type": "server_error",
                "code": None,
                "param": None,
            }
        }
    )
    return Response("error", status=status, headers=headers, body=body)


def hang() -> Response:
    return Response("hang")


def forever(piece: str = "and on ", *, pause_s: float = 0.02) -> Response:
    return Response("forever", content=piece, pause_s=pause_s)


def truncated(content: str) -> Response:
    return Response("reply", content=content, finish_reason="length")


def llama_error(status: int, message: str, kind: str = "invalid_request_error") -> Response:
    body = json.dumps({"error": {"code": status, "message": message, "type": kind}})
    return Response("error", status=status, body=body)


def garbage(body: str = "<html>502 Bad Gateway</html>") -> Response:
    return Response("garbage", body=body)


def gated(gate: asyncio.Event, then: Response) -> Response:
    return Response("gated", gate=gate, then=then)


def echo(body: dict[str, Any]) -> Response:
    """Default responder: "echo: " + the content of the last user message."""
    last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), None)
    content = last.get("content") if last else ""
    if isinstance(content, list):  # content parts
        content = " ".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return text(f"echo: {content or ''}")


_WORD = re.compile(r"\w+")


ALTERNATION = "Conversation roles must alternate user/assistant/user/assistant"


def alternation_violation(messages: list[dict[str, Any]]) -> str | None:
    """Why a strict chat template would refuse `messages`, None when it would not."""
    expected = "user"
    for i, entry in enumerate(messages):
        role = entry.get("role")
        if role == "system":
            if i:
                return f"{ALTERNATION} (system at position {i})"
            continue
        if role == "tool":
            previous = messages[i - 1] if i else {}
            if previous.get("role") != "tool" and not previous.get("tool_calls"):
                return f"{ALTERNATION} (tool at position {i} answers no call)"
            expected = "assistant"
            continue
        if role != expected:
            return f"{ALTERNATION} ({role} at position {i}, expected {expected})"
        expected = (
            "tool"
            if role == "assistant" and entry.get("tool_calls")
            else ("assistant" if role == "user" else "user")
        )
    return None


def fake_embedding(text: str, dim: int = 64, synonyms: dict[str, str] | None = None) -> list[float]:
    """A unit vector: every word of `text` (case-folded, and replaced by its entry in
    `synonyms`, so two words can "mean" the same) adds +-1 at a position its hash picks.
    Texts sharing words are close; texts sharing none are near orthogonal."""
    vec = [0.0] * dim
    for word in _WORD.findall(text.casefold()):
        word = (synonyms or {}).get(word, word)
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vec[int.from_bytes(digest[:4], "big") % dim] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0:  # no words (punctuation only): a fixed direction, still a unit vector
        return [1.0] + [0.0] * (dim - 1)
    return [v / norm for v in vec]


class FakeOpenAI:
    """The server. `responder(body) -> Response` answers when the script queue is empty."""

    def __init__(
        self, responder: Callable[[dict[str, Any]], Response] = echo, *, model: str = "fake-model"
    ) -> None:
        self.responder = responder
        self.model = model
        self.strict = True  # refuse what a strict chat template refuses (module doc)
        self.rejected: list[str] = []  # why each refused request was refused
        self.requests: list[dict[str, Any]] = []
        self.transcriptions: list[Upload] = []
        self.transcribe_responder: Callable[[Upload], Response] = lambda upload: text(
            f"fake transcript of {upload.filename}"
        )
        self._transcription_script: list[Response] = []
        self.embedding_dim = 64
        # llama.cpp's `GET /props` (at the server root): its context size, when set; a
        # server without the endpoint (OpenAI's) answers 404.
        self.context_size: int | None = None
        self.cached_tokens = 0  # reported as prompt_tokens_details.cached_tokens when > 0
        # Usage is reported as mnemo estimates a request (memory.text.tokens.request_tokens)
        # times `prompt_scale` (a server whose tokenizer counts otherwise), or not at all.
        self.report_usage = True
        self.prompt_scale = 1.0
        self.synonyms: dict[str, str] = {}  # word -> the word it embeds as
        self.embeddings_status: int | None = None
        self.rejects: Callable[[str], bool] = lambda _text: False
        self.embedding_requests: list[dict[str, Any]] = []
        self.authorizations: list[str] = []  # each request's Authorization header
        self._embedding_script: list[Response] = []
        self.in_flight = 0
        self.streaming = 0  # `forever` streams still being written
        self._script: list[Response] = []
        self._open = asyncio.Event()
        self._open.set()
        self._arrived = asyncio.Condition()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # --- scripting ----------------------------------------------------------------

    def push(self, *responses: Response) -> None:
        self._script.extend(responses)

    def push_transcription(self, *responses: Response) -> None:
        self._transcription_script.extend(responses)

    def push_embedding(self, *responses: Response) -> None:
        self._embedding_script.extend(responses)

    @property
    def pending(self) -> int:
        """Scripted responses not consumed yet."""
        return len(self._script)

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def wait_for_embedding_requests(self, n: int) -> None:
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.embedding_requests) >= n)

    async def wait_for_requests(self, n: int) -> None:
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= n)

    async def _props(self, request: web.Request) -> web.StreamResponse:
        if self.context_size is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(
            {"default_generation_settings": {"n_ctx": self.context_size}, "total_slots": 1}
        )

    # --- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/embeddings", self._embed)
        app.router.add_get("/props", self._props)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        self._open.set()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- serving ------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.authorizations.append(request.headers.get("Authorization", ""))
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        async with self._arrived:
            self.requests.append(body)
            self._arrived.notify_all()
        self.in_flight += 1
        try:
            await self._open.wait()
            wrong = alternation_violation(body.get("messages") or []) if self.strict else None
            if wrong is not None:
                self.rejected.append(wrong)
                # llama.cpp's answer: the template's exception, as a 400 (no script used).
                return await self._answer(request, body, error(400, message=wrong))
            resp = self._script.pop(0) if self._script else self.responder(body)
            return await self._answer(request, body, resp)
        finally:
            self.in_flight -= 1

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload_field = form.get("file")
        if not isinstance(upload_field, web.FileField):
            return web.json_response({"error": {"message": "no file"}}, status=400)
        upload = Upload(
            model=str(form.get("model", "")),
            filename=upload_field.filename,
            file=upload_field.file.read(),
            fields={k: v for k, v in form.items() if isinstance(v, str) and k != "model"},
        )
        self.transcriptions.append(upload)
        self.in_flight += 1
        try:
            await self._open.wait()
            resp = (
                self._transcription_script.pop(0)
                if self._transcription_script
                else self.transcribe_responder(upload)
            )
            while resp.kind == "gated":
                assert resp.gate is not None and resp.then is not None
                await resp.gate.wait()
                resp = resp.then
            if resp.kind == "reply":
                return web.json_response({"text": resp.content})
            return await self._answer(request, {}, resp)
        finally:
            self.in_flight -= 1

    async def _embed(self, request: web.Request) -> web.StreamResponse:
        self.authorizations.append(request.headers.get("Authorization", ""))
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        async with self._arrived:
            self.embedding_requests.append(body)
            self._arrived.notify_all()
        self.in_flight += 1
        try:
            await self._open.wait()
            if self.embeddings_status is not None:
                return await self._answer(request, {}, error(self.embeddings_status))
            if self._embedding_script:
                return await self._answer(request, {}, self._embedding_script.pop(0))
            inputs = body.get("input")
            inputs = [inputs] if isinstance(inputs, str) else inputs
            if (
                not isinstance(inputs, list)
                or not inputs
                or not all(isinstance(t, str) and t for t in inputs)
            ):
                return await self._answer(request, {}, error(400, message="input is empty"))
            if any(self.rejects(t) for t in inputs):
                return await self._answer(request, {}, error(400, message="input too long"))
            data = []
            for i, t in enumerate(inputs):
                vec = fake_embedding(t, self.embedding_dim, self.synonyms)
                if body.get("encoding_format") == "base64":
                    packed = struct.pack(f"<{len(vec)}f", *vec)
                    data.append(
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": base64.b64encode(packed).decode(),
                        }
                    )
                else:
                    data.append({"object": "embedding", "index": i, "embedding": vec})
            tokens = sum(estimate_tokens(t) for t in inputs)
            answer: dict[str, Any] = {
                "object": "list",
                "data": data,
                "model": body.get("model", self.model),
            }
            if self.report_usage:
                answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
            return web.json_response(answer)
        finally:
            self.in_flight -= 1

    async def _answer(
        self, request: web.Request, body: dict[str, Any], resp: Response
    ) -> web.StreamResponse:
        if resp.kind == "gated":
            assert resp.gate is not None and resp.then is not None
            await resp.gate.wait()
            return await self._answer(request, body, resp.then)
        if resp.kind == "hang":
            await self._closing.wait()  # the client times out long before
            return web.Response(status=503, text="fake server closing")
        if resp.kind == "error":
            return web.Response(
                status=resp.status,
                text=resp.body,
                headers=resp.headers,
                content_type="application/json",
            )
        if resp.kind == "garbage":
            return web.Response(status=200, text=resp.body, content_type="application/json")
        if resp.kind == "forever":
            return await self._forever(request, body, resp)
        if body.get("stream"):
            return await self._stream(request, body, resp)
        return web.json_response(self._completion(body, resp))

    def _usage(self, body: dict[str, Any], resp: Response) -> dict[str, Any] | None:
        if not self.report_usage:
            return None
        prompt = math.ceil(
            request_tokens(body.get("messages", []), body.get("tools"))[0] * self.prompt_scale
        )
        completion = estimate_tokens(resp.content + "".join(c[1] + c[2] for c in resp.calls))
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if self.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    def _completion(self, body: dict[str, Any], resp: Response) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": resp.content or None}
        if resp.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in resp.calls
            ]
        return {
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": _finish(resp),
                }
            ],
            "usage": self._usage(body, resp),
        }

    async def _stream(
        self, request: web.Request, body: dict[str, Any], resp: Response
    ) -> web.StreamResponse:
        out = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await out.prepare(request)
        cid, created, model = f"chatcmpl-{next(_ids)}", int(time.time()), body.get("model")

        async def send(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> None:
            chunk = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": usage,
            }
            await out.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": d, "finish_reason": finish}]

        await send(delta({"role": "assistant", "content": ""}))
        step = max(1, resp.chunk_size)
        for i in range(0, len(resp.content), step):
            if resp.pause_s and i:
                await asyncio.sleep(resp.pause_s)
            await send(delta({"content": resp.content[i : i + step]}))
        for index, (call_id, name, args) in enumerate(resp.calls):
            # OpenAI's shape: first the id and name with empty arguments, then fragments.
            await send(
                delta(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for i in range(0, len(args), 10):
                await send(
                    delta(
                        {
                            "tool_calls": [
                                {"index": index, "function": {"arguments": args[i : i + 10]}}
                            ]
                        }
                    )
                )
        await send(delta({}, _finish(resp)))
        usage = self._usage(body, resp)
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            await send([], usage)
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    async def _forever(
        self, request: web.Request, body: dict[str, Any], resp: Response
    ) -> web.StreamResponse:
        """Stream `resp.content` until the client disconnects (a write then fails)."""
        out = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await out.prepare(request)
        cid, created = f"chatcmpl-{next(_ids)}", int(time.time())
        self.streaming += 1
        try:
            while not self._closing.is_set():
                chunk = {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body.get("model"),
                    "choices": [
                        {"index": 0, "delta": {"content": resp.content}, "finish_reason": None}
                    ],
                }
                await out.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await asyncio.sleep(resp.pause_s)
        except (ConnectionError, RuntimeError):
            pass  # the client hung up (aiohttp: ClientConnectionResetError / closing transport)
        finally:
            self.streaming -= 1
        return out


def _finish(resp: Response) -> str:
    return resp.finish_reason or ("tool_calls" if resp.calls else "stop")
