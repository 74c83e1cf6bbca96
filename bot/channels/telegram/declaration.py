"""What the Telegram channel declares to the bot (`bot.channels.base.ChannelPlugin`): its
`telegram:` section, its secrets, its erase hook, its admins and where the channel is.
Light on purpose: the settings root reads it when it is imported, so the channel itself
(python-telegram-bot, the delivery tables) is named by path and loaded only to run it."""

from __future__ import annotations

from bot.channels.base import ChannelPlugin, SecretKey
from bot.channels.telegram.settings import TelegramSettings, missing_token, token_forms


def _admins(section: TelegramSettings) -> list[int]:
    return section.admin_ids


TELEGRAM = ChannelPlugin(
    name="telegram",
    factory="bot.channels.telegram.channel:Telegram",
    settings=TelegramSettings,
    secrets=(SecretKey("token", token_forms), SecretKey("webhook.secret_token")),
    urls=("base_url", "webhook.url"),
    erase="bot.channels.telegram.erasure:register",
    admins=_admins,
    check=missing_token,
    doctor="bot.channels.telegram.doctor:notes",
    env=(
        ("TELEGRAM_BOT_TOKEN", "token"),
        ("TELEGRAM_WEBHOOK_URL", "webhook.url"),
        ("TELEGRAM_WEBHOOK_SECRET", "webhook.secret_token"),
    ),
)
