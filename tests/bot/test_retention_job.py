"""Retention on the root's scheduler: scheduled only when `memory.retention.days` is set,
every `interval`; a run forgets what is older through the forgetting path."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import Settings
from bot.jobs.retention import start_retention
from bot.runtime.scheduler import Scheduler
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, Session, utcnow
from tests.fakes.summarizer import KeepingSummarizer


@dataclass
class _Services:
    settings: Settings
    provider: Any


async def test_scheduled_only_when_days_are_set(engine: AsyncEngine) -> None:
    provider = create_provider(
        "lcm", ProviderContext(engine=engine, summarizer=KeepingSummarizer())
    )
    scheduler = Scheduler()
    assert start_retention(scheduler, _Services(Settings(), provider)) is None

    settings = Settings.model_validate({"memory": {"retention": {"days": 30, "interval": "6h"}}})
    job = start_retention(scheduler, _Services(settings, provider))
    assert job is not None and job.trigger.interval == timedelta(hours=6)

    s = Session("tg-3", "default", 3)
    now = utcnow()
    await provider.append(
        s,
        Message("user", "old Zold", created_at=now - timedelta(days=40)),
        Message("assistant", "old reply", created_at=now - timedelta(days=40)),
        Message("user", "new Znew", created_at=now),
    )
    await job.func()  # one run, as the scheduler would make it
    assert [m.content for m in await provider.load_history(s.id)] == ["new Znew"]
    await scheduler.stop()
    await provider.close()
