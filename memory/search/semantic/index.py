"""`VectorIndex`: exact cosine search over one (user, agent)'s vectors of one model.

Each scope (user_id, agent_id) is a float32 matrix per dimension, cached in this process
and brought up to date on every search by reading only the rows newer than it holds
(`ix_embeddings_scope`), so vectors another replica stored are seen at the next search.
Rows are unit length, so a matrix-vector product gives every cosine at once: at 100k
vectors of 384 dimensions that is a few milliseconds (bench/vector_bench.py).

- Vectors of a dimension other than the query's are never compared: they are skipped
  and counted (`skipped_other_dim`); another model's are never read at all.
- Rows committed out of id order (PostgreSQL assigns ids before commit) are caught by
  listing the ids (from the index alone) of the scope's last `ID_LOOKBACK` ids and reading
  any it lacks; rows deleted (a rewritten note's
  old vector, `--prune`) are noticed every `revalidate_s` by a count, which reloads the
  scope when it differs.
- Memory: the cached scopes are kept under `max_bytes` (default 256 MiB: 100k vectors of
  384 dimensions take about 170 MB with their keys, of 1536 dimensions 630 MB) by
  dropping the least recently searched; a scope larger than the cap alone is searched
  but not kept.
- `also`: a search can ask for the similarity of given items besides the nearest (hybrid
  search weighs every word hit by its meaning), looked up by key in the scope; and
  `partners`, of each hit's other vector (a message's alone and with the next one:
  memory/search/pairs.py), so every item found has both its scores.
- Large scopes: with `index_dir` set, a scope of `disk_min_rows` vectors or more is
  searched through its on-disk index instead (memory/search/semantic/disk.py) and never
  loaded here; the cache pays only below that (bench/vector_scale.py measures both).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.embedding import DEFAULT_CACHE_BYTES, DEFAULT_DISK_MIN_ROWS, VectorHit
from memory.search.pairs import asked
from memory.search.semantic.store import embeddings

if TYPE_CHECKING:
    from memory.search.semantic.disk import DiskIndex

DEFAULT_MAX_BYTES = DEFAULT_CACHE_BYTES
ID_LOOKBACK = 1000
REVALIDATE_S = 300.0
THREAD_ROWS = 20_000  # larger matrices are multiplied off the event loop


@dataclass
class _Block:
    """The vectors of one dimension in a scope; rows [0, n) are in use."""

    dim: int
    matrix: np.ndarray
    ids: np.ndarray
    codes: np.ndarray  # source codes (VectorIndex._codes)
    keys: list[str] = field(default_factory=list)
    rows: dict[tuple[int, str], int] = field(default_factory=dict)  # (code, key) -> row
    n: int = 0

    @classmethod
    def empty(cls, dim: int, capacity: int = 64) -> _Block:
        return cls(
            dim,
            np.empty((capacity, dim), np.float32),
            np.empty(capacity, np.int64),
            np.empty(capacity, np.int16),
        )

    def append(
        self, vectors: np.ndarray, ids: np.ndarray, codes: np.ndarray, keys: list[str]
    ) -> None:
        need = self.n + len(ids)
        if need > len(self.ids):
            cap = need + max(1024, need // 8)  # headroom: a copy per 12% growth, not 2x RAM
            # New arrays: a search running in a thread keeps reading its old views.
            matrix = np.empty((cap, self.dim), np.float32)
            matrix[: self.n] = self.matrix[: self.n]
            grown_ids, grown_codes = np.empty(cap, np.int64), np.empty(cap, np.int16)
            grown_ids[: self.n], grown_codes[: self.n] = self.ids[: self.n], self.codes[: self.n]
            self.matrix, self.ids, self.codes = matrix, grown_ids, grown_codes
        self.matrix[self.n : need] = vectors
        self.ids[self.n : need] = ids
        self.codes[self.n : need] = codes
        self.rows.update(
            ((int(code), key), row)
            for row, (code, key) in enumerate(zip(codes, keys, strict=True), self.n)
        )
        self.keys.extend(keys)
        self.n = need

    @property
    def nbytes(self) -> int:
        # A key's string and its entry in `rows`: about 160 bytes.
        return self.matrix.nbytes + self.ids.nbytes + self.codes.nbytes + 160 * len(self.keys)


@dataclass
class _Scope:
    blocks: dict[int, _Block] = field(default_factory=dict)
    max_id: int = 0
    rows: int = 0
    checked_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks.values())

    def recent_held(self, since: int) -> int:
        return sum(int((b.ids[: b.n] > since).sum()) for b in self.blocks.values())

    def held_since(self, since: int) -> set[int]:
        return {int(i) for b in self.blocks.values() for i in b.ids[: b.n][b.ids[: b.n] > since]}


class VectorIndex:
    """Search one model's vectors within a (user, agent) scope."""

    def __init__(
        self,
        engine: AsyncEngine,
        model: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        revalidate_s: float = REVALIDATE_S,
        index_dir: Path | None = None,
        disk_min_rows: int = DEFAULT_DISK_MIN_ROWS,
    ) -> None:
        """`index_dir`: where large scopes keep their on-disk index (None: every scope is
        cached here); `disk_min_rows`: the vectors from which a scope goes there (0:
        never)."""
        self.engine, self.model = engine, model
        self.max_bytes, self.revalidate_s = max(0, int(max_bytes)), revalidate_s
        self.disk: DiskIndex | None = None
        self.disk_min_rows = disk_min_rows
        self._large: dict[tuple[int, str], bool] = {}  # scope -> searched on disk
        if index_dir is not None and disk_min_rows > 0:
            from memory.search.semantic.disk import DiskIndex
            from memory.search.semantic.segments import sync_url

            if sync_url(engine.url) is not None:  # an in-memory database stays here
                self.disk = DiskIndex(engine, model, index_dir)
        self.skipped_other_dim = 0  # vectors passed over for their dimension, all searches
        self._scopes: OrderedDict[tuple[int, str], _Scope] = OrderedDict()
        self._codes: dict[str, int] = {}
        self._names: list[str] = []

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self._scopes.values())

    def forget(self, user_id: int | None = None, agent_id: str | None = None) -> None:
        """Drop cached scopes (all, or one): the next search reloads from the database.
        One user's forget or erase also deletes that user's on-disk index files."""
        if user_id is None:
            self._scopes.clear()
        else:
            self._scopes.pop((user_id, agent_id or ""), None)
            self._large.pop((user_id, agent_id or ""), None)
            if self.disk is not None:
                self.disk.drop(user_id)

    async def search(
        self,
        user_id: int,
        agent_id: str,
        query_vector: np.ndarray,
        *,
        sources: set[str] | None = None,
        limit: int = 20,
        also: Collection[tuple[str, str]] = (),
        partners: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        """The `limit` vectors of the scope most similar to `query_vector` (cosine, best
        first), of `sources` only when given; then those of the (source, key) items in
        `also` that are not among them and have a vector (hybrid search weighs its word
        hits by meaning too), in `also`'s order, and of each nearest hit's partner
        (`partners[source]`, same key) not found yet (`asked`)."""
        q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q)) if q.size else 0.0
        if norm == 0.0 or limit <= 0:
            return []
        q = q / norm
        key = (user_id, agent_id)
        if self.disk is not None and await self._is_large(user_id, agent_id):
            return await self.disk.search(
                user_id, agent_id, q, sources=sources, limit=limit, also=also, partners=partners
            )
        scope = self._scopes.get(key) or _Scope()
        self._scopes[key] = scope
        self._scopes.move_to_end(key)
        async with scope.lock:
            await self._refresh(scope, user_id, agent_id)
        if self.disk is not None and scope.rows >= self.disk_min_rows:  # it grew: on disk
            self._large[key] = True
            self._scopes.pop(key, None)
            return await self.disk.search(
                user_id, agent_id, q, sources=sources, limit=limit, also=also, partners=partners
            )
        self._evict(keep=key)
        block = scope.blocks.get(q.size)
        self.skipped_other_dim += sum(b.n for d, b in scope.blocks.items() if d != q.size)
        if block is None or block.n == 0:
            return []
        codes = None
        if sources is not None:
            codes = [self._codes[s] for s in sources if s in self._codes]
            if not codes:
                return []
        n, matrix, keys, code_col = block.n, block.matrix, block.keys, block.codes
        args = (matrix[:n], code_col[:n], q, codes, limit)
        if n >= THREAD_ROWS:
            picked = await asyncio.to_thread(_top, *args)
        else:
            picked = _top(*args)
        hits = [VectorHit(self._names[code_col[i]], keys[i], score) for i, score in picked]
        wanted = asked(hits, also, sources, partners)
        if wanted:
            hits += _scored(block, self._codes, q, wanted)
        return hits

    # --- internals -------------------------------------------------------------------

    async def _is_large(self, user_id: int, agent_id: str) -> bool:
        """Whether the scope is searched on disk: it has an index there, or holds
        `disk_min_rows` vectors (asked once per process: the count stops at the
        threshold; a cached scope that grows past it moves in `search`)."""
        key = (user_id, agent_id)
        known = self._large.get(key)
        if known is not None:
            return known
        assert self.disk is not None
        large = self.disk.has_index(user_id, agent_id)
        if not large:
            async with self.engine.connect() as conn:
                past = await conn.scalar(
                    sa.select(embeddings.c.id)
                    .where(*self._where(user_id, agent_id))
                    .order_by(embeddings.c.id)
                    .limit(1)
                    .offset(self.disk_min_rows - 1)
                )
            large = past is not None
        self._large[key] = large
        return large

    def _code(self, source: str) -> int:
        code = self._codes.get(source)
        if code is None:
            code = self._codes[source] = len(self._names)
            self._names.append(source)
        return code

    def _evict(self, keep: tuple[int, str]) -> None:
        total = self.nbytes
        for key in list(self._scopes):
            if total <= self.max_bytes:
                return
            scope = self._scopes[key]
            if key != keep and not scope.lock.locked():
                total -= scope.nbytes
                del self._scopes[key]
        if total > self.max_bytes:  # the scope searched is over the cap on its own
            self._scopes.pop(keep, None)

    def _where(self, user_id: int, agent_id: str) -> list[sa.ColumnElement[bool]]:
        e = embeddings.c
        return [e.user_id == user_id, e.agent_id == agent_id, e.model == self.model, e.dim > 0]

    async def _refresh(self, scope: _Scope, user_id: int, agent_id: str) -> None:
        where = self._where(user_id, agent_id)
        e = embeddings.c
        now = time.monotonic()
        async with self.engine.connect() as conn:
            if scope.max_id and now - scope.checked_at >= self.revalidate_s:
                held = await conn.scalar(
                    sa.select(sa.func.count())
                    .select_from(embeddings)
                    .where(*where, e.id <= scope.max_id)
                )
                if held != scope.rows:  # rows deleted (or missed): start again
                    scope.blocks, scope.max_id, scope.rows = {}, 0, 0
                scope.checked_at = now
            if not scope.max_id:
                scope.checked_at = now
            newer = e.id > scope.max_id
            if scope.max_id and conn.dialect.name != "sqlite":
                # PostgreSQL may commit a lower id after a higher one (SQLite's single
                # writer never does): ids only, from the index, then any we lack.
                since = scope.max_id - ID_LOOKBACK
                recent = (
                    (
                        await conn.execute(
                            sa.select(e.id).where(*where, e.id > since, e.id <= scope.max_id)
                        )
                    )
                    .scalars()
                    .all()
                )
                if len(recent) > scope.recent_held(since):
                    missed = set(recent) - scope.held_since(since)
                    newer = sa.or_(newer, e.id.in_(sorted(missed)))
            rows = (
                await conn.execute(
                    sa.select(e.id, e.source, e.item_key, e.dim, e.vector)
                    .where(*where, newer)
                    .order_by(e.id)
                )
            ).all()
        if not rows:
            return
        by_dim: dict[int, list[sa.Row[*tuple[Any, ...]]]] = {}
        for r in rows:
            if len(r.vector) == 4 * r.dim:  # a damaged row is skipped, never misread
                by_dim.setdefault(r.dim, []).append(r)
        for dim, group in by_dim.items():
            block = scope.blocks.get(dim) or _Block.empty(dim, len(group))
            scope.blocks[dim] = block
            block.append(
                np.frombuffer(b"".join(r.vector for r in group), np.float32).reshape(-1, dim),
                np.fromiter((r.id for r in group), np.int64, len(group)),
                np.fromiter((self._code(r.source) for r in group), np.int16, len(group)),
                [r.item_key for r in group],
            )
        scope.rows += sum(len(g) for g in by_dim.values())
        scope.max_id = max(scope.max_id, max(r.id for r in rows))


