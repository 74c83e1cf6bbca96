"""The `lcm` memory provider (Lossless Context Management), registered as the entry
point `lcm = "plugins.lcm:create"`."""

from __future__ import annotations

from memory.capabilities import ProviderContext
from plugins.lcm.provider import LcmProvider


def create(ctx: ProviderContext) -> LcmProvider:
    return LcmProvider(ctx)


# Lets `mnemo providers` list the capabilities without opening a database.
create.provider_class = LcmProvider  # type: ignore[attr-defined]

__all__ = ["LcmProvider", "create"]
