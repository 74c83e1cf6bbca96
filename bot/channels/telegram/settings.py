"""The `telegram:` config section, declared by the channel (`declaration.TELEGRAM`): the
settings root (`bot.config.settings`) adds it under the channel's name."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from bot.config.section import Secret, Section

TELEGRAM_ID = 2**63 - 1  # chat and user ids are 64-bit signed in the Bot API
# A bot token as @BotFather issues it: the bot's numeric id, a colon, the secret part.
# Anything else would be refused by Telegram anyway, and may not even form a URL.
_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")
# PTB's own form of a Bot API URL ends in /bot (or /bot{token}); ours is the server root.
_PTB_SUFFIXES = ("/bot{token}", "/bot")
MISSING_TOKEN = "no Telegram bot token: set TELEGRAM_BOT_TOKEN (or telegram.token in the config)"


class WebhookSettings(Section):
    url: str = ""
    listen: str = "0.0.0.0"
    port: int = Field(default=8443, ge=1, le=65535)
    secret_token: Secret = Secret("")


TelegramId = Annotated[int, Field(ge=-TELEGRAM_ID, le=TELEGRAM_ID)]


class TelegramSettings(Section):
    token: Secret = Secret("")
    # A self-hosted Bot API server's root, e.g. http://localhost:8081; PTB's form
    # (http://localhost:8081/bot) is accepted and read as the root.
    base_url: str = ""
    allowed_ids: list[TelegramId] = Field(default_factory=list)
    admin_ids: list[TelegramId] = Field(default_factory=list)
    group_mode: Literal["mention", "always", "disabled"] = "mention"
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    concurrent_updates: int = Field(default=64, ge=1, le=4096)
    # Telegram takes about one message (or edit) per second per chat: less is refused.
    stream_edit_interval_s: float = Field(default=1.5, ge=1, le=60)

    @field_validator("token")
    @classmethod
    def _token_shape(cls, v: Secret) -> Secret:
        token = v.get_secret_value().strip()
        if token and not _TOKEN.match(token):
            raise ValueError("expected a bot token as @BotFather gives it, like 123456:ABC-def")
        return v

    @field_validator("base_url")
    @classmethod
    def _api_root(cls, v: str) -> str:
        if not v:
            return v
        if not v.startswith(("http://", "https://")) or len(v.partition("://")[2]) == 0:
            raise ValueError("expected the Bot API server's URL, like http://localhost:8081")
        root = v.rstrip("/")
        for suffix in _PTB_SUFFIXES:
            if root.endswith(suffix):
                return root.removesuffix(suffix)
        return root


def telegram_settings(settings: Any) -> TelegramSettings:
    """The `telegram:` section of the settings root (typed: the root's channel sections
    are added when it is built, so a type checker cannot see them)."""
    section: TelegramSettings = settings.telegram
    return section


def token_forms(token: str) -> tuple[str, ...]:
    """The token, and its secret part alone (after the bot id): a URL or a library's
    message may carry either."""
    return (token, token.partition(":")[2])


def missing_token(section: TelegramSettings) -> str | None:
    """What stops `mnemo run` before it starts: no token."""
    return None if section.token.get_secret_value().strip() else MISSING_TOKEN
