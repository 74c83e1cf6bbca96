"""`DiskIndex`: a scope's vectors searched through an on-disk index, so a search scans
a compact copy of the scope's vectors (int8: a quarter of float32) instead of holding the
whole scope in memory.

Why usearch (2.26, Apache-2.0, wheels for every platform we ship): its exact search runs
SIMD int8 inner products over a matrix we memory-map read-only (segments.FlatView), so
replicas on one data directory share the page cache and a process's resident memory is
the pages its searches touch, reclaimable by the kernel; it also reads the HNSW files
that indexes written before every segment was flat still hold (`Index.restore(view=True)`).
No graph is built any more: at the sizes it kept its recall it was scanned whole anyway,
and past them it lost recall (bench/HISTORY.md, "Vectors at 1M", "Every segment flat").
Rejected: sqlite-vec scans float32 (4x the bytes; at 1M x 1536, 6 GB per query) and is
SQLite-only; numpy has no int8 matrix product (it widens to int32 first); hnswlib has
no memory-mapped load; faiss-cpu's on-disk IVF needs its own inverted-list files and a
training step; LanceDB brings a columnar store of its own beside the database; pgvector
would keep the index in PostgreSQL, shared by replicas on any host, but needs the server
extension (not here, not on stock PostgreSQL): a possible later backend, detected by
nobody today.

The database stays the source of truth; the index is derived from the `embeddings`
table and holds row ids only (`embeddings.id`):
- Candidates come from the index (each segment of the asked sources scanned whole by
  int8 inner product, OVERFETCH more than asked; an older index's graph segment scanned
  whole over its bf16 copy), then are read back from the database by id *within the
  scope* (user, agent, model): a row forgotten or erased since is simply not there (and
  its id is remembered as dead); another scope's row can never match; every score is
  the exact float32 cosine of the stored vector, so fusion and the similarity floor see
  true cosines.
- Rows newer than the index (the `tail`) are read incrementally by id, as the exact
  cache does, and searched exactly in memory; past `tail_rows` they become a new
  generation of segments, written in a process; generations merge logarithmically, so a
  scope has O(log n) of them. A merge or a rebuild reads its rows back from the
  database, so it writes flat segments even where it replaces graph ones.
- Rebuilt (in a process, while the old files keep answering) when missing, unreadable,
  or stale: the database's rows below the index's newest id differ from the index's
  count by more than REBUILD_DRIFT (forgetting, a restored database) or the database has
  no row as new as the index's newest.
- Replicas sharing a data directory: readers map the files; one writer per scope at a
  time (`flock`, memory/search/semantic/segments.py); the others see the new manifest at
  their next search. Replicas on different hosts each keep their own copy (the directory
  is local; building it is the cost of a new host), with memory bounded the same way.

Building runs in a process of its own, reading the database through a blocking
connection of its own: turning a hundred thousand rows into arrays is seconds of Python
holding the GIL (and the HNSW build that preceded flat segments held it for minutes),
and the SQLite statements that run inline on the loop (memory/storage/sqlite_inline.py)
never carry it; a search's scan runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import shutil
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from usearch.index import Index

from memory.contract.embedding import VectorHit
from memory.search.pairs import asked
from memory.search.semantic import segments as seg
from memory.search.semantic.store import embeddings

log = logging.getLogger(__name__)

# Candidates beyond `limit`, re-scored exactly from the database: enough that the int8
# order misses none of the nearest (recall@50 1.000 at 1M x 1536 with 100 candidates;
# fewer rows in a segment only leave fewer to mistake for them: bench/HISTORY.md).
OVERFETCH = 50
TAIL_ROWS = 4096  # rows searched exactly in memory before they become a segment
MERGE_FACTOR = 4  # a generation at most this many times its successor's rows is merged
REBUILD_DRIFT = 0.05  # rows gone (or missed) past this fraction rebuild the index
REVALIDATE_S = 300.0
ID_LOOKBACK = 1000  # PostgreSQL commits ids out of order (memory/search/semantic/index.py)
BUILD_WAIT_S = 10.0  # a search waits this long for a first build, then goes on without


@dataclass
class _Tail:
    """The scope's rows newer than its segments, searched exactly: per dimension, the
    rows' ids, sources and vectors."""

    by_dim: dict[int, tuple[list[int], list[str], list[np.ndarray]]] = field(default_factory=dict)
    max_id: int = 0

    def add(self, row_id: int, source: str, vector: np.ndarray) -> None:
        ids, sources, vectors = self.by_dim.setdefault(vector.size, ([], [], []))
        ids.append(row_id)
        sources.append(source)
        vectors.append(vector)
        self.max_id = max(self.max_id, row_id)

    @property
    def rows(self) -> int:
        return sum(len(ids) for ids, _, _ in self.by_dim.values())

    def ids(self) -> set[int]:
        return {i for ids, _, _ in self.by_dim.values() for i in ids}

    def after(self, base: int) -> _Tail:
        """The rows newer than `base` (the others are in the segments now)."""
        kept = _Tail(max_id=max(self.max_id, base))
        for ids, sources, vectors in self.by_dim.values():
            for row_id, source, vector in zip(ids, sources, vectors, strict=True):
                if row_id > base:
                    kept.add(row_id, source, vector)
        return kept


