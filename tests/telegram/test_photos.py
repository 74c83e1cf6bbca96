"""Photos through Telegram with `llm.vision` on: downloaded and shown to the model in the
turn they arrive, stored as text ("[photo]" and the caption) only. Vision off is today's
behaviour (tests/telegram/test_attachments.py)."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI, error
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.telegram.test_attachments import ALICE, answer_to, no_token_logged
from tests.telegram.test_voice import stored_messages

JPEG = b"\xff\xd8\xff\xe0fake-jpeg-of-a-cat\xff\xd9"
TOO_BIG = "That photo is too big for me: I look at photos of up to 10 MB."
ELEVEN_MB = 11 * 1024 * 1024


def last_user_content(request: dict[str, Any]) -> Any:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def image_bytes(part: dict[str, Any]) -> bytes:
    assert part["type"] == "image_url"
    url = part["image_url"]["url"]
    head, _, data = url.partition(",")
    assert head == "data:image/jpeg;base64"
    return base64.b64decode(data)


def has_image(request: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) for m in request["messages"])


async def test_a_photo_is_shown_to_the_model_once_and_stored_as_text(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_bot(tg, llm, tmp_path, vision=True):
        chat = tg.private(42)
        chat.send_photo(content=JPEG, caption="what breed is this?")
        await tg.wait_for_message(42, contains="echo: [photo]\nwhat breed is this?")
        text_part, image_part = last_user_content(llm.requests[0])
        assert text_part == {"type": "text", "text": "[photo]\nwhat breed is this?"}
        assert image_bytes(image_part) == JPEG  # the largest size, not the thumbnail
        chat.send("and its name?")
        await tg.wait_for_message(42, contains="echo: and its name?")
    second = llm.requests[1]
    assert not has_image(second)  # the photo was for its own turn
    assert [m["content"] for m in second["messages"] if m["role"] != "system"] == [
        "[photo]\nwhat breed is this?",
        "echo: [photo]\nwhat breed is this?",
        "and its name?",
    ]
    assert [c.params["file_id"] for c in tg.calls_to("getFile")] == ["file-2"]
    encoded = base64.b64encode(JPEG).decode()
    assert not any(encoded in r.getMessage() for r in caplog.records)


async def test_an_uncaptioned_photo_is_answered(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, vision=True):
        tg.private(42).send_photo(content=JPEG)
        assert await answer_to(tg, 42, 0) == "echo: [photo]"
        assert "Messages: 2 " in await stored_messages(tg, 42)
    text_part, image_part = last_user_content(llm.requests[0])
    assert text_part == {"type": "text", "text": "[photo]"}
    assert image_bytes(image_part) == JPEG


async def test_a_group_photo_addressed_to_the_bot_names_its_sender(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, vision=True):
        group = tg.group(-100)
        group.send_photo(user=ALICE, content=JPEG, caption="a cat")  # not addressed
        group.send_photo(user=ALICE, content=JPEG, caption=f"@{tg.username} which cat?")
        answer = await tg.wait_for_message(-100, contains="echo:")
    assert answer.text == "echo: [Alice] [photo]\nwhich cat?"
    assert len(llm.requests) == 1 and len(tg.calls_to("getFile")) == 1


async def test_the_largest_size_that_fits_is_taken_and_none_fitting_is_refused(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, vision=True):
        chat = tg.private(42)
        chat.send_photo(content=JPEG, file_size=ELEVEN_MB, thumbnail_size=ELEVEN_MB)
        assert await answer_to(tg, 42, 0) == TOO_BIG
        assert tg.calls_to("getFile") == [] and tg.calls_to("file") == []
        assert "Messages: 0 " in await stored_messages(tg, 42)
        chat.send_photo(content=JPEG, file_size=ELEVEN_MB, thumbnail=b"small-jpeg")
        assert await answer_to(tg, 42, 2) == "echo: [photo]"
    assert image_bytes(last_user_content(llm.requests[0])[1]) == b"small-jpeg"
    assert len(llm.requests) == 1


async def test_a_photo_that_cannot_be_downloaded_gets_one_line_and_nothing_is_stored(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_bot(tg, llm, tmp_path, vision=True):
        tg.fail("file", 502)
        tg.private(42).send_photo(content=JPEG, caption="look")
        assert "couldn't fetch" in await answer_to(tg, 42, 0)
        assert "Messages: 0 " in await stored_messages(tg, 42)
    assert llm.requests == []
    no_token_logged(caplog, tg.token)


async def test_a_server_rejecting_images_fails_the_turn_and_keeps_the_text(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push(error(400, message="image input is not supported"))
    async with running_bot(tg, llm, tmp_path, vision=True):
        tg.private(42).send_photo(content=JPEG, caption="what is it?")
        line = await answer_to(tg, 42, 0)
        assert line.startswith("Sorry, I couldn't answer") and "saved" in line
        assert "Messages: 1 " in await stored_messages(tg, 42)  # "[photo]", no answer
    assert len(llm.requests) == 1 and has_image(llm.requests[0])
