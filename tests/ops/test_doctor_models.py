"""`mnemo memory doctor` on the model servers, through the command line against the fake
OpenAI server: the chat model answers, refuses (its reason shown, one line, the key
masked) or cannot be reached; `--offline` asks nothing; the probe costs no usage row.
A model server's state is a note: the exit code stays about the data."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from bot.cli import main
from memory.storage.db import create_engine, migrate
from memory.storage.usage import usage_records
from tests.fakes.openai_server import FakeOpenAI, hang, llama_error, text

KEY = "sk-doctor-probe-secret-4242"


async def doctor(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    llm: dict[str, Any],
    *args: str,
    embeddings: str = "",
) -> tuple[int, str, str]:
    """`mnemo memory doctor` on a migrated SQLite database, in a thread (the fake serves
    on this loop), and how many usage rows it left."""
    db = tmp_path / "m.db"
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "database": {"url": f"sqlite+aiosqlite:///{db}"},
                "data_dir": str(tmp_path / "data"),
                "llm": {"model": "probe-model", "max_retries": 2, **llm},
                "embeddings": {"model": embeddings},
            }
        )
    )
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    try:
        await migrate(engine)
        code = await asyncio.to_thread(main, ["memory", "doctor", "--config", str(path), *args])
        async with engine.connect() as conn:
            rows = (
                await conn.execute(sa.select(sa.func.count()).select_from(usage_records))
            ).scalar()
    finally:
        await engine.dispose()
    captured = capsys.readouterr()
    assert rows == 0, "the probe must leave no usage row"
    assert KEY not in captured.out + captured.err
    return code, captured.out, captured.err


def chat_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("chat model ")]
    assert len(lines) == 1, out
    return lines[0]


async def test_doctor_says_the_chat_model_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeOpenAI() as server:
        code, out, err = await doctor(
            tmp_path, capsys, {"base_url": server.base_url, "api_key": KEY}
        )
        assert code == 0, err
        assert chat_line(out) == f"chat model probe-model at {server.base_url}: answered"
        # One request, as small as a request gets, sent the way every turn is.
        [request] = server.requests
        assert request["model"] == "probe-model"
        assert request["max_tokens"] == 1 and request["stream"] is True
        assert [m["role"] for m in request["messages"]] == ["user"]


async def test_doctor_shows_the_chat_servers_reason_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "Conversation roles must alternate user/assistant/user/assistant"
    async with FakeOpenAI() as server:
        server.push(llama_error(400, f"{reason}\n(request by {KEY})"))
        code, out, err = await doctor(
            tmp_path, capsys, {"base_url": server.base_url, "api_key": KEY}
        )
        assert len(server.requests) == 1  # a 400 is not retried (llm.max_retries is 2)
    assert code == 0, err  # a note, not a fault
    assert chat_line(out) == (
        f"chat model probe-model at {server.base_url}: refused: HTTP 400: {reason} (request by ***)"
    )


async def test_doctor_says_an_absent_chat_server_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    code, out, err = await doctor(tmp_path, capsys, {"base_url": base_url, "api_key": KEY})
    assert code == 0, err
    assert chat_line(out) == (
        f"chat model probe-model at {base_url}: "
        "unreachable (the language model could not be reached)"
    )


async def test_a_chat_server_that_never_answers_is_noted_at_the_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The probe's bound is llm.timeout_s when shorter than 30 s: doctor ends with a line.
    async with FakeOpenAI() as server:
        server.push(hang())
        code, out, err = await doctor(
            tmp_path, capsys, {"base_url": server.base_url, "api_key": KEY, "timeout_s": 0.5}
        )
    assert code == 0, err
    # The call's deadline or its read timeout, whichever the loop runs first (both 0.5 s).
    assert chat_line(out).split(": ", 1)[1] in (
        "failed (the language model did not answer within 0.5 s)",
        "unreachable (the language model timed out)",
    )


async def test_doctor_offline_asks_no_model_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeOpenAI() as server:
        code, out, err = await doctor(
            tmp_path,
            capsys,
            {"base_url": server.base_url, "api_key": KEY},
            "--offline",
            embeddings="embed-model",
        )
        assert (server.requests, server.embedding_requests) == ([], [])
    assert code == 0, err
    assert chat_line(out) == f"chat model probe-model at {server.base_url}: not probed (--offline)"
    assert (
        "embeddings: model embed-model: embedded 0 of 0 item(s), 0 pending; "
        "endpoint not probed (--offline)"
    ) in out


async def test_doctor_without_an_api_key_does_not_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeOpenAI() as server:
        code, out, err = await doctor(tmp_path, capsys, {"base_url": server.base_url})
        assert server.requests == []
    assert code == 0, err
    assert "not probed: no API key (set OPENAI_API_KEY" in chat_line(out)


async def test_doctor_probes_the_summary_model_where_it_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A summary model the server does not serve fails every compaction; the chat
    model's probe alone would never show it. Recall uses the summary model here."""
    async with FakeOpenAI() as server:
        server.push(text("OK"), llama_error(404, "model 'tiny-summarizer' not found"))
        llm = {"base_url": server.base_url, "api_key": KEY, "summary_model": "tiny-summarizer"}
        code, out, err = await doctor(tmp_path, capsys, llm)
        assert [r["model"] for r in server.requests] == ["probe-model", "tiny-summarizer"]
    assert code == 0, err
    assert chat_line(out) == f"chat model probe-model at {server.base_url}: answered"
    assert (
        f"summary and recall model tiny-summarizer at {server.base_url}: refused: HTTP 404: "
        "model 'tiny-summarizer' not found"
    ) in out.splitlines()
