"""Helpers of the lcm tests: a provider factory and deterministic summarizers."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import SummarizerError, TruncatingSummarizer
from memory.contract.capabilities import ProviderContext, Summarizer
from memory.contract.types import Message, Session, SummarizeOptions
from plugins.lcm import LcmProvider, create

MakeProvider = Callable[..., LcmProvider]


class CountingSummarizer:
    """Deterministic: `S<n>[<first words>]`, so a summary is recognisable and small.
    `fail_on` makes that call (1-based) raise; `gate` makes the first call wait for it."""

    def __init__(self, fail_on: int | None = None, gate: asyncio.Event | None = None) -> None:
        self.calls = 0
        self.fail_on = fail_on
        self.gate = gate
        self.entered = asyncio.Event()
        self.inputs: list[tuple[str, SummarizeOptions]] = []

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        self.inputs.append((text, opts))
        if self.calls == 1 and self.gate is not None:
            self.entered.set()
            await self.gate.wait()
        if self.fail_on is not None and self.calls == self.fail_on:
            raise SummarizerError("told to fail")
        words = " ".join(text.split()[:6])
        return f"S{self.calls}[{words}]"


@pytest.fixture
async def make_provider(engine: AsyncEngine) -> AsyncIterator[MakeProvider]:
    made: list[LcmProvider] = []

    def factory(summarizer: Summarizer | None = None, **config: int) -> LcmProvider:
        provider = create(
            ProviderContext(
                engine=engine,
                summarizer=summarizer or TruncatingSummarizer(),
                config={"keep_tail": 4, "leaf_chunk_size": 4, **config},
            )
        )
        made.append(provider)
        return provider

    yield factory
    for p in made:
        await p.close()


def session(label: str = "s", user_id: int = 7, agent_id: str = "default") -> Session:
    return Session(id=f"{label}-{user_id}-{agent_id}", agent_id=agent_id, user_id=user_id)


def numbered(n: int, start: int = 0, word: str = "") -> list[Message]:
    return [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"msg{i} {word} " + "x" * 40)
        for i in range(start, start + n)
    ]


async def dump_tables(engine: AsyncEngine) -> dict[str, list[tuple]]:
    """Every row of every table (FTS shadow tables included): byte-for-byte comparisons."""

    def read(sync_conn) -> dict[str, list[tuple]]:  # type: ignore[no-untyped-def]
        names = sa.inspect(sync_conn).get_table_names()
        out = {}
        for name in names:
            rows = sync_conn.exec_driver_sql(f'SELECT * FROM "{name}"').all()
            out[name] = sorted((tuple(r) for r in rows), key=repr)
        return out

    async with engine.connect() as conn:
        return await conn.run_sync(read)


SUMMARY_TAG = re.compile(r'^<summary id="(sum_[0-9a-f]+)"')


def summary_id_of(msg: Message) -> str | None:
    """The id of a summary injected by the assembler, None for a real message."""
    m = SUMMARY_TAG.match(msg.content) if msg.role == "user" else None
    return m.group(1) if m else None


async def context_view(provider: LcmProvider, s: Session) -> list[str]:
    """The whole context window: summary ids and message texts, in order."""
    out = []
    for msg in await provider.assemble(s, 10**9, 10**6):
        out.append(summary_id_of(msg) or msg.text())
    return out


async def expand_all(provider: LcmProvider, summary_id: str, s: Session | None = None) -> list[str]:
    """The source messages under `summary_id`, recursively, in order (as message text)."""
    result = await provider.expand(summary_id, 10**9, s)
    assert not result.truncated
    if result.messages:
        return [m.content for m in result.messages]
    out: list[str] = []
    for child in result.children:
        out += await expand_all(provider, child.summary_id, s)
    return out


async def reconstruct(provider: LcmProvider, s: Session) -> list[str]:
    """Every context item expanded back to messages: must be the whole history."""
    out: list[str] = []
    for item in await context_view(provider, s):
        out += await expand_all(provider, item) if item.startswith("sum_") else [item]
    return out
