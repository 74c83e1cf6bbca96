"""needs_compaction after every append answers from the total that this provider's own
appends carry forward (no query), and stays exact when another process (here: a second
provider on the same database) appends or compacts in between."""

from __future__ import annotations

from memory.contract.types import CompactionMode, Message
from tests.lcm.conftest import numbered, session


async def exact(p, s) -> int:  # type: ignore[no-untyped-def]
    return (await p.stats(s)).context_tokens


async def test_every_append_moves_the_answer(make_provider) -> None:
    p = make_provider()
    s = session()
    await p.append(s, *numbered(2))
    assert not await p.needs_compaction(s, await exact(p, s))
    for i in range(2, 8):
        await p.append(s, *numbered(1, start=i))
        total = await exact(p, s)
        # Alternate sides of the line: the answer must flip exactly at the real total.
        threshold = total - 1 if i % 2 else total
        assert await p.needs_compaction(s, threshold) == bool(i % 2)


async def test_another_process_appending_is_counted(make_provider) -> None:
    mine, other = make_provider(), make_provider()
    s = session()
    await mine.append(s, *numbered(2))
    assert not await mine.needs_compaction(s, await exact(mine, s))
    await other.append(s, Message(role="user", content="y" * 4000))
    await mine.append(s, Message(role="assistant", content="short"))
    total = await exact(mine, s)
    assert await mine.needs_compaction(s, total - 1)
    await mine.append(s, Message(role="user", content="again"))
    assert not await mine.needs_compaction(s, await exact(mine, s))


async def test_compactions_here_or_elsewhere_lower_the_total(make_provider) -> None:
    mine, other = make_provider(), make_provider()
    s = session()
    await mine.append(s, *numbered(20))
    big = await exact(mine, s)
    assert await mine.needs_compaction(s, big - 1)
    await other.compact(s, CompactionMode.FULL)
    await mine.append(s, *numbered(1, start=20))
    total = await exact(mine, s)
    assert total < big
    assert not await mine.needs_compaction(s, total)
    await mine.append(s, *numbered(8, start=21))
    await mine.compact(s, CompactionMode.FULL)
    await mine.append(s, *numbered(1, start=29))
    total = await exact(mine, s)
    assert await mine.needs_compaction(s, total - 1)
    await mine.append(s, *numbered(1, start=30))
    assert not await mine.needs_compaction(s, await exact(mine, s))


async def test_after_a_compaction_that_found_nothing_it_waits_for_a_chunk(make_provider) -> None:
    # keep_tail 4, leaf_chunk_size 4: six messages leave two outside the tail, too few.
    p = make_provider()
    s = session()
    await p.append(s, *numbered(6))
    assert await p.needs_compaction(s, 0)  # over the threshold: measured, not yet known
    assert (await p.compact(s, CompactionMode.INCREMENTAL)).messages_compacted == 0
    # From here on, "needs compaction" means "a compaction would compact something".
    for i in (6, 7):
        await p.append(s, *numbered(1, start=i))
        says = await p.needs_compaction(s, 0)
        compacted = (await p.compact(s, CompactionMode.INCREMENTAL)).messages_compacted
        assert says == (compacted > 0), (i, says, compacted)
    assert compacted == 4


async def test_a_wait_counts_messages_appended_elsewhere(make_provider) -> None:
    mine, other = make_provider(), make_provider()
    s = session()
    await mine.append(s, *numbered(6))
    assert await mine.needs_compaction(s, 0)
    assert (await mine.compact(s, CompactionMode.INCREMENTAL)).messages_compacted == 0
    await mine.append(s, *numbered(1, start=6))
    assert not await mine.needs_compaction(s, 0)  # one short
    await other.append(s, *numbered(1, start=7))
    assert await mine.needs_compaction(s, 0)
    assert (await mine.compact(s, CompactionMode.INCREMENTAL)).messages_compacted == 4
