"""The on-disk vector index (memory/search/semantic/disk.py) through the providers, on
SQLite and PostgreSQL, against the fake embeddings server: the hybrid-search kit holds
with every scope on disk; on small data it returns what the exact cache returns; it
follows new vectors, survives a deleted or damaged file, never returns a forgotten item
and keeps users apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from usearch.index import Index

from memory.contract.embedding import Item
from memory.contract.types import Message, SearchMode, SearchQuery, Session
from memory.search.semantic.backlog import embed_backlog
from memory.search.semantic.client import Embedder
from memory.search.semantic.disk import DiskIndex
from memory.search.semantic.index import VectorIndex
from memory.search.semantic.segments import read_manifest, scope_dir
from memory.search.semantic.store import embeddings, store_vectors
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner
from memory.testing.semantic_conformance import SemanticConformance
from tests.memory.semantic.conftest import EmbedderFactory, ProviderFactory

HYBRID = SearchMode.HYBRID
ON_DISK = {"vector_disk_min_rows": 1}  # every scope searched through its on-disk index
EXACT = {"vector_disk_min_rows": 0}
# Messages alone, one vector each, where the on-disk index is compared with the exact
# search list for list or counted: the fake's hashed words tie many items at cosine 0,
# which fill the nearest list's last places in either order, and a tied pair's partner
# then moves its message's mean (pairs on disk: the kit below and test_pairs.py).
ALONE = {"embeddings_with_next": False}
WORDS = [
    *("lighthouse", "keeper", "mountain", "goat", "violin", "lesson", "tax", "return"),
    *("red", "bicycle", "harbour", "winter", "garden", "piano", "letter", "river"),
    *("bread", "coffee", "train", "window", "candle", "forest", "doctor", "market"),
]
QUESTIONS = ["lighthouse", "a goat on the mountain", "violin", "bicycle tax", "keeper lesson"]


class _DiskKit(SemanticConformance):
    name = ""

    @pytest.fixture
    def embedder(self, make_embedder: EmbedderFactory) -> Embedder:
        return make_embedder()

    @pytest.fixture
    def make_provider(  # type: ignore[override]
        self, engine: AsyncEngine, make_provider: ProviderFactory
    ) -> Callable[..., Any]:
        return lambda embedder: make_provider(engine, self.name, embedder, **ON_DISK)


class TestLcmOnDisk(_DiskKit):
    name = "lcm"


class TestSimpleOnDisk(_DiskKit):
    name = "simple"


def _session(user_id: int = 71) -> Session:
    return Session(f"disk:{user_id}", user_id=user_id, channel="test")


async def _fill(provider: Any, session: Session, n: int, start: int = 0) -> None:
    """`n` messages of a few words each, drawn at random (few ties in similarity)."""
    rng = np.random.default_rng(start)
    await provider.bootstrap(session)
    await provider.append(
        session,
        *(
            Message(
                role="user" if i % 2 == 0 else "assistant",
                content=" ".join(rng.choice(WORDS, int(rng.integers(2, 7)))),
            )
            for i in range(start, start + n)
        ),
    )


async def _answers(provider: Any, session: Session) -> list[list[tuple[float, str]]]:
    """Each question's hits as (fused score, id), ties in id order (items with equal
    scores may come in either order, and which of the items at cosine 0 fill the last
    places of the nearest list is arbitrary, so their signals are not compared)."""
    out = []
    for text in QUESTIONS:
        hits = await provider.search(session, SearchQuery(text, mode=HYBRID, limit=30))
        found = [(round(h.score, 5), h.source_id) for h in hits]
        out.append(sorted(found, key=lambda f: (-f[0], f[1])))
    return out


def _manifests(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "vectors").glob("*/manifest.json"))


def _segments(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "vectors").glob("*/seg-*.flat"))


@pytest.mark.parametrize("name", ["lcm", "simple"])
async def test_small_data_same_as_exact_and_incremental(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    embedder: Embedder,
    tmp_path: Path,
    name: str,
) -> None:
    exact = make_provider(engine, name, embedder, **EXACT, **ALONE)
    disk = make_provider(engine, name, embedder, **ON_DISK, **ALONE)
    s = _session()
    await _fill(exact, s, 60)
    await embed_backlog(exact, embedder)
    expected = await _answers(exact, s)
    meaning = await exact.search(s, SearchQuery("lighthouse", mode=HYBRID))
    assert any(h.signals == ("meaning",) for h in meaning)  # the vectors count
    assert not _manifests(tmp_path)
    got = await _answers(disk, s)
    assert got == expected
    assert len(_manifests(tmp_path)) == 1 and _segments(tmp_path)

    # New vectors after the build are searched too (the tail), by both alike.
    await _fill(exact, s, 30, start=60)
    assert await embed_backlog(exact, embedder) > 0
    assert await _answers(disk, s) == await _answers(exact, s)


@pytest.mark.parametrize("damage", ["delete", "garble", "manifest"])
async def test_a_lost_or_damaged_index_is_rebuilt(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    embedder: Embedder,
    tmp_path: Path,
    damage: str,
) -> None:
    first = make_provider(engine, "lcm", embedder, **ON_DISK, **ALONE)
    s = _session()
    await _fill(first, s, 40)
    await embed_backlog(first, embedder)
    expected = await _answers(first, s)
    [segment] = _segments(tmp_path)
    if damage == "delete":
        segment.unlink()
    elif damage == "garble":
        segment.write_bytes(b"\x00garbage" * 100)
    else:
        _manifests(tmp_path)[0].write_text("{not json")
    # A new process (a restart) finds the damage and builds the index again.
    again = make_provider(engine, "lcm", embedder, **ON_DISK, **ALONE)
    assert await _answers(again, s) == expected
    [rebuilt] = _segments(tmp_path)
    assert rebuilt != segment or damage == "manifest"


async def test_a_forgotten_message_never_comes_back(
    engine: AsyncEngine, make_provider: ProviderFactory, embedder: Embedder, tmp_path: Path
) -> None:
    provider = make_provider(engine, "lcm", embedder, **ON_DISK)
    s = _session()
    await _fill(provider, s, 30)
    await provider.append(s, Message(role="user", content="the zeppelin pilot waved"))
    await embed_backlog(provider, embedder)
    before = await provider.search(s, SearchQuery("zeppelin pilot", mode=HYBRID))
    assert before and before[0].content == "the zeppelin pilot waved"
    owner = Owner(s.user_id, s.agent_id)
    preview = await fg.preview(provider, owner, "zeppelin")
    assert _manifests(tmp_path)
    await fg.forget(provider, owner, preview.ids, preview.needles)
    # The user's files went with it (they held its vector); the next search rebuilds
    # them from the database, and the answers never hold it, by words or by meaning.
    assert not list((tmp_path / "vectors").glob(f"{s.user_id}-*"))
    for text in ("zeppelin pilot", "pilot waved", "the pilot"):
        hits = await provider.search(s, SearchQuery(text, mode=HYBRID))
        assert not any("zeppelin" in h.content for h in hits), text
    await provider.semantic.index.disk.settle()
    assert _manifests(tmp_path)  # rebuilt without it


async def test_scopes_are_apart_and_each_has_its_own_files(
    engine: AsyncEngine, make_provider: ProviderFactory, embedder: Embedder, tmp_path: Path
) -> None:
    provider = make_provider(engine, "lcm", embedder, **ON_DISK)
    mine, theirs = _session(81), _session(82)
    await _fill(provider, theirs, 20)
    await provider.append(theirs, Message(role="user", content="their secret octopus recipe"))
    await _fill(provider, mine, 20)
    await embed_backlog(provider, embedder)
    for text in ("octopus recipe", "secret", "lighthouse keeper"):
        hits = await provider.search(mine, SearchQuery(text, mode=HYBRID, limit=50))
        assert all(h.session_id == mine.id for h in hits), text
        assert not any("octopus" in h.content for h in hits)
    await provider.search(theirs, SearchQuery("octopus", mode=HYBRID))
    assert len(_manifests(tmp_path)) == 2


class _Same:
    """Asserts a DiskIndex's 10 nearest are the exact cache's, for each of QUESTIONS."""

    def __init__(
        self, engine: AsyncEngine, embedder: Embedder, s: Session, disk: DiskIndex
    ) -> None:
        self.exact = VectorIndex(engine, embedder.model, revalidate_s=0)
        self.embedder, self.s, self.disk = embedder, s, disk

    async def __call__(self) -> None:
        s = self.s
        for text in QUESTIONS:
            q = np.asarray(await self.embedder.embed_query(text))
            want = await self.exact.search(s.user_id, s.agent_id, q, limit=10)
            got = await self.disk.search(s.user_id, s.agent_id, q, sources=None, limit=10)
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5)
            # The same items, but for those tied with the last place.
            last = want[-1].score + 1e-5
            assert {h.key for h in got if h.score > last} == {h.key for h in want if h.score > last}


async def test_generations_append_and_merge_like_exact_search(
    engine: AsyncEngine, make_provider: ProviderFactory, embedder: Embedder, tmp_path: Path
) -> None:
    """Past `tail_rows` new vectors become a generation of their own, merged with its
    predecessor when of comparable size; the hits stay those of exact search."""
    provider = make_provider(engine, "lcm", embedder, **EXACT)
    s = _session()
    await _fill(provider, s, 20)
    await embed_backlog(provider, embedder)
    disk = DiskIndex(engine, embedder.model, tmp_path / "own", tail_rows=8, revalidate_s=0)
    same = _Same(engine, embedder, s, disk)
    await same()
    assert disk.builds == 1
    for round_ in range(3):
        await _fill(provider, s, 12, start=100 + 20 * round_)
        await embed_backlog(provider, embedder)
        await same()  # the tail, exactly; and it starts an append
        await disk.settle()
        await same()  # the new generation
    assert disk.builds == 4
    [folder] = [p.parent for p in (tmp_path / "own").glob("*/manifest.json")]
    manifest = read_manifest(folder)
    assert manifest is not None
    assert len(manifest.generations) < 4  # merged: fewer generations than builds
    async with engine.connect() as conn:
        rows = await conn.scalar(sa.text("SELECT count(*) FROM embeddings WHERE dim > 0"))
    assert manifest.rows == rows  # every vector once
    assert sorted(p.name for p in folder.glob("seg-*")) == sorted(
        s.file for g in manifest.generations for s in g.segments
    )  # replaced segments deleted
    assert all(p.suffix == ".flat" for p in folder.glob("seg-*"))

    # Rows gone from the database (forgotten, a restored backup) past REBUILD_DRIFT: the
    # index is rebuilt without them, and answers stay exact meanwhile.
    async with engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM embeddings WHERE id % 3 = 0"))
    await same()
    await disk.settle()
    assert disk.builds == 5
    rebuilt = read_manifest(folder)
    assert rebuilt is not None and len(rebuilt.generations) == 1
    async with engine.connect() as conn:
        rows = await conn.scalar(sa.text("SELECT count(*) FROM embeddings WHERE dim > 0"))
    assert rebuilt.rows == rows
    await same()


async def test_a_cached_scope_moves_to_disk_past_the_threshold(
    engine: AsyncEngine, make_provider: ProviderFactory, embedder: Embedder, tmp_path: Path
) -> None:
    exact = make_provider(engine, "lcm", embedder, **EXACT, **ALONE)
    grows = make_provider(engine, "lcm", embedder, vector_disk_min_rows=30, **ALONE)
    s = _session()
    await _fill(exact, s, 20)
    await embed_backlog(exact, embedder)
    assert await _answers(grows, s) == await _answers(exact, s)
    assert not _manifests(tmp_path)  # 20 vectors: cached
    await _fill(exact, s, 20, start=20)
    await embed_backlog(exact, embedder)
    assert await _answers(grows, s) == await _answers(exact, s)
    assert len(_manifests(tmp_path)) == 1  # 40: on disk


def _clustered(rng: np.random.Generator, n: int, dim: int, centres: np.ndarray) -> np.ndarray:
    """Unit vectors around a hundred topics, like a sentence model's: the 50 nearest
    of a query sit in a narrow band of cosines, which is where a graph walk misses."""
    topic = rng.integers(0, len(centres), n)
    x = centres[topic] + 2.0 * rng.standard_normal((n, dim), dtype=np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


async def _legacy_index(engine: AsyncEngine, root: Path, model: str, user_id: int) -> Path:
    """The scope's on-disk index as written before every segment was flat: one usearch
    HNSW segment (bf16) per source and a manifest that names no segment kind. Returns
    its folder."""
    e = embeddings.c
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(e.id, e.source, e.dim, e.vector)
                .where(e.user_id == user_id, e.model == model, e.dim > 0)
                .order_by(e.id)
            )
        ).all()
    folder = scope_dir(root, model, user_id, "default")
    folder.mkdir(parents=True)
    segments = []
    for source in sorted({r.source for r in rows}):
        mine = [r for r in rows if r.source == source]
        dim = mine[0].dim
        graph = Index(ndim=dim, metric="cos", dtype="bf16")
        vectors = np.frombuffer(b"".join(r.vector for r in mine), np.float32).reshape(-1, dim)
        graph.add(np.array([r.id for r in mine], np.uint64), vectors)
        name = f"seg-0-{rows[-1].id}-{source}.usearch"
        graph.save(str(folder / name))
        segments.append({"file": name, "source": source, "dim": dim, "count": len(mine)})
    generation = {"lo": 0, "hi": rows[-1].id, "rows": len(rows), "segments": segments}
    manifest = {"model": model, "user_id": user_id, "agent_id": "default"}
    (folder / "manifest.json").write_text(
        json.dumps({"format": 1, **manifest, "generations": [generation]})
    )
    return folder


async def test_an_older_graph_index_is_searched_then_merged_flat(
    engine: AsyncEngine, make_provider: ProviderFactory, embedder: Embedder, tmp_path: Path
) -> None:
    """An index written before every segment was flat (its segments usearch graphs) is
    searched as it is, without a build; the merge of its generation with a new one
    rewrites its rows flat and deletes the graph."""
    provider = make_provider(engine, "lcm", embedder, **EXACT)
    s = _session()
    await _fill(provider, s, 20)
    await embed_backlog(provider, embedder)
    folder = await _legacy_index(engine, tmp_path / "own", embedder.model, s.user_id)
    graphs = sorted(folder.glob("seg-*.usearch"))  # one a source: messages and pairs
    assert len(graphs) == 2
    disk = DiskIndex(engine, embedder.model, tmp_path / "own", tail_rows=8, revalidate_s=0)
    same = _Same(engine, embedder, s, disk)
    await same()
    assert disk.builds == 0 and all(g.exists() for g in graphs)  # the graphs answered
    await _fill(provider, s, 12, start=100)
    await embed_backlog(provider, embedder)
    await same()
    await disk.settle()
    await same()
    assert disk.builds == 1
    manifest = read_manifest(folder)
    assert manifest is not None and len(manifest.generations) == 1  # 20 <= 4 x 12: merged
    async with engine.connect() as conn:
        rows = await conn.scalar(sa.text("SELECT count(*) FROM embeddings WHERE dim > 0"))
    assert manifest.rows == rows
    assert {seg.kind for seg in manifest.generations[0].segments} == {"flat"}
    assert sorted(p.name for p in folder.glob("seg-*")) == sorted(
        seg.file for seg in manifest.generations[0].segments
    )  # the graph deleted


@pytest.mark.parametrize(("kind", "n"), [("flat", 8000), ("flat", 600), ("graph", 8000)])
async def test_the_index_finds_what_exact_search_finds(
    engine: AsyncEngine, tmp_path: Path, kind: str, n: int
) -> None:
    """The index's 50 nearest are the exact 50 nearest (every one, for each query;
    bench/vector_scale.py measures it at 100k), in exact order with float32 cosines,
    from a flat segment (int8 rows: the `limit` + OVERFETCH best by int8 re-scored
    exactly), large or small, or from an older index's graph segment (scanned whole over
    its bf16 copy). What would fail it, on these vectors: taking no more candidates than
    asked (OVERFETCH 0) finds 0.989 of them (0.985 of 600 rows, 0.996 from the graph);
    walking the graph (breadth 100, usearch's default 16 links) instead of scanning it,
    0.89."""
    dim, user = 192, 91
    rng = np.random.default_rng(34)
    centres = rng.standard_normal((100, dim), dtype=np.float32)
    vectors = _clustered(rng, n, dim, centres)
    # Summaries: a message's vector is stored only while the message exists.
    items = [Item("summary", str(i), user, "default", "", i) for i in range(n)]
    await store_vectors(engine, "recall-model", items, vectors)
    if kind == "graph":
        await _legacy_index(engine, tmp_path / "own", "recall-model", user)
    disk = DiskIndex(engine, "recall-model", tmp_path / "own", build_wait_s=None)
    found = []
    for q in _clustered(np.random.default_rng(35), 20, dim, centres):
        exact = np.argsort(-(vectors @ q), kind="stable")[:50]
        hits = await disk.search(user, "default", q, sources=None, limit=50)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(h.score == pytest.approx(float(vectors[int(h.key)] @ q), abs=1e-5) for h in hits)
        found.append(len({int(h.key) for h in hits} & {int(i) for i in exact}) / 50)
    # One segment of all n rows: the index answered, not the exact tail.
    assert disk.builds == (0 if kind == "graph" else 1)
    assert found == [1.0] * len(found)
    files = {p.suffix for p in (tmp_path / "own").rglob("seg-*")}
    assert files == {".usearch" if kind == "graph" else ".flat"}