def _scored(
    block: _Block,
    codes: dict[str, int],
    q: np.ndarray,
    items: list[tuple[str, str]],
) -> list[VectorHit]:
    """The cosine of each of `items` that has a vector in `block`."""
    wanted = [
        (source, key, row)
        for source, key in items
        if source in codes
        and (row := block.rows.get((codes[source], key))) is not None
        and row < block.n
    ]
    if not wanted:
        return []
    scores = block.matrix[[row for _, _, row in wanted]] @ q
    return [
        VectorHit(source, key, float(s), nearest=False)
        for (source, key, _), s in zip(wanted, scores, strict=True)
    ]


def _top(
    matrix: np.ndarray, code_col: np.ndarray, q: np.ndarray, codes: list[int] | None, limit: int
) -> list[tuple[int, float]]:
    # einsum's own loop, not BLAS: OpenBLAS threads a matrix-vector product, which on a
    # busy machine cost several times einsum's single pass (the product is memory-bound:
    # it reads the whole matrix once); bench/vector_bench.py measures it.
    scores = np.einsum("ij,j->i", matrix, q)
    if codes is not None:
        scores = np.where(np.isin(code_col, codes), scores, -np.inf)
    k = min(limit, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(i), float(scores[i])) for i in top if np.isfinite(scores[i])]
