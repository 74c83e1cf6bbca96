"""The channels there are: one registration line each. `channels:` in the config names
which of them `mnemo run` runs (bot.app.run); the settings root adds each one's section,
redaction its secrets, an erasure its hook, the token limits its admins."""

from __future__ import annotations

from bot.channels.base import ChannelPlugin
from bot.channels.telegram.declaration import TELEGRAM

CHANNELS: dict[str, ChannelPlugin] = {}


def register(channel: ChannelPlugin) -> ChannelPlugin:
    """Add a channel; a second one of the same name is a mistake."""
    if channel.name in CHANNELS:
        raise ValueError(f"channel {channel.name!r} is registered twice")
    CHANNELS[channel.name] = channel
    return channel


def registered() -> list[ChannelPlugin]:
    return list(CHANNELS.values())


def named(names: list[str]) -> list[ChannelPlugin]:
    """The channels of `names` (validated by the config: every one is registered)."""
    return [CHANNELS[name] for name in names]


register(TELEGRAM)
register(ChannelPlugin("terminal", factory="bot.channels.terminal:from_services"))
