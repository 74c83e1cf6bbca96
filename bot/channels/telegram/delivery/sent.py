"""Sending and editing messages: retries on flood control, plain-text fallback.

python-telegram-bot does not retry by itself. A `RetryAfter` (HTTP 429) is honoured and
retried here while its wait is short (`MAX_RETRY_AFTER_S`), a bounded number of times;
a longer one is raised, and the caller owes the answer (`bot.channels.telegram.delivery.outbox`). A 5xx or a connection failure is retried with a short
backoff (Telegram did not take the message). A timeout is not retried for a send, since
the message may have arrived. When Telegram refuses the formatting (400 "can't parse
entities"), the piece goes again as plain text, its Markdown source, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from telegram import Bot, InlineKeyboardMarkup, Message, ReplyParameters
from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut
from telegram.warnings import PTBDeprecationWarning
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from bot.channels.telegram.render.formatting import Piece

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ATTEMPTS = 4
# A caller waits out flood control itself only this long; beyond it (or after
# MAX_ATTEMPTS) the RetryAfter is raised, and an answer is owed to the chat and sent
# later by bot.channels.telegram.delivery.outbox, rather than a handler holding its chat for minutes.
MAX_RETRY_AFTER_S = 5.0
BACKOFF_S = (0.5, 1.0, 2.0)


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        # PTB 22.2+ warns that the int will become a timedelta: both are handled here.
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


def _retryable(exc: BaseException) -> bool:
    """A short flood-control wait, or a 5xx / no connection (Telegram has not got it).
    Not a 400 (retrying changes nothing) nor a timeout (the message may have arrived)."""
    if isinstance(exc, RetryAfter):
        return retry_after_seconds(exc) <= MAX_RETRY_AFTER_S
    return isinstance(exc, NetworkError) and not isinstance(exc, BadRequest | TimedOut)


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    if isinstance(exc, RetryAfter):
        return retry_after_seconds(exc)
    return BACKOFF_S[min(state.attempt_number - 1, len(BACKOFF_S) - 1)]


async def with_retry(
    call: Callable[[], Awaitable[T]], *, what: str, attempts: int = MAX_ATTEMPTS
) -> T:
    """Run `call`, retrying flood control and transient server errors (bounded)."""

    def note(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.upcoming_sleep
        if isinstance(exc, RetryAfter):
            log.info(
                "%s: flood control, retrying in %.0f s (attempt %d/%d)",
                what,
                wait,
                state.attempt_number,
                attempts,
            )
        else:
            log.info("%s: %s, retrying in %.1f s", what, exc, wait)

    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_retryable),
        wait=_wait,
        stop=stop_after_attempt(attempts),
        before_sleep=note,
        sleep=asyncio.sleep,
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # tenacity returns or reraises


def is_formatting_error(exc: BadRequest) -> bool:
    """Telegram's 400s about entities / parse mode ("can't parse entities", "can't find
    end of the entity", "entity beginning ...")."""
    message = exc.message.lower()
    return "entit" in message or "parse mode" in message


def is_not_modified(exc: BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def is_gone(exc: BadRequest) -> bool:
    return "message to edit not found" in exc.message.lower()


@dataclass(frozen=True)
class Target:
    """Where replies go: a chat, a forum topic in it, and the message answered."""

    chat_id: int
    thread_id: int | None = None
    reply_to: int | None = None  # set in groups, so the reply names whom it answers


def reply_parameters(target: Target) -> ReplyParameters | None:
    if target.reply_to is None:
        return None
    return ReplyParameters(message_id=target.reply_to, allow_sending_without_reply=True)


async def send_text(
    bot: Bot, target: Target, text: str, reply_markup: InlineKeyboardMarkup | None = None
) -> Message:
    """One plain-text message (with buttons under it when `reply_markup` is given)."""
    return await with_retry(
        lambda: bot.send_message(
            target.chat_id,
            text,
            message_thread_id=target.thread_id,
            reply_parameters=reply_parameters(target),
            reply_markup=reply_markup,
        ),
        what="sendMessage",
    )


async def send_piece(bot: Bot, target: Target, piece: Piece) -> Message:
    """One formatted message; plain text if Telegram refuses the formatting."""
    if not piece.entities:
        return await send_text(bot, target, piece.text)
    try:
        return await with_retry(
            lambda: bot.send_message(
                target.chat_id,
                piece.text,
                entities=piece.entities,
                message_thread_id=target.thread_id,
                reply_parameters=reply_parameters(target),
            ),
            what="sendMessage",
        )
    except BadRequest as exc:
        if not is_formatting_error(exc):
            raise
        log.warning("Telegram refused the formatting (%s); sending plain text", exc.message)
        return await send_text(bot, target, piece.fallback)


async def edit_text(bot: Bot, chat_id: int, message_id: int, text: str) -> None:
    """Replace a message's text with plain text; "not modified" is success."""
    try:
        await with_retry(
            lambda: bot.edit_message_text(text, chat_id, message_id), what="editMessageText"
        )
    except BadRequest as exc:
        if not is_not_modified(exc):
            raise


async def edit_piece(bot: Bot, chat_id: int, message_id: int, piece: Piece) -> None:
    """Replace a message with a formatted piece; plain text if the formatting is refused."""
    if not piece.entities:
        await edit_text(bot, chat_id, message_id, piece.text)
        return
    try:
        await with_retry(
            lambda: bot.edit_message_text(piece.text, chat_id, message_id, entities=piece.entities),
            what="editMessageText",
        )
    except BadRequest as exc:
        if is_not_modified(exc):
            return
        if not is_formatting_error(exc):
            raise
        log.warning("Telegram refused the formatting (%s); using plain text", exc.message)
        await edit_text(bot, chat_id, message_id, piece.fallback)
