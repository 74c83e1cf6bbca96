"""Fixtures of the reflect tests: a fake OpenAI server, the bot's LLM client and tool
loop (the real ones, as `mnemo run` wires them), and a provider to reflect on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import LLMSettings
from bot.jobs.reflect import ReflectConfig, Reflector
from bot.jobs.reflect.job import reflect_turn_runner
from bot.model.client import LLMClient
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import get_factory
from memory.testing.reference import provider_class
from tests.fakes.openai_server import FakeOpenAI, text


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    # Unscripted requests get a plain "no changes" answer (a review that writes nothing).
    async with FakeOpenAI(responder=lambda body: text("no changes")) as server:
        yield server


@pytest.fixture
async def llm(fake_llm: FakeOpenAI) -> AsyncIterator[LLMClient]:
    client = LLMClient(LLMSettings(base_url=fake_llm.base_url, api_key="test", max_retries=0))
    yield client
    await client.close()


# reference: history in RAM, sessions found through SessionManager.list_info;
# lcm: history in the shared SQL tables, sessions found by one query (simple, which
# shares those tables, is used by the replica, entry-point and app tests).
PROVIDERS = ["reference", "lcm"]


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path):
    if request.param == "reference":
        return provider_class(False, False)(engine)
    # Through the registry, exactly as the bot creates it.
    return get_factory(request.param)(
        ProviderContext(
            engine=engine,
            summarizer=StaticSummarizer(),
            data_dir=tmp_path,
            config={"store_dir": str(tmp_path / "notes")},
        )
    )


def make_reflector(
    engine: AsyncEngine,
    provider,
    llm: LLMClient,
    *,
    batch: int = 5,
    interval_s: float = 3600,
    replica_id: str | None = None,
) -> Reflector:
    return Reflector(
        engine,
        provider,
        reflect_turn_runner(llm, max_rounds=4),
        ReflectConfig(batch=batch, interval_s=interval_s),
        replica_id=replica_id,
    )


@pytest.fixture
def reflector(engine: AsyncEngine, provider, llm: LLMClient) -> Reflector:
    return make_reflector(engine, provider, llm)
