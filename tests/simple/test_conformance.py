"""The conformance kit, run for the simple provider on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import Provider, ProviderContext, Summarizer
from memory.testing.conformance import ProviderConformance
from plugins.simple import create


class TestSimpleConformance(ProviderConformance):
    @pytest.fixture
    async def provider(
        self, engine: AsyncEngine, tmp_path: Path, summarizer: Summarizer
    ) -> AsyncIterator[Provider]:
        provider = create(
            ProviderContext(
                engine=engine,
                summarizer=summarizer,
                data_dir=tmp_path,
                config={"store_dir": str(tmp_path / "memory"), "keep_tail": 4},
            )
        )
        yield provider
        await provider.close()
