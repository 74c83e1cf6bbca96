"""`/healthz` and `/metrics` over real HTTP, and the recorders behind the metrics."""

from __future__ import annotations

import json

import aiohttp
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.app.services import build_services
from bot.config.settings import HealthSettings
from bot.runtime import metrics
from bot.runtime.health import HealthServer, start_health_server
from memory.contract.tracing import with_tracing
from memory.contract.types import CompactionResult, Message, Session
from memory.storage.db import create_engine
from memory.testing.databases import temp_database_url
from memory.testing.reference import ReferenceProvider
from tests.fakes.openai_server import FakeOpenAI
from tests.ops.conftest import make_settings

# Port 0 (any free port) is for tests only: the config itself insists on a real port.
LOCAL = HealthSettings.model_construct(enabled=True, listen="127.0.0.1", port=0)


async def _get(server: HealthServer, path: str) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.port}{path}") as resp,
    ):
        return resp.status, resp.headers["Content-Type"], await resp.text()


async def test_healthz_is_200_when_the_database_answers(engine: AsyncEngine) -> None:
    async with HealthServer(engine, LOCAL, info={"provider": "lcm"}) as server:
        status, ctype, body = await _get(server, "/healthz")
    assert status == 200 and ctype.startswith("application/json")
    doc = json.loads(body)
    assert doc["status"] == "ok" and doc["database"] == "ok" and doc["provider"] == "lcm"


async def test_healthz_is_503_when_the_database_is_down() -> None:
    # Nothing listens on port 1: every connection attempt is refused.
    dead = create_engine("postgresql+psycopg://postgres:hunter2@127.0.0.1:1/nothing")
    try:
        async with HealthServer(dead, LOCAL) as server:
            status, _, body = await _get(server, "/healthz")
    finally:
        await dead.dispose()
    assert status == 503
    assert '"status": "unavailable"' in body
    assert "hunter2" not in body and "127.0.0.1:1" not in body  # no URL, no secret


async def test_metrics_serve_what_was_recorded(engine: AsyncEngine) -> None:
    turns_before = metrics.sample("mnemo_turns_total", {"outcome": "ok"})
    errors_before = metrics.sample("mnemo_llm_errors_total", {"kind": "chat", "error": "LLMError"})
    metrics.record_turn(1.5, ok=True)
    metrics.record_turn(0.2, ok=True)
    metrics.record_llm_call(0.7, kind="chat", error="LLMError")
    metrics.record_compaction(
        "lcm",
        "full",
        CompactionResult(
            leaf_summaries_created=1, messages_compacted=10, tokens_before=5000, tokens_after=800
        ),
    )
    metrics.record_reflect_run("ok")
    async with HealthServer(engine, LOCAL) as server:
        status, ctype, body = await _get(server, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert f'mnemo_turns_total{{outcome="ok"}} {turns_before + 2}' in body
    assert f'mnemo_llm_errors_total{{error="LLMError",kind="chat"}} {errors_before + 1}' in body
    assert 'mnemo_compactions_total{mode="full",outcome="changed",provider="lcm"}' in body
    assert 'mnemo_compaction_tokens_before_sum{provider="lcm"}' in body
    assert 'mnemo_reflect_runs_total{outcome="ok"}' in body
    assert "process_resident_memory_bytes" in body


async def test_database_errors_are_counted(engine: AsyncEngine) -> None:
    metrics.instrument_engine(engine)
    metrics.instrument_engine(engine)  # idempotent: one listener, not two
    before = sum(
        s.value
        for m in metrics.REGISTRY.collect()
        if m.name == "mnemo_db_errors"
        for s in m.samples
        if s.name == "mnemo_db_errors_total"
    )
    with pytest.raises(sa.exc.DBAPIError):
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT * FROM no_such_table"))
    after = sum(
        s.value
        for m in metrics.REGISTRY.collect()
        if m.name == "mnemo_db_errors"
        for s in m.samples
        if s.name == "mnemo_db_errors_total"
    )
    assert after == before + 1


async def test_trace_hook_counts_provider_operations(engine: AsyncEngine) -> None:
    from memory.compaction.summarizer import StaticSummarizer
    from memory.contract.capabilities import ProviderContext

    inner = ReferenceProvider(ProviderContext(engine=engine, summarizer=StaticSummarizer()))
    provider = with_tracing(inner, metrics.trace_hook)
    labels = {"provider": inner.name, "operation": "append", "outcome": "ok"}
    before = metrics.sample("mnemo_memory_operations_total", labels)
    session = Session("s", "a", 1)
    await provider.append(session, Message("user", "hi"))
    await provider.append(session, Message("assistant", "hello"))
    assert metrics.sample("mnemo_memory_operations_total", labels) == before + 2


async def test_disabled_endpoint_is_not_started(engine: AsyncEngine) -> None:
    assert await start_health_server(engine, HealthSettings(enabled=False)) is None
    server = await start_health_server(engine, LOCAL, provider="simple")
    assert server is not None
    try:
        assert (await _get(server, "/healthz"))[0] == 200
    finally:
        await server.stop()


async def test_a_real_turn_and_compaction_are_counted(tmp_path) -> None:
    turns = ("mnemo_turns_total", {"outcome": "ok"})
    chat = ("mnemo_llm_request_duration_seconds_count", {"kind": "chat"})
    appends = (
        "mnemo_memory_operations_total",
        {"provider": "simple", "operation": "append", "outcome": "ok"},
    )
    compactions = (
        "mnemo_compactions_total",
        {"provider": "simple", "mode": "full", "outcome": "changed"},
    )
    before = {
        name: metrics.sample(*key)
        for name, key in {
            "turns": turns,
            "chat": chat,
            "appends": appends,
            "compactions": compactions,
        }.items()
    }
    async with temp_database_url("sqlite", tmp_path) as url, FakeOpenAI() as llm:
        services = await build_services(make_settings(url, tmp_path, llm_url=llm.base_url))
        try:
            session = Session("tg:counted", "default", 77, "telegram")
            for i in range(3):
                assert not (await services.conversations.chat(session, f"hello {i}")).error
            await services.conversations.compact(session)
        finally:
            await services.close()
    assert metrics.sample(*turns) == before["turns"] + 3
    assert metrics.sample(*chat) == before["chat"] + 3
    assert metrics.sample(*appends) == before["appends"] + 6  # user message, then the reply
    assert metrics.sample(*compactions) == before["compactions"] + 1
