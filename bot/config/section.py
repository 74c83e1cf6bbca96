"""The base of every settings section, and the secret type: below both the settings root
(`bot.config.settings`) and the sections channels declare in their own folders, so a
channel's section needs nothing of the root that reads it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr


class Section(BaseModel):
    # No NaN or infinity anywhere: every comparison with one is false, so it would pass
    # the bounds below and fail every turn (`llm.temperature: nan`).
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class Secret(SecretStr):
    """pydantic's SecretStr: `**********` in repr, str and model_dump, so no log line or
    traceback that shows the settings shows a token or key; `get_secret_value()` where
    it is used. Equal to its plain value, so a comparison with text still works."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.get_secret_value() == other
        return super().__eq__(other)

    __hash__ = SecretStr.__hash__
