"""What a channel is: a way for people to reach the bot (Telegram, the terminal, ...).

The application root (`bot.app.root`) builds the services once and runs every configured
channel on them; a channel only turns its own kind of input into turns and commands of
the shared pool, and declares what its messages can carry (`Limits`). Start-up, signals,
the health server, background work and shutdown are the root's, never a channel's.

To add a channel: a class with `name`, `limits` and `run(stop)`, and a factory that
builds it from the running `Services` (see `bot.channels.terminal.Terminal`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from bot.app.services import Services


@dataclass(frozen=True)
class Limits:
    """What one message of a channel can hold.

    `max_message`: characters of one plain-text message (command answers are clipped
    to it); `markdown`: whether the channel renders the model's Markdown.
    """

    max_message: int
    markdown: bool


@runtime_checkable
class Channel(Protocol):
    name: str
    limits: Limits

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until `stop` is set (then finish what is in flight and return) or until
        the channel ends by itself (the terminal at end of input). Returns an exit code;
        an exception ends the whole application (the root stops the other channels)."""
        ...


ChannelFactory = Callable[["Services"], Channel]


async def unless_stopped(work: Awaitable[object], stop: asyncio.Event) -> bool:
    """Run `work` unless `stop` is set first (then cancel it and wait until it has
    ended). True when it finished; its error, if any, is raised."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # its error, if any
    return True
