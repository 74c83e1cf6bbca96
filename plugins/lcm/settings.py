"""lcm's settings, `memory.lcm` in config.yaml (plus `keep_tail` and `target_tokens`, which the
bot fills in from `compaction`): the one definition the config loader and the provider
both validate with."""

from __future__ import annotations

from pydantic import Field

from memory.contract.settings import MAX_MESSAGES, MAX_TOKENS, ProviderSettings


class LcmSettings(ProviderSettings):
    # Newest messages no compaction touches.
    keep_tail: int = Field(default=20, ge=0, le=MAX_MESSAGES)
    # What an automatic compaction brings the context down to (0: no target), from
    # compaction.max_tokens x compaction.target_fraction (memory/compaction/goal.py).
    target_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    # Messages per leaf summary: one message alone is not worth a summary.
    leaf_chunk_size: int = Field(default=10, ge=2, le=MAX_MESSAGES)
    # Summaries of one depth that make a condensed one.
    condensed_min: int = Field(default=2, ge=2, le=MAX_MESSAGES)
    # Rounds a full compaction may take, each planned from what the previous one left.
    max_full_rounds: int = Field(default=10, ge=1, le=1000)
