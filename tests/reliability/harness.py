"""The real bot in-process (build_services: real provider, real database, real LLM client;
python-telegram-bot against the fake Bot API), plus what the reliability tests share:
a scripted model that calls the memory tool on request, row counts of every table, and
the stored history of a session.

    async with live_bot(tmp_path, tg, llm, db_kind="sqlite", provider="simple") as bot:
        tg.private(42).send("hello")
        ...

The scripted model (`scripted`): a user message containing `TOOL {json}` makes the model
call the `memory` tool with exactly that JSON as its arguments; after a tool result it
answers `tool said: <result>`; anything else is echoed (`echo: <text>`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from telegram.ext import Application

from bot.app.services import Services, build_services
from bot.channels.telegram.channel import build_application, running
from bot.config.settings import Settings
from bot.model.client import LLMClient
from memory.compaction.summarizer import StaticSummarizer
from memory.storage.history import conversations, messages
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI, Response, echo, text, tool_call
from tests.fakes.telegram_server import FakeTelegram
from tests.waits import eventually

API_KEY = "sk-test-SECRET-api-key-0123456789"
TOOL_MARK = "TOOL "


def scripted(body: dict[str, Any]) -> Response:
    """The responder of the fake OpenAI server used by these tests (module doc)."""
    msgs = body.get("messages") or []
    last = msgs[-1] if msgs else {}
    if last.get("role") == "tool":
        return text("tool said: " + str(last.get("content") or "")[:3000])
    content = str(last.get("content") or "") if last.get("role") == "user" else ""
    at = content.find(TOOL_MARK)
    if at >= 0 and body.get("tools"):
        return tool_call("memory", content[at + len(TOOL_MARK) :])
    return echo(body)


def tool_text(args: dict[str, Any] | str) -> str:
    """The user text that makes the scripted model call the memory tool with `args`."""
    return TOOL_MARK + (args if isinstance(args, str) else json.dumps(args))


def bot_settings(
    tmp_path: Path,
    tg: FakeTelegram,
    model: FakeOpenAI,
    db_url: str,
    *,
    provider: str = "simple",
    **sections: dict[str, Any],
) -> Settings:
    data = tmp_path / "data"
    raw: dict[str, Any] = {
        "database": {"url": db_url},
        "data_dir": str(data),
        "llm": {"base_url": model.base_url, "api_key": API_KEY, "timeout_s": 3, "max_retries": 2},
        "telegram": {
            "token": tg.token,
            "base_url": tg.base_url,
            "concurrent_updates": 32,
            "stream_edit_interval_s": 1,
        },
        "memory": {
            "provider": provider,
            "budget_tokens": 4000,
            "fresh_tail": 4,
            "simple": {"store_dir": str(data / "memory")},
            "lcm": {"leaf_chunk_size": 2},
        },
        "compaction": {"max_tokens": -1, "keep_tail": 2},
        "reflect": {"enabled": False},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return Settings.model_validate(raw)


@dataclass
class LiveBot:
    services: Services
    app: Application
    settings: Settings

    @property
    def engine(self) -> AsyncEngine:
        return self.services.engine

    @property
    def provider(self) -> Any:
        return self.services.provider


@asynccontextmanager
async def live_bot(
    tmp_path: Path,
    tg: FakeTelegram,
    model: FakeOpenAI,
    *,
    db_kind: str = "sqlite",
    db_url: str | None = None,
    provider: str = "simple",
    summarizer: Any = None,
    record_updates: bool = False,
    **sections: dict[str, Any],
) -> AsyncIterator[LiveBot]:
    """`record_updates`: handled update ids go to the database, as `mnemo run` does
    (each text update's record in its user message's transaction)."""
    async with _url(db_kind, tmp_path, db_url) as url:
        settings = bot_settings(tmp_path, tg, model, url, provider=provider, **sections)
        client = LLMClient(settings.llm, backoff_s=0.01, backoff_cap_s=0.05)
        services = await build_services(
            settings,
            llm=client,
            summarizer=summarizer or StaticSummarizer("summary: the talk so far"),
        )
        try:
            app = build_application(
                settings, services.conversations, engine=services.engine if record_updates else None
            )
            async with running(app, settings, poll_timeout=1):
                yield LiveBot(services, app, settings)
        finally:
            await services.close()


@asynccontextmanager
async def _url(db_kind: str, tmp_path: Path, given: str | None) -> AsyncIterator[str]:
    if given is not None:
        yield given
        return
    async with temp_database_url(db_kind, tmp_path) as url:
        yield url


async def table_counts(engine: AsyncEngine) -> dict[str, int]:
    """Rows in every table of the database (whatever migrations created)."""

    def names(sync_conn: Any) -> list[str]:
        return sorted(sa.inspect(sync_conn).get_table_names())

    async with engine.connect() as conn:
        tables = await conn.run_sync(names)
        out = {}
        for name in tables:
            if name == "alembic_version" or "_fts" in name:
                continue  # FTS shadow tables merge and shrink on their own
            out[name] = (await conn.execute(sa.text(f'SELECT count(*) FROM "{name}"'))).scalar_one()
    return out


async def stored_history(engine: AsyncEngine, session_id: str) -> list[tuple[str, str]]:
    """(role, content) of every stored message of `session_id`, in order."""
    query = (
        sa.select(messages.c.role, messages.c.content)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(conversations.c.session_id == session_id)
        .order_by(messages.c.seq)
    )
    async with engine.connect() as conn:
        return [(r.role, r.content) for r in (await conn.execute(query)).all()]


async def answered_history(
    engine: AsyncEngine, session_id: str, answer: str
) -> list[tuple[str, str]]:
    """`stored_history` once it ends with the assistant's `answer`. Polled: a streamed
    answer is seen in the chat before its turn's rows commit (bot/conversation/turns.py appends the
    answer once the model has finished)."""
    return await eventually(
        lambda: stored_history(engine, session_id),
        lambda history: history[-1:] == [("assistant", answer)],
        what=f"the answer {answer!r} stored in {session_id}",
    )


def session_id(user_or_chat: int, thread: int | None = None, agent: str = "default") -> str:
    sid = f"{agent}:telegram:{user_or_chat}"
    return sid if thread is None else f"{sid}:{thread}"
