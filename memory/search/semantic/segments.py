"""The files of a scope's on-disk vector index (memory/search/semantic/disk.py): usearch
segments, the manifest naming them, the writer's lock, and the build, all synchronous:
callers run them in a thread, never on the event loop.

Layout: `<root>/<user_id>-<digest of (model, user, agent)>/` holds `manifest.json`,
`write.lock` and the segments: `seg-*.usearch` (GRAPH: a usearch index, bf16) or, past
FLAT_MIN, `seg-*.flat` (FLAT: the rows as int8, then their ids; no graph). A segment
holds the vectors of one source and one dimension whose row ids (`embeddings.id`, the
usearch key) are in its generation's range (lo, hi]; the manifest lists the generations,
oldest first.

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
# HNSW parameters (bench/vector_scale.py measured them on clustered 1536-dimension data):
# 32 links per node and an expansion of 128 while adding (at 100k x 1536, 16 links needed
# a walk of 6144 for recall@50 0.995, 32 links one of 1536, at 0.65x the CPU; the build
# takes 1.9x: 330 s of CPU instead of 175); bf16 storage: half the bytes of
# float32, the same recall@50 as f16 and float32 (the exact re-rank absorbs the rounding),
# and half f16's CPU per distance where the CPU computes bf16 dot products (AVX-512 BF16,
# Arm BF16), so the graph walk and the build cost less. i8 lost 0.09 of recall@50. A file
# records its own type: segments written as f16 stay readable.
CONNECTIVITY, EXPANSION_ADD, DTYPE = 32, 128, "bf16"
READ_ROWS = 2000  # rows read from the database per batch while building


@dataclass(frozen=True)
class Segment:
    file: str
    source: str
    dim: int
    count: int
    kind: str = "graph"  # GRAPH (a usearch index) or FLAT (int8 rows, scanned whole)
    scale: float = 0.0  # FLAT: the component value stored as 127


GRAPH, FLAT = "graph", "flat"
# A segment of more components (vectors x dimensions) is written FLAT: no graph. Its walk
# lost recall as it grew (at 1M x 1536, recall@50 0.929 at a breadth of 2048, 0.988 at
# 8192 for 159 ms; the build took 5,374 s of CPU), while an int8 scan of every row, the
# best 100 then re-scored exactly, found all 50 nearest in 109 ms with no build beyond
# quantizing (bench/HISTORY.md, "Vectors at 1M"). Segments up to it are scanned
# whole too (disk.EXACT_SCAN_MAX), over their bf16 copy.
FLAT_MIN = 2**28
FLAT_CLIP = 99.99  # percentile of |component| stored as 127 (larger ones are clipped)


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
    """A memory-mapped view of `seg`; ValueError when the file is missing, damaged or
    not what the manifest says."""
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
    url: sa.URL,
    folder: Path,
    model: str,
    user_id: int,
    agent_id: str,
    lo: int,
    hi: int,
    flat_min: int = FLAT_MIN,
) -> Generation:
    """Build the segments of the scope's rows with id in (lo, hi] from the database and
    write them (not yet named by the manifest). Blocking: run it in a thread."""
    e = embeddings.c
    where = [
        e.user_id == user_id,
        e.agent_id == agent_id,
        e.model == model,
        e.dim > 0,
        e.id > lo,
        e.id <= hi,
    ]
    query = sa.select(e.id, e.source, e.dim, e.vector).where(*where).order_by(e.id)
    built: dict[tuple[str, int], Index | _FlatWriter] = {}
    rows = 0
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            sizes = conn.execute(
                sa.select(e.source, e.dim, sa.func.count()).where(*where).group_by(e.source, e.dim)
            ).all()
            for source, dim, count in sizes:
                if int(count) * int(dim) > flat_min:
                    name = f"seg-{lo}-{hi}-{uuid.uuid4().hex[:12]}.flat"
                    built[(source, int(dim))] = _FlatWriter(folder, name, int(dim))
            result = conn.execution_options(stream_results=True, yield_per=READ_ROWS).execute(query)
            for chunk in result.partitions():
                rows += _add_chunk(built, chunk)
    except BaseException:
        for writer in built.values():
            if isinstance(writer, _FlatWriter):
                writer.abandon()
        raise
    finally:
        engine.dispose()
    segments = []
    for (source, dim), index in sorted(built.items()):
        if isinstance(index, _FlatWriter):
            if index.count:
                segments.append(index.finish(source))
            else:
                index.abandon()
            continue
        name = f"seg-{lo}-{hi}-{uuid.uuid4().hex[:12]}.usearch"
        tmp = folder / f".{name}.tmp"
        index.save(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, folder / name)
        segments.append(Segment(name, source, dim, len(index)))
    _fsync_dir(folder)
    return Generation(lo, hi, rows, tuple(segments))


class _FlatWriter:
    """A FLAT segment being written: int8 rows appended to a temporary file as they are
    read, then the rows' ids; named once complete (`finish`)."""

    def __init__(self, folder: Path, name: str, dim: int) -> None:
        self.folder, self.name, self.dim = folder, name, dim
        self.tmp = folder / f".{name}.tmp"
        self.file = open(self.tmp, "wb")  # noqa: SIM115 (closed by finish or abandon)
        self.ids: list[np.ndarray] = []
        self.count = 0
        self.scale = 0.0

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not self.scale:  # from the first rows read: components of one model look alike
            clip = float(np.percentile(np.abs(vectors), FLAT_CLIP))
            self.scale = clip if clip > 0 else 1.0
        self.file.write(quantized(vectors, self.scale).tobytes())
        self.ids.append(ids.astype(np.int64))
        self.count += len(ids)

    def finish(self, source: str) -> Segment:
        self.file.write(np.concatenate(self.ids).tobytes())
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.folder / self.name)
        return Segment(self.name, source, self.dim, self.count, FLAT, self.scale)

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


def _add_chunk(built: dict[tuple[str, int], Index | _FlatWriter], chunk: Any) -> int:
    groups: dict[tuple[str, int], list[Any]] = {}
    for r in chunk:
        if len(r.vector) == 4 * r.dim:  # a damaged row is skipped, never misread
            groups.setdefault((r.source, r.dim), []).append(r)
    for (source, dim), group in groups.items():
        index = built.get((source, dim))
        if index is None:
            index = built[(source, dim)] = Index(
                ndim=dim,
                metric="cos",
                dtype=DTYPE,
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
            )
        vectors = np.frombuffer(b"".join(r.vector for r in group), np.float32).reshape(-1, dim)
        index.add(np.fromiter((r.id for r in group), np.uint64, len(group)), vectors)
    return sum(len(g) for g in groups.values())


def remove_unlisted(folder: Path, manifest: Manifest | None) -> None:
    """Delete the segment files `manifest` does not name (left by a crash or replaced)."""
    named = {s.file for g in (manifest.generations if manifest else ()) for s in g.segments}
    for path in [*folder.glob("seg-*.usearch"), *folder.glob("seg-*.flat")]:
        if path.name not in named:
            path.unlink(missing_ok=True)
    for path in folder.glob(".*.tmp"):
        path.unlink(missing_ok=True)
