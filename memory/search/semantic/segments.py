"""The files of a scope's on-disk vector index (memory/search/semantic/disk.py): its
segments, the manifest naming them, the writer's lock, and the build, all synchronous:
callers run them in a thread, never on the event loop.

Layout: `<root>/<user_id>-<digest of (model, user, agent)>/` holds `manifest.json`,
`write.lock` and the segments, `seg-*.flat` (FLAT: the rows as int8, then their ids),
scanned whole at search time. A segment holds the vectors of one source and one
dimension whose row ids (`embeddings.id`) are in its generation's range (lo, hi]; the
manifest lists the generations, oldest first. Indexes written before every segment was
flat may still hold `seg-*.usearch` (GRAPH: a usearch HNSW index, bf16 or f16): read and
scanned whole until a merge or a rebuild rewrites their rows flat; none is written now.

Crash safety: a segment is written under a temporary name, fsynced and renamed; the
manifest likewise, after its segments. A file is never changed once named, so a reader
that mapped it keeps a consistent view while a writer replaces the manifest; files no
manifest names are deleted by the next writer (an open map outlives the unlink on
POSIX). One writer at a time per scope: `flock` on `write.lock`, taken without waiting
(a process that finds it held leaves the work to the holder).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from usearch.compiled import MetricKind
from usearch.index import Index
from usearch.index import search as usearch_search

from memory.search.semantic.store import embeddings

FORMAT = 1
READ_ROWS = 2000  # rows read from the database per batch while building
# Every segment is flat: an int8 scan of all its rows, the best `limit` + disk.OVERFETCH
# then re-scored exactly, found all 50 nearest at 100k and at 1M x 1536 (109 ms), where
# an HNSW graph lost recall as it grew (0.929 at 1M for a walk of 2048) and cost minutes
# of CPU to build (330-453 s at 100k x 1536) that searches never repaid: segments small
# enough to keep their recall were scanned whole anyway (bench/HISTORY.md, "Vectors at
# 1M" and "Every segment flat").

# A segment's largest |component| among its first SCALE_ROWS rows is stored as 127 (a
# larger one later is clipped). Not a percentile: clipping the rows' largest components
# (at the 99.99th, as first shipped) put a true top-50 row at int8 rank 133 at 100k x
# 384, where the maximum left the worst at 61 (bench/HISTORY.md, "Every segment flat").
SCALE_ROWS = 1000


@dataclass(frozen=True)
class Segment:
    file: str
    source: str
    dim: int
    count: int
    # A manifest written before flat segments existed names no kind: its segments are graphs.
    kind: str = "graph"  # FLAT (int8 rows) or GRAPH (a usearch index, no longer written)
    scale: float = 0.0  # FLAT: the component value stored as 127


GRAPH, FLAT = "graph", "flat"


@dataclass(frozen=True)
class Generation:
    lo: int  # exclusive
    hi: int  # inclusive
    rows: int
    segments: tuple[Segment, ...] = ()


@dataclass(frozen=True)
class Manifest:
    model: str
    user_id: int
    agent_id: str
    generations: tuple[Generation, ...] = field(default_factory=tuple)

    @property
    def max_id(self) -> int:
        return self.generations[-1].hi if self.generations else 0

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.generations)


def scope_dir(root: Path, model: str, user_id: int, agent_id: str) -> Path:
    digest = hashlib.sha256(json.dumps([model, user_id, agent_id]).encode()).hexdigest()[:16]
    return root / f"{user_id}-{digest}"


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest in `folder`, or None when there is none or it cannot be read."""
    try:
        raw = json.loads((folder / "manifest.json").read_text())
        if raw.get("format") != FORMAT:
            return None
        gens = tuple(
            Generation(
                int(g["lo"]),
                int(g["hi"]),
                int(g["rows"]),
                tuple(Segment(**s) for s in g["segments"]),
            )
            for g in raw["generations"]
        )
        return Manifest(str(raw["model"]), int(raw["user_id"]), str(raw["agent_id"]), gens)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_manifest(folder: Path, manifest: Manifest) -> None:
    raw = {"format": FORMAT, **asdict(manifest)}
    _write_atomic(folder / "manifest.json", json.dumps(raw).encode())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def writer_lock(folder: Path) -> Iterator[bool]:
    """Yields True while this process holds the scope's write lock, False when another
    does (then it does not wait)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "write.lock", "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def open_segment(folder: Path, seg: Segment) -> Index | FlatView:
    """A memory-mapped view of `seg` (an older index's GRAPH segment: the usearch index
    itself); ValueError when the file is missing, damaged or not what the manifest says."""
    path = folder / seg.file
    if seg.kind == FLAT:
        try:
            return FlatView(path, seg)
        except OSError as exc:
            raise ValueError(f"{seg.file}: {exc}") from exc
    if seg.kind != GRAPH:
        raise ValueError(f"{seg.file}: a segment of an unknown kind {seg.kind!r}")
    try:
        index = Index.restore(str(path), view=True)
    except Exception as exc:  # usearch raises RuntimeError/ValueError on a bad file
        raise ValueError(f"{seg.file}: {exc}") from exc
    if index is None or index.ndim != seg.dim or len(index) != seg.count:
        raise ValueError(f"{seg.file}: not the segment the manifest lists")
    return index


def sync_url(engine_url: sa.URL) -> sa.URL | None:
    """The URL of a blocking driver for the same database (the build reads in its own
    thread, never through the loop's connections); None for an in-memory SQLite."""
    backend = engine_url.get_backend_name()
    if backend == "sqlite":
        db = engine_url.database or ""
        if not db or db == ":memory:" or "mode=memory" in db:
            return None
        return engine_url.set(drivername="sqlite")
    if backend == "postgresql":
        return engine_url.set(drivername="postgresql+psycopg")
    return None


def held_rows(url: sa.URL, model: str, user_id: int, agent_id: str, upto: int) -> tuple[int, int]:
    """(rows, newest id) of the scope's vectors with id at most `upto`: the index's drift
    check, counted on a blocking connection (at 1M rows a count is a loop stall on the
    inline SQLite). Blocking: run it in a thread."""
    e = embeddings.c
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            held, newest = conn.execute(
                sa.select(sa.func.count(), sa.func.max(e.id)).where(
                    e.user_id == user_id,
                    e.agent_id == agent_id,
                    e.model == model,
                    e.dim > 0,
                    e.id <= upto,
                )
            ).one()
    finally:
        engine.dispose()
    return int(held), int(newest or 0)


def build_generation(
    url: sa.URL, folder: Path, model: str, user_id: int, agent_id: str, lo: int, hi: int
) -> Generation:
    """Build the segments of the scope's rows with id in (lo, hi] from the database and
    write them (not yet named by the manifest). Blocking: run it in a thread."""
    e = embeddings.c
    query = (
        sa.select(e.id, e.source, e.dim, e.vector)
        .where(
            e.user_id == user_id,
            e.agent_id == agent_id,
            e.model == model,
            e.dim > 0,
            e.id > lo,
            e.id <= hi,
        )
        .order_by(e.id)
    )
    built: dict[tuple[str, int], _FlatWriter] = {}
    rows = 0
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=READ_ROWS).execute(query)
            for chunk in result.partitions():
                rows += _add_chunk(folder, f"seg-{lo}-{hi}", built, chunk)
        segments = [built[key].finish() for key in sorted(built)]
    except BaseException:
        for writer in built.values():
            writer.abandon()
        raise
    finally:
        engine.dispose()
    _fsync_dir(folder)
    return Generation(lo, hi, rows, tuple(segments))


