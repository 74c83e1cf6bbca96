"""Reaching the Bot API when `mnemo run` starts.

Telegram (or a self-hosted Bot API server) may be down or unreachable when the bot
starts, as when a whole compose stack comes up at once: the first getMe is retried with
backoff, one log line per failed attempt, for as long as it takes. Only a rejected token
ends the start (retrying cannot fix it), as `TokenRejected`, whose message names the
keys to check and never the token (python-telegram-bot's own message quotes it whole).
A stop (SIGINT, SIGTERM) during the wait or an attempt ends it at once.
"""

from __future__ import annotations

import asyncio
import logging

from telegram import Bot
from telegram.error import InvalidToken, RetryAfter, TelegramError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from bot.channels.base import ChannelRefused, unless_stopped
from bot.channels.telegram.delivery.sent import retry_after_seconds
from bot.runtime.redact import scrub

log = logging.getLogger(__name__)

FIRST_WAIT_S = 1.0
MAX_WAIT_S = 60.0


class TokenRejected(ChannelRefused):
    """The Bot API refused the bot token (HTTP 401, or 404 for a malformed one)."""


class _Stopped(Exception):
    """`stop` was set during an attempt or a wait."""


def _may_come_back(exc: BaseException) -> bool:
    # Down, unreachable, overloaded: retried. A rejected token: retrying cannot fix it.
    return isinstance(exc, TelegramError) and not isinstance(exc, InvalidToken)


async def reach_bot_api(
    bot: Bot,
    stop: asyncio.Event,
    *,
    first_wait_s: float = FIRST_WAIT_S,
    max_wait_s: float = MAX_WAIT_S,
) -> bool:
    """Initialize `bot` (getMe), retrying until it answers. True once it has; False if
    `stop` was set first (the bot's connections are closed then). Raises TokenRejected.
    The wait doubles from `first_wait_s` up to `max_wait_s`, or is what a RetryAfter
    asks when that is longer."""
    backoff = wait_exponential(multiplier=first_wait_s, max=max_wait_s)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        delay = backoff(state)
        return max(delay, retry_after_seconds(exc)) if isinstance(exc, RetryAfter) else delay

    def note(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "Telegram Bot API unreachable (attempt %d: %s: %s); retrying in %.0f s",
            state.attempt_number,
            type(exc).__name__,
            _first_line(str(exc)),
            state.upcoming_sleep,
        )

    async def sleep(delay: float) -> None:
        if not await unless_stopped(asyncio.sleep(delay), stop):
            raise _Stopped

    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_may_come_back),
            wait=wait,
            before_sleep=note,
            sleep=sleep,
            reraise=True,
        ):
            # (`with attempt` swallows a failed attempt's error: code after the block
            # runs for failures too, so success is logged inside it)
            with attempt:
                if not await unless_stopped(bot.initialize(), stop):
                    raise _Stopped
                if attempt.retry_state.attempt_number > 1:
                    log.info(
                        "reached the Telegram Bot API (attempt %d)",
                        attempt.retry_state.attempt_number,
                    )
    except InvalidToken as exc:
        await bot.shutdown()
        # The server's reason: a wrong URL's may quote a whole HTML error page.
        server = _first_line(scrub(str(exc.__cause__ or "")))[:200]
        raise TokenRejected(
            f"the Telegram Bot API refused the bot token ({server}): check telegram.token "
            "(TELEGRAM_BOT_TOKEN) and telegram.base_url"
        ) from None
    except _Stopped:
        log.info("stopped before reaching the Telegram Bot API")
        await bot.shutdown()
        return False
    return True


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no details"
