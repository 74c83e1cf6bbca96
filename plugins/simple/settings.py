"""simple's settings, `memory.simple` in config.yaml (plus `keep_tail`, which the bot
fills in from `compaction.keep_tail`): the one definition the config loader and the
provider both validate with."""

from __future__ import annotations

from pydantic import Field

from memory.contract.settings import MAX_MESSAGES, MAX_TOKENS, PathText, ProviderSettings

DEFAULT_STORE_DIR = "data/memory"
DEFAULT_KEEP_TAIL = 20


class SimpleSettings(ProviderSettings):
    # Where the notes files live (relative: from the working directory, like the SQLite
    # path); empty means the default.
    store_dir: PathText = DEFAULT_STORE_DIR
    # Newest messages a compaction leaves out of the summary.
    keep_tail: int = Field(default=DEFAULT_KEEP_TAIL, ge=0, le=MAX_MESSAGES)
    # What an automatic compaction brings the context down to (0: no target).
    target_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
