"""The `lcm` memory provider (Lossless Context Management), registered as the entry
point `lcm = "plugins.lcm:plugin"`."""

from __future__ import annotations

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import ProviderPlugin
from plugins.lcm.provider import LcmProvider
from plugins.lcm.settings import LcmSettings


def create(ctx: ProviderContext) -> LcmProvider:
    return LcmProvider(ctx)


plugin = ProviderPlugin("lcm", create, settings=LcmSettings, provider_class=LcmProvider)

__all__ = ["LcmProvider", "LcmSettings", "create", "plugin"]
