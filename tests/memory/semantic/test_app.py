"""The bot with `embeddings.model` set: the worker runs beside the replies (on the
application root's scheduler), never in their way, and catches up what was stored while
embeddings were off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from bot.app.root import Root
from bot.app.services import build_services
from memory.contract.types import Session
from memory.search.semantic.store import embeddings
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, error, gated

ALICE = Session("tg:7", "default", 7, "telegram")


async def test_replies_do_not_wait_for_embeddings_and_vectors_follow(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    def settings(**embeddings_section: str):  # type: ignore[no-untyped-def]
        return make_settings(
            server,
            tmp_path / "data",
            memory={"provider": "lcm"},
            database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
            embeddings=embeddings_section,
        )

    off = await build_services(settings())
    try:
        assert off.embedding_worker is None and off.embedder is None
        session = await off.conversations.current_session(ALICE)
        assert not (await off.conversations.chat(session, "stored while embeddings were off")).error
    finally:
        await off.close()

    gate = asyncio.Event()
    server.push_embedding(gated(gate, error(500)))  # held until the reply is out, then retried
    root = Root(settings(model="fake-embed"), health=False, reflect=False)
    async with root.started() as services:
        assert "embeddings" in [job.id for job in root.scheduler.get_jobs()]
        await server.wait_for_embedding_requests(1)  # the worker found the backlog, asked
        assert server.in_flight == 1
        reply = await services.conversations.chat(session, "remember the lighthouse keeper")
        assert not reply.error and "lighthouse" in reply.text
        gate.set()
        await services.embedding_worker.next_pass()
        async with services.engine.connect() as conn:
            stored = await conn.execute(sa.select(embeddings.c.source, embeddings.c.model))
            # Four messages; the first three with the next one too.
            assert (
                sorted(stored.all())
                == [("message", "fake-embed")] * 4 + [("message_next", "fake-embed")] * 3
            )
    assert not services.embedding_worker.running  # stopped with the root