@dataclass
class _Scope:
    folder: Path
    manifest: seg.Manifest | None = None
    stamp: bytes | None = None  # the manifest file's content when last opened
    views: list[tuple[seg.Segment, Index | seg.FlatView]] = field(default_factory=list)
    tail: _Tail = field(default_factory=_Tail)
    dead: set[int] = field(default_factory=set)
    checked_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    searching: threading.Lock = field(default_factory=threading.Lock)
    work: asyncio.Task[None] | None = None  # a build or an append in flight


class DiskIndex:
    """Search a (user, agent)'s vectors of one model through files under `root`."""

    def __init__(
        self,
        engine: AsyncEngine,
        model: str,
        root: Path,
        *,
        tail_rows: int = TAIL_ROWS,
        build_wait_s: float | None = BUILD_WAIT_S,
        revalidate_s: float = REVALIDATE_S,
    ) -> None:
        self.engine, self.model, self.root = engine, model, Path(root)
        self.tail_rows, self.build_wait_s = tail_rows, build_wait_s
        self.revalidate_s = revalidate_s
        self._scopes: dict[tuple[int, str], _Scope] = {}
        self.builds = 0  # generations written by this process (tests, the benchmark)

    def has_index(self, user_id: int, agent_id: str) -> bool:
        folder = seg.scope_dir(self.root, self.model, user_id, agent_id)
        return (folder / "manifest.json").is_file()

    def drop(self, user_id: int) -> None:
        """Delete the user's index files (every agent's and model's): after a forget or
        an erase, none of the forgotten vectors stays in this host's files (the exact
        resolve already kept them out of answers); the next search rebuilds from the
        database. A build in flight, which may have read them, is deleted when it ends."""
        for key in [k for k in self._scopes if k[0] == user_id]:
            work = self._scopes.pop(key).work
            if work is not None and not work.done():
                work.add_done_callback(lambda _done: self._remove(user_id))
        self._remove(user_id)

    def _remove(self, user_id: int) -> None:
        for folder in self.root.glob(f"{user_id}-*"):  # seg.scope_dir's names
            shutil.rmtree(folder, ignore_errors=True)

    async def settle(self) -> None:
        """Wait for every build or append in flight (tests, tools, shutdown)."""
        for scope in list(self._scopes.values()):
            if scope.work is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(scope.work)

    async def search(
        self,
        user_id: int,
        agent_id: str,
        q: np.ndarray,
        *,
        sources: set[str] | None,
        limit: int,
        also: Collection[tuple[str, str]] = (),
        partners: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        """As `VectorIndex.search` (`q` a unit vector); [] while a first build is still
        running after `build_wait_s` (the words' ranking stands meanwhile)."""
        key = (user_id, agent_id)
        scope = self._scopes.get(key)
        if scope is None:
            folder = seg.scope_dir(self.root, self.model, user_id, agent_id)
            scope = self._scopes[key] = _Scope(folder)
        async with scope.lock:
            await self._refresh(scope, user_id, agent_id)
        if scope.manifest is None and scope.work is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(scope.work), self.build_wait_s)
            async with scope.lock:
                await self._refresh(scope, user_id, agent_id)
        if scope.manifest is None:
            return []
        hits: list[VectorHit] = []
        want = limit + OVERFETCH
        for _ in range(3):  # more candidates when forgotten rows took places
            ids = await asyncio.to_thread(_candidates, scope, q, sources, want)
            hits, gone = await self._resolve(user_id, agent_id, ids, q)
            scope.dead |= gone
            if not gone or len(hits) >= limit or len(ids) < want:
                break
            want *= 2
        hits = hits[:limit]
        wanted = asked(hits, also, sources, partners)
        if wanted:
            hits += await self._scored(user_id, agent_id, q, wanted)
        return hits

    # --- the files --------------------------------------------------------------------

    def _where(self, user_id: int, agent_id: str) -> list[sa.ColumnElement[bool]]:
        e = embeddings.c
        return [e.user_id == user_id, e.agent_id == agent_id, e.model == self.model, e.dim > 0]

    async def _refresh(self, scope: _Scope, user_id: int, agent_id: str) -> None:
        """Reopen a changed manifest, read new rows into the tail, start the work due."""
        await self._reopen(scope)
        if scope.manifest is None:  # never load the whole scope: build it, in a thread
            if scope.work is None or scope.work.done():
                self._start(scope, user_id, agent_id, None)
            return
        e = embeddings.c
        where = self._where(user_id, agent_id)
        base = scope.manifest.max_id
        now = time.monotonic()
        stale = False
        if now - scope.checked_at >= self.revalidate_s:
            scope.checked_at = now
            stale = await self._drifted(scope.manifest, user_id, agent_id)
        async with self.engine.connect() as conn:
            newer = e.id > max(base, scope.tail.max_id)
            if base and conn.dialect.name != "sqlite":
                missed = await self._missed(conn, scope, where, base)
                if missed:
                    newer = sa.or_(newer, e.id.in_(missed))
            rows = (
                await conn.execute(
                    sa.select(e.id, e.source, e.dim, e.vector).where(*where, newer).order_by(e.id)
                )
            ).all()
        for r in rows:
            if len(r.vector) == 4 * r.dim:  # a damaged row is skipped, never misread
                scope.tail.add(r.id, r.source, np.frombuffer(r.vector, np.float32))
        if scope.work is None or scope.work.done():
            if stale:
                self._start(scope, user_id, agent_id, None)
            elif scope.tail.rows >= self.tail_rows:
                lo, hi = scope.manifest.max_id, scope.tail.max_id
                if hi > lo:
                    self._start(scope, user_id, agent_id, (lo, hi))

    async def _drifted(self, manifest: seg.Manifest, user_id: int, agent_id: str) -> bool:
        """Whether the database's rows at or below the index's newest id moved away
        from what the index holds (forgetting, a restored or replaced database)."""
        url = seg.sync_url(self.engine.url)
        assert url is not None  # VectorIndex uses no DiskIndex without one
        held, newest = await asyncio.to_thread(
            seg.held_rows, url, self.model, user_id, agent_id, manifest.max_id
        )
        if manifest.rows and not newest:
            return True
        return abs(manifest.rows - held) / max(1, manifest.rows) > REBUILD_DRIFT

    async def _missed(
        self, conn: Any, scope: _Scope, where: list[sa.ColumnElement[bool]], base: int
    ) -> list[int]:
        """Ids at most `base` committed after the segments were read (PostgreSQL)."""
        e = embeddings.c
        recent = (
            (await conn.execute(sa.select(e.id).where(*where, e.id > base - ID_LOOKBACK)))
            .scalars()
            .all()
        )
        known = scope.tail.ids() | scope.dead
        ask = np.array([i for i in recent if i <= base and i not in known], np.uint64)
        if not len(ask):
            return []
        held = np.zeros(len(ask), bool)
        for _, view in scope.views:
            held |= np.asarray(view.contains(ask), bool)
        return [int(i) for i in ask[~held]]

    async def _reopen(self, scope: _Scope) -> None:
        # The manifest's bytes, not its inode and mtime: a replaced file may get the old
        # one's inode back within one timestamp tick. A few hundred bytes per search.
        try:
            stamp: bytes | None = (scope.folder / "manifest.json").read_bytes()
        except OSError:
            stamp = None
        if stamp == scope.stamp and (stamp is None or scope.manifest is not None):
            return
        opened = await asyncio.to_thread(_open_all, scope.folder)
        if opened is None:  # missing or damaged: (re)built by _refresh
            scope.manifest, scope.views, scope.stamp = None, [], stamp
            return
        scope.manifest, scope.views = opened
        scope.stamp = stamp
        scope.tail = scope.tail.after(scope.manifest.max_id)

    def _start(
        self, scope: _Scope, user_id: int, agent_id: str, span: tuple[int, int] | None
    ) -> None:
        # The manifest as this decision saw it: the build does nothing if it changed.
        scope.work = asyncio.create_task(self._build(scope, user_id, agent_id, span, scope.stamp))

    async def _build(
        self,
        scope: _Scope,
        user_id: int,
        agent_id: str,
        span: tuple[int, int] | None,
        seen: bytes | None,
    ) -> None:
        """Write a generation for `span` (lo, hi], or everything when None, in a thread."""
        url = seg.sync_url(self.engine.url)
        if url is None:
            log.warning("vector index: an in-memory database has no on-disk index")
            return
        if span is None:
            async with self.engine.connect() as conn:
                newest = await conn.scalar(
                    sa.select(sa.func.max(embeddings.c.id)).where(*self._where(user_id, agent_id))
                )
            span_all = (0, int(newest or 0))
        try:
            written = await asyncio.get_running_loop().run_in_executor(
                _builder(),
                _write,
                url.render_as_string(hide_password=False),
                scope.folder,
                self.model,
                user_id,
                agent_id,
                span_all if span is None else span,
                span is None,
                seen,
            )
        except Exception as exc:
            if isinstance(exc, BrokenProcessPool):  # the builder died (killed, out of memory)
                _drop_builder()
            log.exception("vector index: building %s failed", scope.folder.name)
            return
        if written:
            self.builds += 1
            scope.checked_at = time.monotonic()
            if span is None:
                scope.dead.clear()  # the new files hold none of them

    async def _resolve(
        self, user_id: int, agent_id: str, ids: list[int], q: np.ndarray
    ) -> tuple[list[VectorHit], set[int]]:
        """The candidates still in the scope, exactly scored, best first; and the ids
        no longer there."""
        if not ids:
            return [], set()
        e = embeddings.c
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(e.id, e.source, e.item_key, e.dim, e.vector).where(
                        *self._where(user_id, agent_id), e.id.in_(ids)
                    )
                )
            ).all()
        hits = _exact(rows, q, nearest=True)
        gone = set(ids) - {r.id for r in rows}
        return hits, gone

    async def _scored(
        self, user_id: int, agent_id: str, q: np.ndarray, items: list[tuple[str, str]]
    ) -> list[VectorHit]:
        if not items:
            return []
        e = embeddings.c
        by_source: dict[str, list[str]] = {}
        for source, key in items:
            by_source.setdefault(source, []).append(key)
        rows: list[Any] = []
        async with self.engine.connect() as conn:
            for source, keys in by_source.items():
                rows += (
                    await conn.execute(
                        sa.select(e.id, e.source, e.item_key, e.dim, e.vector).where(
                            *self._where(user_id, agent_id),
                            e.source == source,
                            e.item_key.in_(keys),
                        )
                    )
                ).all()
        scored = {(h.source, h.key): h for h in _exact(rows, q, nearest=False)}
        return [scored[i] for i in items if i in scored]


