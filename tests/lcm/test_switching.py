"""Switching memory.provider on a live database: lcm adopts what simple stored."""

from __future__ import annotations

from pathlib import Path

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, Message, Session
from tests.lcm.conftest import CountingSummarizer

SESSION = Session("default:telegram:7", "default", 7, "telegram")


def _ctx(engine, tmp_path: Path) -> ProviderContext:
    return ProviderContext(
        engine=engine,
        summarizer=CountingSummarizer(),
        data_dir=tmp_path,
        config={"keep_tail": 4, "leaf_chunk_size": 4, "store_dir": str(tmp_path / "notes")},
    )


def _turns(lo: int, hi: int) -> list[Message]:
    return [Message("user" if i % 2 else "assistant", f"message {i}") for i in range(lo, hi)]


async def _lcm_sees_everything(engine, tmp_path: Path, expected: list[str]) -> None:
    lcm = create_provider("lcm", _ctx(engine, tmp_path))
    await lcm.bootstrap(SESSION)
    window = await lcm.assemble(SESSION, 100_000, 4)
    texts = [m.content for m in window if m.content.startswith("message ")]
    # Everything not summarised is in the window, in order, after the summaries.
    assert texts == expected[len(expected) - len(texts) :]
    assert [m.content for m in await lcm.load_history(SESSION.id)] == expected
    assert await lcm.check_integrity() == []
    # Adopted messages are compactable like lcm's own.
    result = await lcm.compact(SESSION, CompactionMode.FULL)
    assert result.messages_compacted > 0
    assert await lcm.check_integrity() == []
    await lcm.close()


async def test_messages_stored_by_simple_join_lcms_context(engine, tmp_path: Path) -> None:
    simple = create_provider("simple", _ctx(engine, tmp_path))
    await simple.append(SESSION, *_turns(1, 11))
    await simple.close()
    await _lcm_sees_everything(engine, tmp_path, [f"message {i}" for i in range(1, 11)])


async def test_lcm_then_simple_then_lcm_again(engine, tmp_path: Path) -> None:
    lcm = create_provider("lcm", _ctx(engine, tmp_path))
    await lcm.append(SESSION, *_turns(1, 13))
    assert (await lcm.compact(SESSION, CompactionMode.FULL)).messages_compacted > 0
    await lcm.close()
    simple = create_provider("simple", _ctx(engine, tmp_path))
    await simple.append(SESSION, *_turns(13, 19))
    await simple.close()
    await _lcm_sees_everything(engine, tmp_path, [f"message {i}" for i in range(1, 19)])
