"""The `simple` memory provider (entry point `simple = "plugins.simple:plugin"`)."""

from __future__ import annotations

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import ProviderPlugin
from memory.contract.settings import settings_of
from plugins.simple.provider import SimpleProvider
from plugins.simple.settings import DEFAULT_STORE_DIR, SimpleSettings


def create(ctx: ProviderContext) -> SimpleProvider:
    """Factory: `memory.simple` plus `keep_tail` and `target_tokens` from `compaction`,
    as SimpleSettings."""
    settings = settings_of(SimpleSettings, "simple", ctx.settings, ctx.config)
    return SimpleProvider(
        ctx,
        store_dir=settings.store_dir or DEFAULT_STORE_DIR,
        keep_tail=settings.keep_tail,
        target_tokens=settings.target_tokens,
    )


plugin = ProviderPlugin("simple", create, settings=SimpleSettings, provider_class=SimpleProvider)

__all__ = ["SimpleProvider", "SimpleSettings", "create", "plugin"]
