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

from bot.channel import unless_stopped
from bot.redact import scrub
from bot.telegram.delivery import retry_after_seconds

log = logging.getLogger(__name__)

FIRST_WAIT_S = 1.0
MAX_WAIT_S = 60.0


class TokenRejected(Exception):
    """The Bot API refused the bot token (HTTP 401, or 404 for a malformed one)."""


async def reach_bot_api(
    bot: Bot,
    stop: asyncio.Event,
    *,
    first_wait_s: float = FIRST_WAIT_S,
    max_wait_s: float = MAX_WAIT_S,
) -> bool:
    """Initialize `bot` (getMe), retrying until it answers. True once it has; False if
    `stop` was set first (the bot's connections are closed then). Raises TokenRejected."""
    wait, attempt = first_wait_s, 0
    while True:
        attempt += 1
        try:
            if await unless_stopped(bot.initialize(), stop):
                if attempt > 1:
                    log.info("reached the Telegram Bot API (attempt %d)", attempt)
                return True
        except InvalidToken as exc:
            await bot.shutdown()
            # The server's reason: a wrong URL's may quote a whole HTML error page.
            server = _first_line(scrub(str(exc.__cause__ or "")))[:200]
            raise TokenRejected(
                f"the Telegram Bot API refused the bot token ({server}): check telegram.token "
                "(TELEGRAM_BOT_TOKEN) and telegram.base_url"
            ) from None
        except TelegramError as exc:  # down, unreachable, overloaded: it may come back
            delay = max(wait, retry_after_seconds(exc)) if isinstance(exc, RetryAfter) else wait
            log.warning(
                "Telegram Bot API unreachable (attempt %d: %s: %s); retrying in %.0f s",
                attempt,
                type(exc).__name__,
                _first_line(str(exc)),
                delay,
            )
            if await unless_stopped(asyncio.sleep(delay), stop):
                wait = min(wait * 2, max_wait_s)
                continue
        log.info("stopped before reaching the Telegram Bot API")
        await bot.shutdown()
        return False


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no details"
