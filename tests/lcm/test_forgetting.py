"""Forgetting in lcm: a message deep in a twice-compacted chat is forgotten; the
summaries that depended on it are rebuilt from what remains (up the DAG), search and
expansion no longer find it, the DAG stays lossless and doctor stays clean."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from memory.contract.errors import NotFound
from memory.contract.types import CompactionMode, Message, SearchMode, SearchQuery, SummarizeOptions
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner
from memory.transfer.integrity import check_shared
from tests.fakes.summarizer import KeepingSummarizer
from tests.lcm.conftest import MakeProvider, context_view, reconstruct, session

TOKEN = "Zqxplanted"


def _chat(n: int, planted: int) -> list[Message]:
    out = []
    for i in range(n):
        word = TOKEN if i == planted else f"Zword{i}"
        out.append(Message("user" if i % 2 == 0 else "assistant", f"msg{i} {word} " + "x" * 30))
    return out


async def _compacted(make_provider: MakeProvider, n: int = 40, planted: int = 5):  # type: ignore[no-untyped-def]
    provider = make_provider(KeepingSummarizer(), keep_tail=4, leaf_chunk_size=4, condensed_min=2)
    s = session()
    await provider.append(s, *_chat(n, planted))
    await provider.compact(s, CompactionMode.FULL)
    await provider.compact(s, CompactionMode.FULL)
    return provider, s


async def _summary_texts(provider) -> list[str]:  # type: ignore[no-untyped-def]
    async with provider.engine.connect() as conn:
        rows = await conn.exec_driver_sql("SELECT content FROM summaries")
        return [r[0] for r in rows]


async def test_forget_by_text_rebuilds_the_dag(make_provider: MakeProvider) -> None:
    provider, s = await _compacted(make_provider)
    owner = Owner(s.user_id, s.agent_id)
    assert any(TOKEN in t for t in await _summary_texts(provider))
    before = await reconstruct(provider, s)

    preview = await fg.preview(provider, owner, TOKEN.lower())
    assert [i.first_words.split()[1] for i in preview.items] == [TOKEN]
    assert preview.dependents.summaries >= 2  # its leaf and what condensed it

    report = await fg.forget(provider, owner, preview.ids, preview.needles)
    assert report.messages == 1 and report.summaries_rebuilt >= 2

    texts = await _summary_texts(provider)
    assert texts and not any(TOKEN in t for t in texts)
    # The rebuilt summaries still say what remains (the fake keeps distinctive words).
    assert any("Zword4" in t for t in texts) and any("Zword6" in t for t in texts)
    after = await reconstruct(provider, s)
    assert after == [m for m in before if TOKEN not in m]
    for mode in SearchMode:
        hits = await provider.search(s, SearchQuery(text=TOKEN, mode=mode))
        assert not hits, mode
    assert await check_shared(provider.engine) == []
    assert await provider.check_integrity() == []
    [row] = await provider.read_changelog(s.user_id, s.agent_id, scope="forget")
    assert TOKEN not in row.after_text and "1 message" in row.after_text


async def test_forget_by_summary_id_and_old_ids_are_gone(make_provider: MakeProvider) -> None:
    provider, s = await _compacted(make_provider)
    owner = Owner(s.user_id, s.agent_id)
    top = next(i for i in await context_view(provider, s) if i.startswith("sum_"))
    covered = await provider.summary_sources(owner, top)
    preview = await fg.preview(provider, owner, top)
    assert preview.ids == covered
    await fg.forget(provider, owner, preview.ids)
    with pytest.raises(NotFound):
        await provider.describe(top, s)
    assert await check_shared(provider.engine) == []
    assert await provider.check_integrity() == []
    remaining = await reconstruct(provider, s)
    assert len(remaining) == 40 - len(covered)


async def test_nothing_outside_the_owners_scope(make_provider: MakeProvider) -> None:
    provider, s = await _compacted(make_provider)
    other = Owner(s.user_id + 1, s.agent_id)
    preview = await fg.preview(provider, other, TOKEN)
    assert preview.items == []
    top = next(i for i in await context_view(provider, s) if i.startswith("sum_"))
    with pytest.raises(NotFound):
        await fg.preview(provider, other, top)
    async with provider.engine.connect() as conn:
        some_id = (await conn.exec_driver_sql("SELECT min(id) FROM messages")).scalar()
    assert (await fg.preview(provider, other, str(some_id))).items == []
    report = await fg.forget(provider, other, [some_id])
    assert report.messages == 0
    assert len(await reconstruct(provider, s)) == 40


async def test_forgetting_every_source_removes_the_summaries(make_provider: MakeProvider) -> None:
    provider, s = await _compacted(make_provider, n=12)
    owner = Owner(s.user_id, s.agent_id)
    async with provider.engine.connect() as conn:
        ids = [r[0] for r in await conn.exec_driver_sql("SELECT id FROM messages ORDER BY id")]
    await fg.forget(provider, owner, ids[:8])
    assert await reconstruct(provider, s) == [m.content for m in _chat(12, 5)[8:]]
    assert await check_shared(provider.engine) == []
    assert await provider.check_integrity() == []


async def test_erase_owner(make_provider: MakeProvider) -> None:
    provider, s = await _compacted(make_provider)
    owner = Owner(s.user_id, s.agent_id)
    s2 = session("second")
    await provider.append(s2, Message("user", f"again {TOKEN}"))
    await provider.set_profile(s.user_id, s.agent_id, f"likes {TOKEN}")
    kept = session("kept", user_id=99)
    await provider.append(kept, Message("user", "someone else"))
    report = await fg.erase(provider, owner, by="test")
    assert report.sessions == 2 and report.messages == 41
    assert await provider.get_profile(s.user_id, s.agent_id) == ""
    [row] = await provider.read_changelog(s.user_id, s.agent_id)
    assert row.scope == "erasure" and TOKEN not in row.after_text
    assert [m.content for m in await provider.load_history(kept.id)] == ["someone else"]
    assert await provider.load_history(s.id) == []
    # The erased session starts afresh.
    await provider.append(s, Message("user", "hello again"))
    assert [m.content for m in await provider.load_history(s.id)] == ["hello again"]
    assert await check_shared(provider.engine) == []
    assert await provider.check_integrity() == []


async def test_vectors_go_with_what_they_embed(make_provider: MakeProvider) -> None:
    provider, s = await _compacted(make_provider)
    owner = Owner(s.user_id, s.agent_id)
    preview = await fg.preview(provider, owner, TOKEN)
    [target] = preview.ids
    async with provider.engine.connect() as conn:
        summary_ids = [r[0] for r in await conn.exec_driver_sql("SELECT id FROM summaries")]
        other = (
            await conn.exec_driver_sql(f"SELECT min(id) FROM messages WHERE id <> {target}")
        ).scalar()
    rows = [("message", str(target)), ("message", str(other))] + [
        ("summary", i) for i in summary_ids
    ]
    async with provider.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO embeddings (source, item_key, item_id, user_id, agent_id, model, dim, "
                "vector, created_at) VALUES (:s, :k, NULL, :u, :a, 'm', 1, :v, CURRENT_TIMESTAMP)"
            ),
            [
                {"s": src, "k": key, "u": s.user_id, "a": s.agent_id, "v": b"\0\0\x80?"}
                for src, key in rows
            ],
        )
    await fg.forget(provider, owner, preview.ids)
    async with provider.engine.connect() as conn:
        left = {
            (r[0], r[1])
            for r in await conn.exec_driver_sql("SELECT source, item_key FROM embeddings")
        }
        live = {r[0] for r in await conn.exec_driver_sql("SELECT id FROM summaries")}
    assert ("message", str(target)) not in left and ("message", str(other)) in left
    # Vectors of rebuilt (deleted) summaries are gone; untouched summaries keep theirs.
    assert {k for src, k in left if src == "summary"} == live & set(summary_ids)


async def test_a_title_taken_from_a_forgotten_message_is_retaken(
    make_provider: MakeProvider,
) -> None:
    provider = make_provider(KeepingSummarizer())
    s = session()
    await provider.append(
        s,
        Message("user", f"my secret is {TOKEN}"),
        Message("assistant", "noted"),
        Message("user", "what about tea"),
    )
    assert TOKEN in (await provider.load_info(s.id)).title
    owner = Owner(s.user_id, s.agent_id)
    preview = await fg.preview(provider, owner, TOKEN)
    await fg.forget(provider, owner, preview.ids)
    assert (await provider.load_info(s.id)).title == "what about tea"


class _Gated(KeepingSummarizer):
    """Its next call waits for `gate` once armed (the compaction's), the rest do not."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            self.entered.set()
            await gate.wait()
        return await super().summarize(text, opts)


async def test_a_compaction_planned_before_a_forget_does_not_land(
    make_provider: MakeProvider,
) -> None:
    summarizer = _Gated()
    provider = make_provider(summarizer, keep_tail=4, leaf_chunk_size=4, condensed_min=2)
    s = session()
    await provider.append(s, *_chat(20, 5))
    await provider.compact(s, CompactionMode.FULL)
    await provider.append(s, *_chat(8, -1))
    summarizer.gate = gate = asyncio.Event()
    compaction = asyncio.create_task(provider.compact(s, CompactionMode.INCREMENTAL))
    await summarizer.entered.wait()  # planning, shown the old summary as `previous`
    owner = Owner(s.user_id, s.agent_id)
    preview = await fg.preview(provider, owner, TOKEN)
    await fg.forget(provider, owner, preview.ids)
    gate.set()
    await compaction
    assert not any(TOKEN in t for t in await _summary_texts(provider))
    assert await provider.check_integrity() == []
    history = [m.content for m in await provider.load_history(s.id)]
    assert await reconstruct(provider, s) == history
    # The next compaction does the work, from the rebuilt summaries.
    assert (await provider.compact(s, CompactionMode.INCREMENTAL)).changed
    assert not any(TOKEN in t for t in await _summary_texts(provider))
    assert await reconstruct(provider, s) == history


async def test_the_preview_names_profile_and_rules_that_quote_it(
    make_provider: MakeProvider,
) -> None:
    provider = make_provider(KeepingSummarizer())
    s = session()
    await provider.append(s, Message("user", f"my code is {TOKEN}"))
    await provider.set_profile(s.user_id, s.agent_id, f"Their code: {TOKEN.lower()}.")
    [rule] = await provider.add_constraint(s.user_id, s.agent_id, f"never say {TOKEN}")
    await provider.add_constraint(s.user_id, s.agent_id, "be brief")
    preview = await fg.preview(provider, Owner(s.user_id, s.agent_id), TOKEN)
    assert preview.dependents.quoting_stores == ["profile", f"rule {rule.id}"]
    nothing = await fg.preview(provider, Owner(s.user_id, s.agent_id), "my code")
    assert nothing.dependents.quoting_stores == []  # "my code is ..." is quoted nowhere
