"""The conformance kit of memory/testing, run against lcm on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from memory.contract.capabilities import ProviderContext
from memory.testing.conformance import ProviderConformance
from plugins.lcm import create


class TestLcmConformance(ProviderConformance):
    @pytest.fixture
    async def provider(self, engine, tmp_path, summarizer):
        p = create(
            ProviderContext(
                engine=engine,
                summarizer=summarizer,
                data_dir=tmp_path,
                config={"keep_tail": 4, "leaf_chunk_size": 4},
            )
        )
        yield p
        await p.close()
