"""What a channel is: a way for people to reach the bot (Telegram, the terminal, ...).

The application root (`bot.app.root`) builds the services once and runs every configured
channel on them; a channel only turns its own kind of input into turns and commands of
the shared conversations, and declares what its messages can carry (`Limits`). Start-up,
signals, the health server, background work and shutdown are the root's, never a
channel's.

A channel declares itself once (`ChannelPlugin`: its config section, secrets, erase hook,
admins and factory) and is registered by one line in `bot.channels.registry`;
docs/CHANNELS.md says what a durable channel provides besides.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


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


# Services -> Channel. `bot.app.services.Services` is not named here: the settings root
# reads the declarations below, and the services are built from the settings.
ChannelFactory = Callable[[Any], Channel]


class ChannelRefused(Exception):
    """The channel's service refused its credentials (a rejected bot token): a config
    problem, which `mnemo run` reports in one line."""


def _as_is(value: str) -> tuple[str, ...]:
    return (value,)


@dataclass(frozen=True)
class SecretKey:
    """A key of a channel's section that holds a secret: never shown in a config error
    or `mnemo config show`, masked in every log line in each of its `forms`."""

    key: str  # inside the section: `token`, `webhook.secret_token`
    forms: Callable[[str], tuple[str, ...]] = _as_is


@dataclass(frozen=True)
class ChannelPlugin:
    """Everything the bot needs to know of a channel, declared in the channel's folder.

    - `name`: what `channels:` names, and the key of its config section;
    - `factory`: `"module:attribute"`, a `ChannelFactory`; imported only to run it, so
      reading the declarations (the settings root does) loads no channel;
    - `settings`: the model of its section (`<name>:`), or None;
    - `secrets`, `urls`: keys of its section holding secrets, and URLs whose embedded
      credentials are secret;
    - `erase`: `"module:attribute"`, a function registering what an erasure deletes of
      the channel's own rows (`memory.storage.forgetting.on_erase`);
    - `admins`: the user ids its section makes operators (exempt from token limits);
    - `check`: what stops a start before it begins (a missing token), as one line;
    - `doctor`: `"module:attribute"`, an async function of the engine returning the
      lines `mnemo memory doctor` prints of what the channel left for its next start;
    - `env`: well-known environment variables (name, key in its section) read besides
      the `MNEMO_<NAME>__<KEY>` ones, e.g. `TELEGRAM_BOT_TOKEN`.
    """

    name: str
    factory: str
    settings: type[Any] | None = None
    secrets: tuple[SecretKey, ...] = ()
    urls: tuple[str, ...] = ()
    erase: str | None = None
    admins: Callable[[Any], Collection[int]] | None = None
    check: Callable[[Any], str | None] | None = None
    doctor: str | None = None
    env: tuple[tuple[str, str], ...] = ()

    def section(self, settings: Any) -> Any:
        """Its section of the settings root (None without a settings model)."""
        return getattr(settings, self.name, None) if self.settings is not None else None

    def load(self) -> ChannelFactory:
        factory: ChannelFactory = _resolve(self.factory)
        return factory

    def register_erasure(self) -> None:
        if self.erase is not None:
            _resolve(self.erase)()

    def admin_ids(self, settings: Any) -> Collection[int]:
        return () if self.admins is None else self.admins(self.section(settings))

    async def doctor_notes(self, engine: Any) -> list[str]:
        if self.doctor is None:
            return []
        lines: list[str] = await _resolve(self.doctor)(engine)
        return lines

    def problem(self, settings: Any) -> str | None:
        return None if self.check is None else self.check(self.section(settings))


def _resolve(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


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
