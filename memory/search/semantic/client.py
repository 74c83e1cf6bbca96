"""`Embedder`: text -> unit vectors through an OpenAI-compatible `/v1/embeddings`.

OpenAI, llama.cpp's server (`--embeddings`), Ollama and vLLM all serve the endpoint. The
openai SDK's own retries are off (`max_retries=0`) and tenacity retries instead, so the
attempt count and the Retry-After cap are ours: 429, 5xx, 408/409, timeouts and
connection errors are retried; anything else fails at once.

A server that has no such endpoint or model (404, 405, 501; or a 400 that a one-word
probe also gets) raises `EmbeddingsUnavailable` and marks the embedder unavailable: one
log line, then every call fails fast without a request until `RECHECK_S` has passed, when
one call tries again (a server fixed meanwhile is picked up; a still-broken one is not
logged again). A 400 the probe does not get means the input was refused:
`EmbeddingRejected`.

Texts: blank ones are never sent (servers reject empty input); they get all-zero rows.
Longer ones are cut to `max_chars` characters (default `MAX_CHARS`, about 500 tokens,
within every common embedding model's context: a model sees only its first tokens anyway).

Prefixes: models trained with instructions (e5 `query: `/`passage: `, nomic-embed-text
`search_query: `/`search_document: `, bge's query instruction) embed well only with them.
`query_prefix` goes before every search query (`embed_query`), `document_prefix` before
every stored item (`embed`), after the cut, so a long text never loses its prefix. A
prefix changes every vector, so it is a change of model: `model`, the name vectors are
stored and searched under, carries the prefixes (`vectors_model`), and a new prefix is
re-embedded as a new model name is; `api_model` is the name sent to the server.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Sequence

import numpy as np
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from memory.search.semantic.defaults import DEFAULT_MIN_SIMILARITY
from memory.storage.usage import TokenUsage, UsageRecorder, split_by_scope
from memory.text.server_error import not_supported, server_message
from memory.text.server_url import server_url
from memory.text.tokens import estimate_tokens

log = logging.getLogger(__name__)

MAX_CHARS = 2000
RETRY_AFTER_CAP_S = 30.0
RECHECK_S = 600.0  # how long an unavailable endpoint is left alone before one more try
_UNAVAILABLE_STATUS = {404, 405, 501}
_RETRY_STATUS = {408, 409, 429}
_PROBE = "ping"
MAX_MODEL_NAME = 255  # the `embeddings.model` column's width (memory/search/semantic/store.py)


class EmbeddingError(RuntimeError):
    """The embeddings server failed (after retries); `retryable` says whether later may work."""

    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class EmbeddingsUnavailable(EmbeddingError):
    """The server has no embeddings endpoint or no such model: search stays lexical."""


class EmbeddingRejected(EmbeddingError):
    """The server refused this input (HTTP 400) although it embeds others."""


class _Status(Exception):
    """An HTTP status from the server, carried through tenacity."""

    def __init__(
        self, status: int, retry_after: float | None, message: str, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after
        self.detail = detail  # the server's message (memory.text.server_error)


class _Malformed(Exception):
    """A 200 whose body is not the embeddings we asked for."""


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, _Status):
        return exc.status in _RETRY_STATUS or (
            exc.status >= 500
            and exc.status not in _UNAVAILABLE_STATUS
            and not not_supported(exc.detail)
        )
    return isinstance(
        exc,
        openai.APIConnectionError
        | json.JSONDecodeError
        | openai.APIResponseValidationError
        | _Malformed,
    )


def _retry_after(response: object) -> float | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000
        raw = headers.get("retry-after")
        return float(raw) if raw is not None else None
    except ValueError:  # an HTTP date: rare from model APIs, our backoff instead
        return None


def vectors_model(model: str, query_prefix: str = "", document_prefix: str = "") -> str:
    """The name vectors of `model` made with these prefixes are stored under: the model's
    own without prefixes (so vectors stored before prefixes existed stay valid), else the
    prefixes spelled out (a digest of them past the column's 255 characters)."""
    if not query_prefix and not document_prefix:
        return model
    named = f"{model} (query {query_prefix!r}, document {document_prefix!r})"
    if len(named) <= MAX_MODEL_NAME:
        return named
    digest = hashlib.sha256(f"{query_prefix}\0{document_prefix}".encode()).hexdigest()[:16]
    return f"{model[: MAX_MODEL_NAME - 30]} (prefixes {digest})"


def normalise(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero), float32."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


class Embedder:
    """`embed(texts)` -> float32 array (n, dim), rows L2-normalised, in batches."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        batch_size: int = 64,
        timeout_s: float = 60,
        max_retries: int = 4,
        max_chars: int = MAX_CHARS,
        backoff_s: float = 0.5,
        backoff_cap_s: float = 8.0,
        usage: UsageRecorder | None = None,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        if not model:
            raise ValueError("an Embedder needs a model name")
        self.api_model = model
        self.query_prefix, self.document_prefix = query_prefix, document_prefix
        self.model = vectors_model(model, query_prefix, document_prefix)
        # Where this model's cosines stop meaning "related" (memory/search/semantic/__init__.py).
        self.min_similarity = float(min_similarity)
        self.batch_size = max(1, int(batch_size))
        self.max_retries = max(0, int(max_retries))
        self.max_chars = max(1, int(max_chars))
        self.backoff_s, self.backoff_cap_s = backoff_s, backoff_cap_s
        self.usage = usage or UsageRecorder()  # each request's tokens (memory/storage/usage.py)
        self.dim: int | None = None  # learnt from the first answer
        self.unavailable: str | None = None  # why, while the endpoint is unavailable
        self._recheck_at = 0.0
        url = server_url(base_url)
        self._client = openai.AsyncOpenAI(
            base_url=url.base_url,
            api_key=api_key or "unset",
            default_headers=url.headers,  # Basic auth from the URL replaces the key
            timeout=timeout_s,
            max_retries=0,
        )
        # Masked in the server's messages.
        self._secrets = ((api_key,) if api_key else ()) + url.secrets

    async def close(self) -> None:
        await self._client.close()

    async def embed(
        self,
        texts: Sequence[str],
        *,
        retries: int | None = None,
        kind: str = "embedding",
        scopes: Sequence[tuple[int, str]] | None = None,
        prefix: str | None = None,
    ) -> np.ndarray:
        """One row per text (stored items: each sent after `document_prefix`, or
        `prefix` when given). Raises EmbeddingsUnavailable, EmbeddingRejected or
        EmbeddingError (after `retries`, default `max_retries`, retries of what may pass).
        Each request's usage is recorded as `kind`, shared between the texts' (user,
        agent) `scopes` when given (one per text), else the context's."""
        self._check_available()
        retries = self.max_retries if retries is None else max(0, retries)
        prefix = self.document_prefix if prefix is None else prefix
        cut = [t[: self.max_chars] if isinstance(t, str) else "" for t in texts]
        sendable = [i for i, t in enumerate(cut) if t.strip()]
        rows: list[np.ndarray] = []
        for start in range(0, len(sendable), self.batch_size):
            picked = sendable[start : start + self.batch_size]
            chunk = [prefix + cut[i] for i in picked]
            vectors, reported = await self._request(chunk, retries)
            rows.append(vectors)
            await self._account(
                kind, chunk, reported, [scopes[i] for i in picked] if scopes else None
            )
        dims = {r.shape[1] for r in rows}
        if len(dims) > 1:
            raise EmbeddingError(
                f"the embeddings server changed dimension mid-call ({dims})", retryable=True
            )
        dim = dims.pop() if dims else (self.dim or 0)
        out = np.zeros((len(cut), dim), dtype=np.float32)
        if rows:
            out[sendable] = np.concatenate(rows)
        return out

    async def embed_query(self, text: str) -> np.ndarray:
        """One text's vector (1-D) for a search: one attempt and at most one retry, since
        someone waits for the answer."""
        vectors: np.ndarray = await self.embed(
            [text], retries=min(self.max_retries, 1), kind="search", prefix=self.query_prefix
        )
        return np.asarray(vectors[0])

    async def _account(
        self,
        kind: str,
        chunk: list[str],
        reported: int,
        scopes: list[tuple[int, str]] | None,
    ) -> None:
        """Record one request's tokens: the server's `prompt_tokens`, else our estimate."""
        weights = [estimate_tokens(t) for t in chunk]
        tokens = TokenUsage(reported) if reported else TokenUsage(sum(weights), estimated=True)
        if not scopes:
            await self.usage.record(self.usage.row(kind, self.api_model, tokens))
            return
        shares = split_by_scope(
            tokens, [(u, a, w) for (u, a), w in zip(scopes, weights, strict=True)]
        )
        await self.usage.record(
            *(
                self.usage.row(kind, self.api_model, share, user_id=u, agent_id=a)
                for u, a, share in shares
            )
        )

    # --- internals -------------------------------------------------------------------

    def _check_available(self) -> None:
        if self.unavailable is not None and time.monotonic() < self._recheck_at:
            raise EmbeddingsUnavailable(self.unavailable)

    def _mark_unavailable(self, reason: str) -> EmbeddingsUnavailable:
        if self.unavailable is None:
            log.warning(
                "embeddings are off: %s; search stays lexical (mnemo memory doctor checks again)",
                reason,
            )
        self.unavailable = reason
        self._recheck_at = time.monotonic() + RECHECK_S
        return EmbeddingsUnavailable(reason)

    def _mark_available(self) -> None:
        if self.unavailable is not None:
            log.info("embeddings endpoint answers again (model %s)", self.api_model)
        self.unavailable = None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Status) and exc.retry_after is not None:
            return max(0.0, min(exc.retry_after, RETRY_AFTER_CAP_S))
        base = min(self.backoff_cap_s, self.backoff_s * 2 ** (state.attempt_number - 1))
        return float(base * (0.5 + random.random() / 2))  # jitter: replicas must not retry in step

    async def _request(self, chunk: list[str], retries: int) -> tuple[np.ndarray, int]:
        """The chunk's vectors and the prompt tokens the server reported (0: none)."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    rows, reported = await self._post(chunk)
        except _Status as exc:
            raise await self._status_error(exc) from None
        except openai.APITimeoutError:
            raise EmbeddingError("the embeddings server timed out", retryable=True) from None
        except openai.APIConnectionError:
            raise EmbeddingError(
                "the embeddings server could not be reached", retryable=True
            ) from None
        except (json.JSONDecodeError, openai.APIResponseValidationError, _Malformed):
            raise EmbeddingError(
                "the embeddings server sent a malformed answer", retryable=True
            ) from None
        self._mark_available()
        self.dim = rows.shape[1]
        return rows, reported

    async def _post(self, chunk: list[str]) -> tuple[np.ndarray, int]:
        try:
            resp = await self._client.embeddings.create(
                model=self.api_model, input=chunk, encoding_format="float"
            )
        except openai.APIStatusError as exc:
            raise _Status(
                exc.status_code,
                _retry_after(exc.response),
                f"HTTP {exc.status_code}",
                server_message(exc, self._secrets),
            ) from None
        data = sorted(resp.data or [], key=lambda d: d.index)
        if len(data) != len(chunk):
            raise _Malformed(f"{len(data)} embeddings for {len(chunk)} inputs")
        try:
            rows = np.array([d.embedding for d in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise _Malformed(str(exc)) from None
        if rows.ndim != 2 or rows.shape[1] == 0 or not np.isfinite(rows).all():
            raise _Malformed("embeddings of no dimension or not finite")
        usage = getattr(resp, "usage", None)
        reported = getattr(usage, "prompt_tokens", 0)
        return normalise(rows), reported if isinstance(reported, int) and reported > 0 else 0

    async def _status_error(self, exc: _Status) -> EmbeddingError:
        status = exc.status
        what = f"the embeddings server answered HTTP {status} for model {self.api_model!r}"
        if exc.detail:  # what an operator needs to fix the setup
            what += f": {exc.detail}"
        if status in _UNAVAILABLE_STATUS:
            return self._mark_unavailable(what)
        if status == 400:
            # No such model, or this input? A one-word probe tells them apart.
            try:
                await self._post([_PROBE])
            except _Status as probe:
                if probe.status in _UNAVAILABLE_STATUS or probe.status == 400:
                    return self._mark_unavailable(what)
            except Exception:  # the probe proves nothing either way
                pass
            return EmbeddingRejected(f"{what} (the input was refused)")
        if status in (401, 403):
            return EmbeddingError(f"the embeddings server refused our API key (HTTP {status})")
        return EmbeddingError(what, retryable=status >= 500 or status in _RETRY_STATUS)
