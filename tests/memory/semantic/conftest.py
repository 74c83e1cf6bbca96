"""Fixtures of the semantic-search tests: the fake embeddings server, an Embedder on it,
and the lcm and simple providers built with it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.search.semantic.client import Embedder
from tests.fakes.openai_server import FakeOpenAI

MODEL = "fake-embed"


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


EmbedderFactory = Callable[..., Embedder]


@pytest.fixture
async def make_embedder(server: FakeOpenAI) -> AsyncIterator[EmbedderFactory]:
    made: list[Embedder] = []

    def factory(model: str = MODEL, **kw: Any) -> Embedder:
        kw = {"batch_size": 4, "max_retries": 2, "backoff_s": 0.0, "timeout_s": 5, **kw}
        embedder = Embedder(model, base_url=server.base_url, api_key="test-key", **kw)
        made.append(embedder)
        return embedder

    yield factory
    for embedder in made:
        await embedder.close()


@pytest.fixture
def embedder(make_embedder: EmbedderFactory) -> Embedder:
    return make_embedder()


ProviderFactory = Callable[..., Any]


@pytest.fixture
async def make_provider(tmp_path: Path) -> AsyncIterator[ProviderFactory]:
    """`make_provider(engine, name, embedder=None, **context)`: lcm or simple (notes and
    the on-disk vector index under tmp_path); `context` overrides ProviderContext fields."""
    made: list[Any] = []

    def factory(
        engine: AsyncEngine, name: str, embedder: Embedder | None = None, **context: Any
    ) -> Any:
        config: dict[str, Any] = {"keep_tail": 2}
        if name == "simple":
            config["store_dir"] = str(tmp_path / "notes")
        ctx = ProviderContext(
            engine=engine,
            summarizer=TruncatingSummarizer(),
            data_dir=tmp_path,
            config=config,
            embedder=embedder,
            **context,
        )
        provider = create_provider(name, ctx)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.close()
