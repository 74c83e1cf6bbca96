"""Pacing of messages into groups: Telegram takes about 20 messages a minute in one group
(its FAQ for bot developers); past that it answers 429 with a wait of up to a minute.
A reply streamed by editing every 1.5 s already makes 40 a minute.

python-telegram-bot's rate-limiter hook (`ApplicationBuilder.rate_limiter`) sees every
Bot API request; this one holds a request that puts a message into a group, or changes
one, until that group's budget allows it, with aiolimiter's leaky bucket (20 at once,
then one per 3 s). PTB's own `AIORateLimiter` uses the same bucket but counts every
request naming a group (the "typing…" action every 4 s would take most of the budget),
adds a bot-wide 30/s limit, and logs each `RetryAfter` with a traceback. A `RetryAfter`
still reaching us is left to `bot.channels.telegram.delivery.sent` and `bot.channels.telegram.delivery.outbox`, as
before. Private chats are paced per chat by `bot.channels.telegram.render.replies.EditPacer`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from aiolimiter import AsyncLimiter
from telegram.constants import FloodLimit
from telegram.ext import BaseRateLimiter

GROUP_PERIOD_S = 60.0
# What Telegram's per-group limit counts: methods that post or change a message.
PACED = frozenset(
    {
        "sendMessage",
        "editMessageText",
        "editMessageCaption",
        "editMessageMedia",
        "sendPhoto",
        "sendDocument",
        "sendAudio",
        "sendVoice",
        "sendVideo",
        "sendAnimation",
        "sendSticker",
        "sendMediaGroup",
        "sendLocation",
        "sendContact",
        "sendPoll",
        "copyMessage",
        "forwardMessage",
    }
)
_PRUNE_AT = 4096  # groups with a bucket before the idle ones are forgotten


def _group(chat_id: Any) -> int | str | None:
    """The group a request goes to: a negative id, or an @username (channels and
    supergroups only); None for a private chat or none."""
    if isinstance(chat_id, str):
        try:
            chat_id = int(chat_id)
        except ValueError:
            return chat_id
    if isinstance(chat_id, int) and not isinstance(chat_id, bool) and chat_id < 0:
        return chat_id
    return None


class GroupPacer(BaseRateLimiter[None]):
    """At most `per_period` message posts and edits per `period_s` into each group."""

    def __init__(
        self,
        per_period: float = FloodLimit.MESSAGES_PER_MINUTE_PER_GROUP,
        period_s: float = GROUP_PERIOD_S,
    ) -> None:
        self.per_period = per_period
        self.period_s = period_s
        self._buckets: dict[int | str, AsyncLimiter] = {}

    async def initialize(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        group = _group(data.get("chat_id")) if endpoint in PACED else None
        if group is None:
            return await callback(*args, **kwargs)
        async with self._bucket(group):
            return await callback(*args, **kwargs)

    def _bucket(self, group: int | str) -> AsyncLimiter:
        bucket = self._buckets.get(group)
        if bucket is None:
            if len(self._buckets) >= _PRUNE_AT:
                self._prune()
            bucket = self._buckets[group] = AsyncLimiter(self.per_period, self.period_s)
        return bucket

    def _prune(self) -> None:
        """Forget the buckets that are full again (their group was quiet for a period)."""
        for group in [g for g, b in self._buckets.items() if b.has_capacity(self.per_period)]:
            del self._buckets[group]