def _exact(rows: Sequence[Any], q: np.ndarray, *, nearest: bool) -> list[VectorHit]:
    good = [r for r in rows if r.dim == q.size and len(r.vector) == 4 * r.dim]
    if not good:
        return []
    matrix = np.frombuffer(b"".join(r.vector for r in good), np.float32).reshape(-1, q.size)
    scores = matrix @ q
    order = np.argsort(-scores, kind="stable")
    return [VectorHit(good[i].source, good[i].item_key, float(scores[i]), nearest) for i in order]


def _candidates(scope: _Scope, q: np.ndarray, sources: set[str] | None, want: int) -> list[int]:
    """The ids of the `want` nearest rows to `q` among the segments and the tail (by the
    index's distance: int8, or an older graph segment's bf16), dead ones left out. Runs
    in a thread."""
    ids: list[np.ndarray] = []
    dists: list[np.ndarray] = []
    fetch = want + min(len(scope.dead), want)  # more dead ones: the caller asks again
    for segment, view in scope.views:
        if segment.dim != q.size or (sources is not None and segment.source not in sources):
            continue
        if isinstance(view, seg.FlatView):  # int8 rows scanned whole: their order is
            # near the exact one, and the caller re-scores the candidates exactly
            keys, found_dists = view.nearest(q, fetch)
            ids.append(keys)
            dists.append(found_dists.astype(np.float32))
            continue
        with scope.searching:  # one search per index at a time: usearch's per-thread
            # search context is not ours to share between Python threads
            found = view.search(q, fetch, exact=True, threads=1)  # an older graph, scanned
        ids.append(np.asarray(found.keys, np.int64))
        dists.append(np.asarray(found.distances, np.float32))
    tail = scope.tail.by_dim.get(q.size)
    if tail is not None and tail[0]:
        tail_ids, tail_sources, tail_vectors = tail
        picked = np.array([sources is None or s in sources for s in tail_sources], bool)
        if picked.any():
            ids.append(np.array(tail_ids, np.int64)[picked])
            dists.append((1.0 - np.stack(tail_vectors)[picked] @ q).astype(np.float32))
    if not ids:
        return []
    all_ids, all_dists = np.concatenate(ids), np.concatenate(dists)
    order = np.argsort(all_dists, kind="stable")
    out: list[int] = []
    for i in order:
        row_id = int(all_ids[i])
        if row_id not in scope.dead:
            out.append(row_id)
            if len(out) == want:
                break
    return out


