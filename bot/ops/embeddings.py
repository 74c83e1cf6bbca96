"""The operator's side of semantic search: `mnemo memory embed` and what `mnemo memory
doctor` says of the embeddings (docs/OPERATIONS.md, "Embeddings")."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from bot.app.services import build_embedder
from bot.config.settings import Settings
from bot.ops.common import (
    EXIT_FAULT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    StopFlag,
    err,
    open_memory,
    stop_on_ctrl_c,
)
from bot.ops.progress import ProgressBar
from memory.contract.errors import StopRequested


async def embed_command(
    settings: Settings, *, prune: bool = False, out: TextIO = sys.stdout
) -> int:
    """Embed everything lacking a vector of `embeddings.model`; `prune`: then delete the
    vectors of other models. Progress on stderr."""
    from memory.search.semantic.backlog import embed_backlog, sources_of
    from memory.search.semantic.client import EmbeddingError
    from memory.search.semantic.store import delete_other_models

    embedder = build_embedder(settings)
    if embedder is None:
        err("embeddings are off: set embeddings.model in the config (docs/OPERATIONS.md)")
        return EXIT_USAGE
    stop = StopFlag()
    try:
        async with open_memory(settings) as m:
            if not sources_of(m.provider):
                err(f"the {m.provider.name} provider offers nothing to embed")
                return EXIT_FAULT
            # The backfill's tokens are recorded like the worker's (memory/storage/usage.py).
            from memory.storage.usage import UsageRecorder, UsageStore

            embedder.usage = UsageRecorder(UsageStore(m.engine))
            bar: list[ProgressBar] = []
            seen = [0]

            def progress(done: int, total: int) -> None:
                # Called after each batch is stored: a stop asked meanwhile ends here.
                if not bar:
                    bar.append(ProgressBar(total, unit="items"))
                seen[0] = done
                bar[0].show(done, "embedded")
                if stop.stop:
                    raise StopRequested("stopped by the operator (Ctrl-C)")

            try:
                with stop_on_ctrl_c(stop, "batch"):
                    stored = await embed_backlog(
                        m.provider, embedder, progress=progress, engine=m.engine
                    )
            except StopRequested:
                err(
                    f"stopped by Ctrl-C: {seen[0]} item(s) embedded and kept in {m.where}. "
                    "Run `mnemo memory embed` again to continue with the rest."
                )
                return EXIT_INTERRUPTED
            except EmbeddingError as exc:
                err(f"embedding stopped (what is stored is kept; run again): {exc.reason}")
                return EXIT_FAULT
            finally:
                if bar:
                    bar[0].close()
            pruned = await delete_other_models(m.engine, embedder.model) if prune else 0
    finally:
        await embedder.close()
    print(
        f"embedded {stored} item(s) with {embedder.model} ({embedder.dim} dimensions)"
        + (f"; deleted {pruned} vector(s) of other models" if prune else ""),
        file=out,
    )
    return EXIT_OK


async def embeddings_report(settings: Settings, m: Any, *, probe: bool = True) -> list[str]:
    """Doctor's lines on embeddings: off, or the model's coverage, the endpoint's state
    (one request; not asked unless `probe`), and vectors that are never compared (other
    models, other dimensions: the latter known only from the endpoint)."""
    from memory.search.semantic.backlog import sources_of
    from memory.search.semantic.client import EmbeddingError
    from memory.search.semantic.store import model_counts

    embedder = build_embedder(settings)
    if embedder is None:
        return ["embeddings: off (embeddings.model is empty; search is lexical)"]
    dim: int | None = None
    endpoint = "endpoint not probed (--offline)"
    try:
        if probe:
            try:
                dim = (await embedder.embed(["doctor probe"])).shape[1]
                endpoint = f"endpoint ok, {dim} dimensions"
            except EmbeddingError as exc:
                endpoint = f"endpoint unavailable ({exc.reason}): search is lexical only"
    finally:
        await embedder.close()
    total = done = 0
    for source in sources_of(m.provider):
        have, embedded = await source.counts(embedder.model)
        total, done = total + have, done + embedded
    counts = await model_counts(m.engine, embedder.model)
    lines = [
        f"embeddings: model {embedder.model}: embedded {done} of {total} item(s), "
        f"{total - done} pending; {endpoint}"
    ]
    if counts.other_models:
        names = ", ".join(f"{name} ({n})" for name, n in sorted(counts.other_models.items()))
        lines.append(
            f"note: {sum(counts.other_models.values())} vector(s) of other models "
            f"are never compared: {names}; `mnemo memory embed --prune` deletes them"
        )
    stale = {d: n for d, n in counts.vectors.items() if d and dim is not None and d != dim}
    if stale:
        dims = ", ".join(f"{n} of dimension {d}" for d, n in sorted(stale.items()))
        lines.append(
            f"note: vectors of {embedder.model} in another dimension than the server's "
            f"{dim} are never compared ({dims}); `mnemo memory embed` embeds them again"
        )
    return lines
