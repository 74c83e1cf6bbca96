"""`/compact` on the lcm provider with a summarizer that fails part way: the user learns
that the work done is kept and that the rest failed, and a second `/compact` finishes."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.conversation.commands import handle_command
from memory.compaction.summarizer import SummarizerError
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, Session, SummarizeOptions
from tests.bot.conftest import PoolFactory

ALICE = Session(id="default:test:1", user_id=1, channel="test")


class FailsOnCall:
    """Answers every call but the `fail_on`-th (1-based), which raises."""

    def __init__(self, fail_on: int | None) -> None:
        self.fail_on, self.calls = fail_on, 0

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        if self.calls == self.fail_on:
            raise SummarizerError("the model is flaky today")
        return f"summary {self.calls}"


def _compactions(outcome: str) -> float:
    from bot.runtime.metrics import REGISTRY

    labels = {"provider": "lcm", "mode": "full", "outcome": outcome}
    return REGISTRY.get_sample_value("mnemo_compactions_total", labels) or 0.0


def _pool(engine: AsyncEngine, make_pool: PoolFactory, fail_on: int | None, tmp_path):  # noqa: ANN001, ANN202
    config = {"keep_tail": 2, "leaf_chunk_size": 2}
    ctx = ProviderContext(
        engine=engine,
        summarizer=FailsOnCall(fail_on),
        agent_id="default",
        data_dir=tmp_path / "data",
        config=config,
    )
    return make_pool(engine, provider=create_provider("lcm", ctx))


async def test_compact_that_fails_part_way_says_what_was_kept(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory, tmp_path
) -> None:  # noqa: ANN001
    flaky = _pool(sqlite_engine, make_pool, 11, tmp_path)
    await flaky.provider.append(  # 18 messages: 16 outside the tail
        ALICE,
        *(
            Message("user" if i % 2 == 0 else "assistant", f"line {i} " + "x" * 80)
            for i in range(18)
        ),
    )
    before = (await flaky.provider.stats(ALICE)).context_tokens
    # Round 1: 8 leaves (calls 1-8) then 2 condensed (9-10); round 2's only call fails.
    counted = {o: _compactions(o) for o in ("changed", "error")}
    answer = await handle_command(flaky, ALICE, "compact", "", is_admin=False)
    assert answer.startswith("Compaction stopped part way: what it had done is kept"), answer
    # The kept rounds count as a compaction that changed something, the rest as an error.
    assert {o: _compactions(o) - n for o, n in counted.items()} == {"changed": 1, "error": 1}
    assert "Compacted 16 messages into 10 summaries (8 leaf, 2 condensed)" in answer
    assert "/compact again" in answer and "flaky" not in answer  # the cause goes to the log
    kept = (await flaky.provider.stats(ALICE)).context_tokens
    assert f"Context: {before} → {kept} tokens" in answer and kept < before

    working = _pool(sqlite_engine, make_pool, None, tmp_path)
    answer = await handle_command(working, ALICE, "compact", "", is_admin=False)
    assert answer.startswith("Compacted 0 messages into 1 summary (0 leaf, 1 condensed)"), answer
