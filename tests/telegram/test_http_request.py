"""AiohttpRequest (bot/channels/telegram/http.py) against a real local aiohttp server: what the
server receives from python-telegram-bot, and which PTB errors the failures become."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import NetworkError, TimedOut

from bot.channels.telegram.http import AiohttpRequest, DownloadTooLarge, download_cap
from tests.waits import scaled

TOKEN = "123456:secret-token-never-in-errors"
CHAT = 42


@dataclass
class Received:
    method: str
    content_type: str
    fields: dict[str, Any]


@dataclass
class BotApi:
    """Answers `/bot<token>/<method>` like Telegram; `/hold` answers only once `release` is
    set (at teardown at the latest), after setting `held`."""

    url: str
    calls: list[Received] = field(default_factory=list)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def base_url(self) -> str:
        return f"{self.url}/bot"


async def _read_fields(request: web.Request) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, value in (await request.post()).items():
        if isinstance(value, web.FileField):
            fields[name] = {
                "filename": value.filename,
                "content": value.file.read(),
                "content_type": value.content_type,
            }
        else:
            fields[name] = value
    return fields


def _message(chat_id: int, **extra: Any) -> dict[str, Any]:
    return {
        "message_id": 7,
        "date": 1_700_000_000,
        "chat": {"id": chat_id, "type": "private", "first_name": "Alice"},
        **extra,
    }


@pytest.fixture
async def api() -> AsyncIterator[BotApi]:
    state = BotApi(url="")

    async def bot_method(request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        method = request.match_info["method"]
        fields = await _read_fields(request)
        state.calls.append(Received(method, request.content_type, fields))
        if method == "getMe":
            result: Any = {"id": 1, "is_bot": True, "first_name": "Mnemo", "username": "mnemo_bot"}
        elif method == "sendMessage":
            result = _message(int(fields["chat_id"]), text=fields["text"])
        elif method == "sendDocument":
            doc = fields["document"]
            result = _message(
                int(fields["chat_id"]),
                document={
                    "file_id": "f1",
                    "file_unique_id": "u1",
                    "file_name": doc["filename"],
                    "file_size": len(doc["content"]),
                },
            )
        else:
            return web.json_response(
                {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
            )
        return web.json_response({"ok": True, "result": result})

    async def hold(_request: web.Request) -> web.Response:
        state.held.set()
        await state.release.wait()
        return web.json_response({"ok": True, "result": True})

    async def file(request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        if request.query.get("chunked"):  # no Content-Length: only reading tells the size
            res = web.StreamResponse()
            res.enable_chunked_encoding()
            await res.prepare(request)
            for _ in range(size // 1000):
                await res.write(b"x" * 1000)
            await res.write_eof()
            return res
        return web.Response(body=b"x" * size)

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", bot_method)
    app.router.add_get("/file/bot{token}/{size}", file)
    app.router.add_post("/hold", hold)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        # Held handlers must return, or the runner's cleanup waits for them.
        state.release.set()
        await runner.cleanup()


@pytest.fixture
async def request_() -> AsyncIterator[AiohttpRequest]:
    req = AiohttpRequest(2)
    await req.initialize()
    try:
        yield req
    finally:
        await req.shutdown()


def _bot(base_url: str) -> Bot:
    return Bot(
        TOKEN, base_url=base_url, request=AiohttpRequest(2), get_updates_request=AiohttpRequest(1)
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_call_sends_form_parameters_and_parses_the_result(api: BotApi) -> None:
    keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("yes", callback_data="y")]])
    async with _bot(api.base_url) as bot:  # initialize calls getMe
        assert bot.username == "mnemo_bot"
        sent = await bot.send_message(CHAT, "héllo wörld", reply_markup=keyboard)

    assert sent.message_id == 7 and sent.chat.id == CHAT and sent.text == "héllo wörld"
    send = next(c for c in api.calls if c.method == "sendMessage")
    assert send.content_type == "application/x-www-form-urlencoded"
    # PTB sends every parameter as a string, non-strings JSON-encoded.
    assert send.fields["chat_id"] == str(CHAT)
    assert send.fields["text"] == "héllo wörld"
    assert json.loads(send.fields["reply_markup"]) == {
        "inline_keyboard": [[{"text": "yes", "callback_data": "y"}]]
    }


async def test_a_file_is_uploaded_as_multipart(api: BotApi) -> None:
    content = b"line one\nline two\x00\xff"
    async with _bot(api.base_url) as bot:
        sent = await bot.send_document(
            CHAT, document=content, filename="notes.txt", caption="the notes"
        )

    assert sent.document is not None and sent.document.file_name == "notes.txt"
    upload = next(c for c in api.calls if c.method == "sendDocument")
    assert upload.content_type == "multipart/form-data"
    assert upload.fields["chat_id"] == str(CHAT)
    assert upload.fields["caption"] == "the notes"
    document = upload.fields["document"]
    assert document["filename"] == "notes.txt"
    assert document["content"] == content
    assert document["content_type"] == "text/plain"


async def test_an_api_error_status_and_body_are_handed_back(
    api: BotApi, request_: AiohttpRequest
) -> None:
    status, body = await request_.do_request(f"{api.base_url}{TOKEN}/noSuchMethod", "POST")
    assert status == 404
    assert json.loads(body)["description"] == "Not Found"


async def test_a_slow_answer_times_out(api: BotApi) -> None:
    req = AiohttpRequest(2, read_timeout=0.2, write_timeout=0.1)
    await req.initialize()
    try:
        with pytest.raises(TimedOut):
            await req.do_request(f"{api.url}/hold", "POST")
        assert api.held.is_set()  # the request did reach the server: the read timed out
    finally:
        await req.shutdown()


async def test_waiting_for_a_pooled_connection_times_out(api: BotApi) -> None:
    req = AiohttpRequest(1)
    await req.initialize()
    try:
        first = asyncio.create_task(req.do_request(f"{api.url}/hold", "POST"))
        await asyncio.wait_for(api.held.wait(), scaled(5))  # the only connection is now in use
        # aiohttp's pool wait is bounded by pool + connect timeout (see do_request).
        with pytest.raises(TimedOut):
            await req.do_request(f"{api.url}/hold", "POST", pool_timeout=0.1, connect_timeout=0.1)
        # The request holding the connection is unaffected.
        api.release.set()
        status, _ = await asyncio.wait_for(first, scaled(5))
        assert status == 200
    finally:
        await req.shutdown()


async def test_a_refused_connection_is_a_network_error_without_the_token() -> None:
    bot = _bot(f"http://127.0.0.1:{_closed_port()}/bot")
    await bot.request.initialize()
    try:
        with pytest.raises(NetworkError) as caught:
            await bot.get_me()
    finally:
        await bot.request.shutdown()
    assert not isinstance(caught.value, TimedOut)
    assert "secret-token" not in str(caught.value)
    assert TOKEN not in caught.value.message


async def test_do_request_needs_initialize_and_survives_a_restart(api: BotApi) -> None:
    req = AiohttpRequest(1)
    url = f"{api.base_url}{TOKEN}/getMe"
    with pytest.raises(RuntimeError):
        await req.do_request(url, "POST")

    await req.initialize()
    await req.shutdown()
    with pytest.raises(RuntimeError):
        await req.do_request(url, "POST")

    await req.initialize()
    try:
        status, body = await req.do_request(url, "POST")
    finally:
        await req.shutdown()
    assert status == 200
    assert json.loads(body)["result"]["username"] == "mnemo_bot"


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_download_is_read_up_to_its_cap(api: BotApi, chunked: bool) -> None:
    req = AiohttpRequest(2, max_download_bytes=10_000)
    await req.initialize()
    query = "?chunked=1" if chunked else ""
    try:
        body = await req.retrieve(f"{api.url}/file/bot{TOKEN}/10000{query}")  # a GET
        assert body == b"x" * 10_000
        with pytest.raises(DownloadTooLarge) as caught:
            await req.retrieve(f"{api.url}/file/bot{TOKEN}/11000{query}")
    finally:
        await req.shutdown()
    assert TOKEN not in str(caught.value)


async def test_a_download_cap_tightens_the_limit_for_its_block(api: BotApi) -> None:
    req = AiohttpRequest(2, max_download_bytes=20_000)
    await req.initialize()
    try:
        with download_cap(5_000), pytest.raises(DownloadTooLarge):
            await req.retrieve(f"{api.url}/file/bot{TOKEN}/10000")
        assert await req.retrieve(f"{api.url}/file/bot{TOKEN}/10000") == b"x" * 10_000
    finally:
        await req.shutdown()
