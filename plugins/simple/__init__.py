"""The `simple` memory provider (entry point `simple = "plugins.simple:create"`)."""

from __future__ import annotations

from memory.capabilities import ProviderContext
from plugins.simple.provider import DEFAULT_KEEP_TAIL, DEFAULT_STORE_DIR, SimpleProvider


def create(ctx: ProviderContext) -> SimpleProvider:
    """Factory: `ctx.config` is `memory.simple` plus `keep_tail` from `compaction`.
    A relative `store_dir` is taken from the working directory, like the SQLite path."""
    return SimpleProvider(
        ctx,
        store_dir=ctx.config.get("store_dir") or DEFAULT_STORE_DIR,
        keep_tail=ctx.config.get("keep_tail", DEFAULT_KEEP_TAIL),
    )


# `mnemo providers` lists capabilities from the class without constructing a provider.
create.provider_class = SimpleProvider  # type: ignore[attr-defined]

__all__ = ["SimpleProvider", "create"]