def _add_chunk(
    folder: Path, prefix: str, built: dict[tuple[str, int], _FlatWriter], chunk: Any
) -> int:
    groups: dict[tuple[str, int], list[Any]] = {}
    for r in chunk:
        if len(r.vector) == 4 * r.dim:  # a damaged row is skipped, never misread
            groups.setdefault((r.source, r.dim), []).append(r)
    for (source, dim), group in groups.items():
        writer = built.get((source, dim))
        if writer is None:
            name = f"{prefix}-{uuid.uuid4().hex[:12]}.flat"
            writer = built[(source, dim)] = _FlatWriter(folder, name, source, dim)
        vectors = np.frombuffer(b"".join(r.vector for r in group), np.float32).reshape(-1, dim)
        writer.add(np.fromiter((r.id for r in group), np.int64, len(group)), vectors)
    return sum(len(g) for g in groups.values())


class _FlatWriter:
    """A FLAT segment being written: int8 rows appended to a temporary file as they are
    read, then the rows' ids; named once complete (`finish`)."""

    def __init__(self, folder: Path, name: str, source: str, dim: int) -> None:
        self.folder, self.name, self.source, self.dim = folder, name, source, dim
        self.tmp = folder / f".{name}.tmp"
        self.file = open(self.tmp, "wb")  # noqa: SIM115 (closed by finish or abandon)
        self.ids: list[np.ndarray] = []
        self.waiting: list[np.ndarray] = []  # rows read before the scale is known
        self.count = 0
        self.scale = 0.0

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.ids.append(ids)
        self.count += len(ids)
        if self.scale:
            self.file.write(quantized(vectors, self.scale).tobytes())
            return
        # The scale from the first SCALE_ROWS rows (components of one model look alike),
        # not from the first batch: a source's first batch may hold a single row.
        self.waiting.append(vectors)
        if self.count >= SCALE_ROWS:
            self._flush()

    def _flush(self) -> None:
        waiting = np.concatenate(self.waiting)
        largest = float(np.abs(waiting).max())
        self.scale = largest if largest > 0 else 1.0
        self.file.write(quantized(waiting, self.scale).tobytes())
        self.waiting = []

    def finish(self) -> Segment:
        if not self.scale:
            self._flush()
        self.file.write(np.concatenate(self.ids).tobytes())
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.folder / self.name)
        return Segment(self.name, self.source, self.dim, self.count, FLAT, self.scale)

    def abandon(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


def quantized(vectors: np.ndarray, scale: float) -> np.ndarray:
    """`vectors` as FLAT stores them: `scale` is 127, beyond it clipped."""
    return np.clip(np.rint(vectors * (127.0 / scale)), -127, 127).astype(np.int8)


class FlatView:
    """A FLAT segment mapped read-only: its int8 rows, then their ids (`embeddings.id`)."""

    def __init__(self, path: Path, seg: Segment) -> None:
        size = seg.count * seg.dim
        if seg.count <= 0 or seg.scale <= 0 or path.stat().st_size != size + 8 * seg.count:
            raise ValueError(f"{seg.file}: not the segment the manifest lists")
        self.scale = seg.scale
        self.rows = np.memmap(path, np.int8, "r", shape=(seg.count, seg.dim))
        self.keys = np.memmap(path, np.int64, "r", offset=size, shape=(seg.count,))
        # Written in id order (the build reads by id): `contains` bisects instead of
        # hashing a million keys on every PostgreSQL search (disk.py's `_missed`).
        if seg.count > 1 and not bool(np.all(self.keys[1:] > self.keys[:-1])):
            raise ValueError(f"{seg.file}: ids out of order")

    def __len__(self) -> int:
        return len(self.keys)

    def nearest(self, q: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, cosine distances by the int8 rows, approximately) of the `count` rows
        nearest to `q` (a unit vector, as every stored one is: the embedder normalises)."""
        want = min(count, len(self))
        q8 = quantized(q, self.scale)
        # Inner product, not cosine: stored vectors and `q` are unit vectors, so the order
        # is the same up to rounding (which the exact re-score absorbs) for 14% less CPU.
        found = usearch_search(self.rows, q8, want, MetricKind.IP, exact=True, threads=1)
        dots = 1.0 - np.asarray(found.distances, np.float64)  # usearch's IP is 1 - dot
        return self.keys[np.asarray(found.keys, np.int64)], 1.0 - dots * (self.scale / 127) ** 2

    def contains(self, ids: np.ndarray) -> np.ndarray:
        wanted = ids.astype(np.int64)
        at = np.minimum(np.searchsorted(self.keys, wanted), len(self.keys) - 1)
        return np.asarray(self.keys[at] == wanted)


def remove_unlisted(folder: Path, manifest: Manifest | None) -> None:
    """Delete the segment files `manifest` does not name (left by a crash or replaced)."""
    named = {s.file for g in (manifest.generations if manifest else ()) for s in g.segments}
    for path in [*folder.glob("seg-*.usearch"), *folder.glob("seg-*.flat")]:
        if path.name not in named:
            path.unlink(missing_ok=True)
    for path in folder.glob(".*.tmp"):
        path.unlink(missing_ok=True)
