"""The application root (`bot.app.root.Root`): it runs a channel on the real services, stops
it cleanly on SIGTERM, keeps reflect and the embeddings worker on its one scheduler, and
ends those jobs before the pool closes."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from apscheduler.events import EVENT_JOB_EXECUTED

from bot.app.root import Root
from bot.app.services import Services
from bot.channels.base import Channel, Limits, unless_stopped
from bot.channels.terminal import Terminal, terminal_session
from bot.config.settings import Settings
from bot.jobs.reflect.models import ReflectSlot
from memory.contract.types import Session
from memory.search.semantic.store import embeddings
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, gated, text

ALICE = Session("fake:7", "default", 7, "fake")


class FakeChannel:
    """A channel of the test's own: messages put in `inbox` become turns of the pool."""

    name = "fake"
    limits = Limits(max_message=500, markdown=False)

    def __init__(self, services: Services) -> None:
        self.conversations = services.conversations
        self.inbox: asyncio.Queue[str] = asyncio.Queue()
        self.replies: asyncio.Queue[str] = asyncio.Queue()
        self.running = asyncio.Event()
        self.ended_by_stop: bool | None = None

    async def _serve(self) -> None:
        while True:
            line = await self.inbox.get()
            session = await self.conversations.current_session(ALICE)
            await self.replies.put((await self.conversations.chat(session, line)).text)

    async def run(self, stop: asyncio.Event) -> int:
        self.running.set()
        finished = await unless_stopped(self._serve(), stop)
        self.ended_by_stop = not finished and stop.is_set()
        return 0


def lcm_settings(server: FakeOpenAI, tmp_path: Path, **sections: dict[str, Any]) -> Settings:
    return make_settings(
        server,
        tmp_path / "data",
        memory={"provider": "lcm"},
        database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
        **sections,
    )


async def test_a_channel_answers_and_a_sigterm_stops_it_cleanly(
    llm_server: FakeOpenAI, tmp_path: Path
) -> None:
    made: list[FakeChannel] = []
    built = asyncio.Event()
    closed: list[bool] = []

    def fake(services: Services) -> Channel:
        close = services.close

        async def observed_close() -> None:
            closed.append(made[0].ended_by_stop is not None)  # the channel had ended
            await close()

        services.close = observed_close  # type: ignore[method-assign]
        made.append(FakeChannel(services))
        built.set()
        return made[-1]

    root = Root(lcm_settings(llm_server, tmp_path), [fake])
    run = asyncio.create_task(root.run())
    async with asyncio.timeout(30):
        await built.wait()  # once the services are up
        channel = made[0]
        await channel.running.wait()
        assert isinstance(channel, Channel)
        channel.inbox.put_nowait("hello through a channel of my own")
        assert "hello through a channel of my own" in await channel.replies.get()  # echoed

        os.kill(os.getpid(), signal.SIGTERM)  # the root's handler, not the default's
        assert await run == 0
    assert channel.ended_by_stop is True
    assert closed == [True]  # the services closed once, after the channel ended
    assert not root.scheduler.running


async def test_reflect_and_the_embeddings_worker_run_on_the_roots_one_scheduler(
    llm_server: FakeOpenAI, tmp_path: Path
) -> None:
    settings = lcm_settings(llm_server, tmp_path, embeddings={"model": "fake-embed"})
    root = Root(settings, health=False)
    async with root.started() as services:
        jobs = sorted(job.id for job in root.scheduler.get_jobs())
        assert jobs == ["embeddings", "followups", "reflect"]  # followups.enabled by default
        assert services.followups is not None
        session = await services.conversations.current_session(ALICE)
        assert not (await services.conversations.chat(session, "I play the cello")).error
        await services.embedding_worker.next_pass()  # a pass of the scheduler's job
        async with services.engine.connect() as conn:
            stored = (await conn.execute(sa.select(embeddings.c.source))).scalars().all()
        assert sorted(stored) == ["message", "message", "message_next"]  # and the pair

        asked, reflected = len(llm_server.requests), asyncio.Event()
        root.scheduler.add_listener(
            lambda event: event.job_id == "reflect" and reflected.set(), EVENT_JOB_EXECUTED
        )
        llm_server.push(text("nothing to change"))
        root.scheduler.get_job("reflect").modify(next_run_time=datetime.now(UTC))  # due now
        async with asyncio.timeout(20):
            await reflected.wait()
        assert len(llm_server.requests) == asked + 1  # reflect reviewed the session
        assert "I play the cello" in str(llm_server.requests[-1])
        async with services.engine.connect() as conn:
            slots = (await conn.execute(sa.select(ReflectSlot.__table__.c.slot))).scalars()
            assert len(slots.all()) == 1


async def test_jobs_in_flight_are_ended_before_the_pool_closes(
    llm_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.app.root.JOB_GRACE_S", 0.0)
    root = Root(lcm_settings(llm_server, tmp_path), health=False)
    seen_at_close: list[tuple[bool, int]] = []
    gate = asyncio.Event()  # never set: the reflect cycle waits on the model
    async with root.started() as services:
        close = services.conversations.close

        async def observed_close() -> None:
            seen_at_close.append((root.scheduler.running, root.scheduler.in_flight))
            await close()

        services.conversations.close = observed_close  # type: ignore[method-assign]
        session = await services.conversations.current_session(ALICE)
        assert not (await services.conversations.chat(session, "I collect stamps")).error
        asked = len(llm_server.requests)
        llm_server.push(gated(gate, text("never sent")))
        root.scheduler.get_job("reflect").modify(next_run_time=datetime.now(UTC))
        await llm_server.wait_for_requests(asked + 1)
        assert root.scheduler.in_flight == 1  # the cycle is waiting on the model
    assert seen_at_close == [(False, 0)]  # stopped and ended before the pool closed


async def test_command_answers_are_clipped_to_the_channels_declared_limit(
    llm_server: FakeOpenAI, tmp_path: Path
) -> None:
    class NarrowTerminal(Terminal):  # a channel that takes 120 characters a message
        limits = Limits(max_message=120, markdown=False)

    base = terminal_session("default", "main")
    out = io.StringIO()
    root = Root(
        lcm_settings(llm_server, tmp_path),
        [
            lambda services: NarrowTerminal(
                services.conversations, base, stdin=io.StringIO("/help\n"), stdout=out
            )
        ],
        health=False,
        reflect=False,
    )
    assert await root.run() == 0  # the channel ends at end of input, and so does the root
    answer = out.getvalue().strip()
    assert answer.startswith("Commands:") and answer.endswith("(cut to fit one message)")
    assert len(answer) <= 120