def _open_all(
    folder: Path,
) -> tuple[seg.Manifest, list[tuple[seg.Segment, Index | seg.FlatView]]] | None:
    manifest = seg.read_manifest(folder)
    if manifest is None:
        return None
    try:
        views = [(s, seg.open_segment(folder, s)) for g in manifest.generations for s in g.segments]
    except ValueError as exc:
        log.warning("vector index %s unreadable (%s): rebuilding", folder.name, exc)
        return None
    return manifest, views


_pool: ProcessPoolExecutor | None = None


def _builder() -> ProcessPoolExecutor:
    """The process that builds indexes: reading and converting every row holds the GIL
    (a thread doing it would stall the event loop); in a process of its own it cannot,
    and what the build holds in memory is that process's. One at a time per process
    (builds are rare)."""
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    return _pool


def _drop_builder() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool = None


def _write(
    url_text: str,
    folder: Path,
    model: str,
    user_id: int,
    agent_id: str,
    span: tuple[int, int],
    replace: bool,
    seen: bytes | None,
) -> bool:
    """Under the scope's write lock: build the generation `span` and name it in the
    manifest (all of it when `replace`, else after the current ones, then merge the
    newest generations while one is at most MERGE_FACTOR times its successor). False,
    doing nothing, when another process holds the lock, or the manifest file no longer
    holds `seen` (the bytes the decision was taken on: another build got there first).
    Blocking: runs in the builder process."""
    url = sa.make_url(url_text)
    with seg.writer_lock(folder) as mine:
        if not mine:
            return False
        try:
            raw: bytes | None = (folder / "manifest.json").read_bytes()
        except OSError:
            raw = None
        if raw != seen:
            return False
        current = seg.read_manifest(folder)
        if replace or current is None:
            gens = [seg.build_generation(url, folder, model, user_id, agent_id, *span)]
        else:
            new = seg.build_generation(url, folder, model, user_id, agent_id, *span)
            gens = [*current.generations, new]
            while len(gens) >= 2 and gens[-2].rows <= MERGE_FACTOR * gens[-1].rows:
                lo, hi = gens[-2].lo, gens[-1].hi  # read back from the database: flat
                gens[-2:] = [seg.build_generation(url, folder, model, user_id, agent_id, lo, hi)]
        manifest = seg.Manifest(model, user_id, agent_id, tuple(gens))
        seg.write_manifest(folder, manifest)
        seg.remove_unlisted(folder, manifest)
        return True
