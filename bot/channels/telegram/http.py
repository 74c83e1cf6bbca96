"""Bot API requests over aiohttp: python-telegram-bot's `BaseRequest`, for `Application`.

PTB's default `HTTPXRequest` runs on httpcore, whose connection pool checks every pooled
connection for expiry (a `poll` syscall and several attribute lookups each) on every request
it assigns. A bot that answers 64 chats at once needs a pool of ~130 connections, and at
that size the scan was the largest single cost of `mnemo run` under load (a third of its
CPU went to Bot API calls; bench/RESULTS.md). aiohttp's connector hands out a connection
in constant time, and aiohttp is already our dependency (the LLM transport, the fake
servers). Semantics follow `HTTPXRequest`: form-encoded parameters (multipart when a file
is sent), `TimedOut` for any timeout (waiting for a pooled connection included),
`NetworkError` for the rest, the status code and body handed back unread by us.

File downloads (`File.download_as_bytearray`, the only GETs PTB makes) read at most
`max_download_bytes` of the body, or less inside `download_cap(n)` (PTB passes no
per-call limit through), and raise `DownloadTooLarge` past it, so a file that Telegram
under-reported is never held whole in memory. Error messages never carry the
URL: both the API's and the file's hold the bot token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import aiohttp
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import BaseRequest, RequestData

# PTB's defaults (HTTPXRequest): seconds.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 5.0
MEDIA_WRITE_TIMEOUT_S = 20.0
CHUNK_BYTES = 64 * 1024

_TOKEN_IN_URL = re.compile(r"/bot[^/\s'\"]+")


class DownloadTooLarge(TelegramError):
    """A downloaded file's body is over `max_download_bytes` (or the `download_cap`)."""


_CAP: ContextVar[int | None] = ContextVar("download_cap", default=None)


@contextmanager
def download_cap(limit: int) -> Iterator[None]:
    """Downloads in this block (this task) read at most `limit` bytes."""
    token = _CAP.set(limit)
    try:
        yield
    finally:
        _CAP.reset(token)


def _redact(text: str) -> str:
    """`text` with the token of any Bot API or file URL in it replaced."""
    return _TOKEN_IN_URL.sub("/bot<token>", text)


def _given(value: Any, default: float | None) -> float | None:
    """A timeout argument: PTB passes `DEFAULT_NONE` for "use the request's default"."""
    return default if isinstance(value, type(BaseRequest.DEFAULT_NONE)) else value


class AiohttpRequest(BaseRequest):
    """One aiohttp session with a bounded pool of `connections`."""

    def __init__(
        self,
        connections: int = 8,
        *,
        pool_timeout: float | None = 1.0,
        connect_timeout: float | None = CONNECT_TIMEOUT_S,
        read_timeout: float | None = READ_TIMEOUT_S,
        write_timeout: float | None = WRITE_TIMEOUT_S,
        media_write_timeout: float | None = MEDIA_WRITE_TIMEOUT_S,
        max_download_bytes: int | None = None,
    ) -> None:
        self.connections = connections
        self.max_download_bytes = max_download_bytes
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, limit_per_host=0),
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if self._session is None or self._session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data is not None and request_data.contains_files
        data: Any = None
        if request_data is not None:
            data = _form(request_data) if files else request_data.json_parameters
        read = _given(read_timeout, self._read_timeout)
        write = _given(write_timeout, self.media_write_timeout if files else self.write_timeout)
        connect = _given(connect_timeout, self.connect_timeout)
        pool = _given(pool_timeout, self.pool_timeout)
        timeout = aiohttp.ClientTimeout(
            # aiohttp's `connect` covers waiting for a pooled connection and connecting;
            # it has no write timeout of its own, so writing counts against the read.
            connect=None if pool is None or connect is None else pool + connect,
            sock_connect=connect,
            sock_read=None if read is None or write is None else read + write,
        )
        try:
            async with self._session.request(method, url, data=data, timeout=timeout) as res:
                limit = min(
                    (n for n in (self.max_download_bytes, _CAP.get()) if n is not None),
                    default=None,
                )
                if method == "GET" and limit is not None:
                    return res.status, await _read_capped(res, limit)
                return res.status, await res.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(_redact(f"aiohttp.{type(exc).__name__}: {exc}")) from exc


async def _read_capped(res: aiohttp.ClientResponse, limit: int) -> bytes:
    if res.content_length is not None and res.content_length > limit:
        raise DownloadTooLarge(f"the file is over {limit} bytes")
    body = bytearray()
    async for chunk in res.content.iter_chunked(CHUNK_BYTES):
        body += chunk
        if len(body) > limit:  # a wrong or missing Content-Length: stop reading here
            raise DownloadTooLarge(f"the file is over {limit} bytes")
    return bytes(body)


def _form(request_data: RequestData) -> aiohttp.FormData:
    form = aiohttp.FormData()
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, part in (request_data.multipart_data or {}).items():
        filename, content, mimetype = part if len(part) == 3 else (*part, None)
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form
