"""How reflect is started: on the application's scheduler (as `mnemo run` does), and
`mnemo reflect --once` from the shell (a real subprocess against the fake OpenAI server)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.app.run import reflect_command
from bot.config.settings import load_settings
from bot.jobs.reflect import ReflectConfig, Reflector, run_forever, schedule_reflect
from bot.jobs.reflect.models import ReflectSlot
from bot.runtime.scheduler import Scheduler
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import get_factory
from memory.contract.types import Message, Session
from memory.storage.db import create_engine, migrate
from memory.testing.databases import temp_engine
from tests.fakes.openai_server import text, tool_call
from tests.reflect.conftest import make_reflector

MNEMO = Path(sys.executable).with_name("mnemo")


async def _slots(engine) -> list[int]:
    table = ReflectSlot.__table__
    async with engine.connect() as conn:
        return sorted((await conn.execute(sa.select(table.c.slot))).scalars())


def simple_provider(engine, tmp_path: Path):
    return get_factory("simple")(
        ProviderContext(
            engine=engine,
            summarizer=StaticSummarizer(),
            config={"store_dir": str(tmp_path / "notes")},
        )
    )


async def test_the_app_scheduler_runs_a_cycle_per_slot(tmp_path: Path, llm, fake_llm) -> None:
    async with temp_engine("sqlite", tmp_path) as engine:
        provider = simple_provider(engine, tmp_path)
        await provider.append(Session("s1", "default", 1, "cli"), Message("user", "I like jazz."))
        reflector = make_reflector(engine, provider, llm, interval_s=0.2)
        reports, three = [], asyncio.Event()
        scheduled = reflector.run_scheduled

        async def observed(now=None):  # what the job calls, recorded
            reports.append(await scheduled(now))
            if len(reports) >= 3:
                three.set()
            return reports[-1]

        reflector.run_scheduled = observed
        scheduler = Scheduler()
        job = schedule_reflect(scheduler, reflector)
        assert job is not None and job.name == "reflect"
        scheduler.start()
        try:
            async with asyncio.timeout(20):
                await three.wait()
        finally:
            await scheduler.stop(grace_s=20)
        # Each run claimed its slot (a run delayed past a boundary may meet a taken one).
        assert await _slots(engine) == sorted(r.slot for r in reports if not r.skipped)
    assert len(fake_llm.requests) == 1  # the one session, reviewed once over the cycles


async def test_disabled_schedules_nothing(tmp_path: Path, caplog) -> None:
    async with temp_engine("sqlite", tmp_path) as engine:
        reflector = Reflector(
            engine, simple_provider(engine, tmp_path), lambda *a: None, ReflectConfig(enabled=False)
        )
        scheduler = Scheduler()
        with caplog.at_level(logging.INFO, logger="bot.jobs.reflect"):
            assert schedule_reflect(scheduler, reflector) is None
    assert scheduler.get_jobs() == []
    assert [r.getMessage() for r in caplog.records] == [
        "reflect: disabled (reflect.enabled is false)"
    ]


async def _mnemo(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(MNEMO), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_mnemo_reflect_once(tmp_path: Path, fake_llm, capsys) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'mnemo.db'}"
    config = tmp_path / "config.yaml"
    config.write_text(
        f'database: {{url: "{db}"}}\n'
        f'llm: {{base_url: "{fake_llm.base_url}", api_key: test, max_retries: 0}}\n'
        f'memory: {{provider: simple, simple: {{store_dir: "{tmp_path / "notes"}"}}}}\n',
        encoding="utf-8",
    )
    engine = create_engine(db)
    try:
        await migrate(engine)
        provider = simple_provider(engine, tmp_path)
        await provider.append(
            Session("tg:42", "default", 42, "telegram"),
            Message("user", "My name is Rui."),
            Message("assistant", "Hi Rui!"),
        )
        fake_llm.push(
            tool_call("memory", {"action": "profile_update", "content": "Name: Rui"}),
            text("profile updated"),
        )

        code, out, err = await _mnemo("reflect", "--once", "--config", str(config))
        assert code == 0, err
        assert "1 session(s) reviewed, 1 change(s) written, 0 failed" in out
        assert "tg:42: 1 change(s)" in out
        assert await provider.get_profile(42, "default") == "Name: Rui"
        [review, row] = await provider.read_changelog(42, "default")
        assert (row.source, row.session_id) == ("reflect", "tg:42")
        assert (review.scope, review.session_id) == ("reflect", "tg:42")

        # The same command in-process (a subprocess costs seconds of imports).
        assert await reflect_command(load_settings(config), once=True) == 0
        assert "0 session(s) reviewed" in capsys.readouterr().out
        assert len(fake_llm.requests) == 2  # the second run asked the model nothing

        # Disabled schedules only: an explicit --once still runs (cron's way of doing it).
        config.write_text(config.read_text() + "reflect: {enabled: false}\n")
        await provider.append(
            Session("tg:42", "default", 42, "telegram"), Message("user", "I moved to Porto.")
        )
        fake_llm.push(text("nothing to change"))
        assert await reflect_command(load_settings(config), once=True) == 0
        assert "1 session(s) reviewed" in capsys.readouterr().out
        assert len(fake_llm.requests) == 3
        assert await reflect_command(load_settings(config), once=False) == 0
        assert "reflect is disabled" in capsys.readouterr().out
        assert len(fake_llm.requests) == 3
    finally:
        await engine.dispose()


async def test_worker_runs_until_stopped(tmp_path: Path, llm, fake_llm) -> None:
    """`mnemo reflect` without --once: its own APScheduler, until the stop event."""
    async with temp_engine("sqlite", tmp_path) as engine:
        provider = simple_provider(engine, tmp_path)
        await provider.append(Session("s1", "default", 1, "cli"), Message("user", "I row."))
        reflector = make_reflector(engine, provider, llm, interval_s=0.2)
        reports, stop = [], asyncio.Event()
        scheduled = reflector.run_scheduled

        async def observed(now=None):
            reports.append(await scheduled(now))
            if len(reports) >= 2:
                stop.set()
            return reports[-1]

        reflector.run_scheduled = observed
        async with asyncio.timeout(20):
            await run_forever(reflector, stop)
        assert await _slots(engine) == sorted(r.slot for r in reports if not r.skipped)
    assert len(fake_llm.requests) == 1
