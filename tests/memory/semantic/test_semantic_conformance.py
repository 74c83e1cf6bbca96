"""The hybrid-search conformance kit (memory/testing/semantic_conformance.py) for lcm and
simple, on SQLite and PostgreSQL, against the fake embeddings server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.search.semantic.client import Embedder
from memory.testing.semantic_conformance import SemanticConformance
from tests.memory.semantic.conftest import EmbedderFactory, ProviderFactory


class _Kit(SemanticConformance):
    name = ""

    @pytest.fixture
    def embedder(self, make_embedder: EmbedderFactory) -> Embedder:
        return make_embedder()

    @pytest.fixture
    def make_provider(  # type: ignore[override]
        self, engine: AsyncEngine, make_provider: ProviderFactory
    ) -> Callable[..., Any]:
        return lambda embedder: make_provider(engine, self.name, embedder)


class TestLcmSemanticConformance(_Kit):
    name = "lcm"


class TestSimpleSemanticConformance(_Kit):
    name = "simple"
