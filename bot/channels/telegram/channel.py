"""The Telegram application, built in one place, and its lifecycle.

- `build_application(settings, conversations)`: python-telegram-bot `Application` with our
  handlers; `telegram.base_url` points it at a self-hosted Bot API server (or a test
  double); updates wait in per-chat queues and `telegram.concurrent_updates` of them,
  each of a different chat, are handled at once (`bot.channels.telegram.delivery.chat_queues`), with an
  HTTP pool sized to match.
- `running(app, settings)`: start it (getMe, setMyCommands, then polling, or a webhook
  when `telegram.webhook.url` is set) and stop it cleanly; used by `mnemo run` and by
  in-process tests alike.

Updates are acknowledged to Telegram only once durable (`bot.channels.telegram.delivery.inflight`): in
polling mode by our own loop (`bot.channels.telegram.delivery.polling`; python-telegram-bot's Updater
acknowledges at fetch time), in webhook mode by answering the POST only then. With the
database `engine`, handled update ids are recorded so a redelivery is skipped.
- `Telegram`: the channel (`bot.channels.base.Channel`) the application root (`bot.app.root`)
  runs when `channels:` names it (declared in `bot.channels.telegram.declaration`).

Webhook mode: python-telegram-bot serves `telegram.webhook.listen:port` at the URL's path
and rejects any request without the secret token (403). With no
`telegram.webhook.secret_token` configured, a random one is generated at each start and
registered with Telegram, so the endpoint is never open.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from sqlalchemy.ext.asyncio import AsyncEngine
from telegram import BotCommand
from telegram.error import TelegramError
from telegram.ext import Application, ApplicationBuilder

from bot.channels.base import Limits
from bot.channels.telegram.delivery.chat_queues import ChatQueueProcessor
from bot.channels.telegram.delivery.handled import SETTLE_EVERY_S, HandledUpdates
from bot.channels.telegram.delivery.inflight import Inflight, WebhookQueue
from bot.channels.telegram.delivery.pacing import GroupPacer
from bot.channels.telegram.delivery.polling import Poller, prune_handled
from bot.channels.telegram.delivery.sent import with_retry
from bot.channels.telegram.handlers import TelegramChannel
from bot.channels.telegram.http import AiohttpRequest
from bot.channels.telegram.review.digest import send_digest
from bot.channels.telegram.settings import MISSING_TOKEN, telegram_settings
from bot.channels.telegram.startup import reach_bot_api
from bot.channels.telegram.voice import MAX_AUDIO_BYTES
from bot.config.settings import Settings
from bot.conversation.commands import COMMANDS
from bot.conversation.service import Conversations

if TYPE_CHECKING:
    from bot.app.services import Services

log = logging.getLogger(__name__)

# Telegram takes 4096 characters (bot.channels.telegram.render.splitting); a plain answer keeps room for
# its own decoration. Formatted replies are split by bot.channels.telegram.render.splitting.
LIMITS = Limits(max_message=3900, markdown=True)

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]  # buttons: forget confirmations
POLL_TIMEOUT_S = 30  # long-poll length; Telegram answers at once when updates wait
DRAIN_S = 8.0  # at a stop, handlers in flight get this long (docker stop waits 10 s)
INFLIGHT = "mnemo.inflight"  # bot_data key of the app's Inflight
CHANNEL = "mnemo.channel"  # bot_data key of the app's TelegramChannel


class MissingToken(RuntimeError):
    """No bot token configured; the message names the variable to set."""


def require_token(settings: Settings) -> str:
    token = telegram_settings(settings).token.get_secret_value().strip()
    if not token:
        raise MissingToken(MISSING_TOKEN)
    return token


def derived_webhook_secret(token: str) -> str:
    """The webhook secret when none is configured: HMAC-SHA256 of a fixed label keyed with
    the bot token. Every replica of one bot derives the same secret, so any of them accepts
    what Telegram sends (a random secret per process made all but the last replica to call
    setWebhook answer 403); the token cannot be recovered from it. 43 characters of
    [A-Za-z0-9_-], as Telegram allows."""
    digest = hmac.new(token.encode(), b"mnemo telegram webhook secret v1", hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def build_application(
    settings: Settings, conversations: Conversations, *, engine: AsyncEngine | None = None
) -> Application:
    """The Application with every handler registered. Raises MissingToken. `engine`:
    where handled update ids are recorded (without it, redeliveries are not recognised)."""
    tg = telegram_settings(settings)
    builder: ApplicationBuilder = (
        Application.builder()
        .token(require_token(settings))
        .concurrent_updates(ChatQueueProcessor(tg.concurrent_updates))
        # aiohttp rather than PTB's httpx (bot/channels/telegram/http.py says why). Each update may
        # hold two connections at once (typing indicator + reply); under load a call
        # waits for a free connection rather than failing after PTB's usual 1 s. Its only
        # GETs are file downloads, never read past the Bot API's 20 MB (a text document:
        # past its own limit, `attachments.download`).
        .request(
            AiohttpRequest(
                2 * tg.concurrent_updates + 4, pool_timeout=30.0, max_download_bytes=MAX_AUDIO_BYTES
            )
        )
        # A stop cancels the long poll in flight, and its connection may not be free yet
        # for the last getUpdates, the one that acknowledges the durable updates.
        .get_updates_request(AiohttpRequest(2))
        .update_queue(WebhookQueue())
        .job_queue(None)  # background jobs run on the application root's one scheduler
        # About 20 messages a minute into one group (bot/channels/telegram/delivery/pacing.py).
        .rate_limiter(GroupPacer())
    )
    if tg.base_url:
        base = tg.base_url.rstrip("/")
        builder = builder.base_url(f"{base}/bot").base_file_url(f"{base}/file/bot")
    app = builder.build()
    inflight = Inflight(app, engine)
    app.bot_data[INFLIGHT] = inflight
    app.update_queue.inflight = inflight  # type: ignore[attr-defined]
    channel = app.bot_data[CHANNEL] = TelegramChannel(
        conversations, settings, inflight, reply_limit=LIMITS.max_message
    )
    channel.register(app)
    conversations.reflect_listeners.append(functools.partial(send_digest, app.bot, conversations))
    return app


async def _answer_owed(channel: TelegramChannel, app: Application) -> int:
    try:
        return await channel.answer_owed(app.bot)
    except Exception:
        log.exception("could not look for messages owed an answer")
        return 0


async def _settle(inflight: Inflight, handled: HandledUpdates) -> None:
    while True:
        await asyncio.sleep(SETTLE_EVERY_S)
        await handled.flush_answered()
        await (
            inflight.tend_parked()
        )  # leases of parked updates (bot.channels.telegram.delivery.inbox)


def bot_commands() -> list[BotCommand]:
    return [BotCommand(name, description) for name, description in COMMANDS]


@contextlib.asynccontextmanager
async def running(
    app: Application,
    settings: Settings,
    *,
    poll_timeout: int = POLL_TIMEOUT_S,
    drain_s: float = DRAIN_S,
) -> AsyncIterator[Application]:
    """Run `app` (polling or webhook) for the duration of the block; at its end, updates
    in flight get `drain_s` seconds to finish."""
    webhook = telegram_settings(settings).webhook
    inflight: Inflight = app.bot_data[INFLIGHT]
    channel: TelegramChannel = app.bot_data[CHANNEL]
    poller: Poller | None = None
    owed: asyncio.Task[int] | None = None
    settling: asyncio.Task[None] | None = None
    async with app:  # initialize (getMe) ... shutdown
        inflight.bind(app.bot.id)
        try:
            await with_retry(lambda: app.bot.set_my_commands(bot_commands()), what="setMyCommands")
        except TelegramError as exc:  # only the command menu: never worth not starting
            log.warning("could not set the command menu: %s", exc)
        await app.start()
        assert app.updater is not None
        await (
            inflight.replay()
        )  # updates parked by a previous run (bot.channels.telegram.delivery.inbox)
        try:
            if webhook.url:
                secret = webhook.secret_token.get_secret_value() or derived_webhook_secret(
                    require_token(settings)
                )
                if not webhook.secret_token:
                    log.info(
                        "telegram.webhook.secret_token is empty: using one derived from the "
                        "bot token (the same on every replica)"
                    )
                await app.updater.start_webhook(
                    listen=webhook.listen,
                    port=webhook.port,
                    url_path=urlparse(webhook.url).path.lstrip("/"),
                    webhook_url=webhook.url,
                    secret_token=secret,
                    allowed_updates=ALLOWED_UPDATES,
                )
                log.info("receiving updates by webhook on %s:%d", webhook.listen, webhook.port)
                await prune_handled(inflight)
            else:
                poller = Poller(
                    app, inflight, timeout=poll_timeout, allowed_updates=ALLOWED_UPDATES
                )
                await poller.start()
                log.info("receiving updates by long polling")
            owed = asyncio.create_task(_answer_owed(channel, app), name="telegram-answer-owed")
            # What `mnemo memory import-chat` stored meanwhile is compacted in the background.
            await channel.imports.start()
            if inflight.handled is not None:  # nothing recorded without a database
                settling = asyncio.create_task(
                    _settle(inflight, inflight.handled), name="telegram-settle"
                )
            yield app
        finally:
            if settling is not None:
                settling.cancel()
                await asyncio.gather(settling, return_exceptions=True)
            if owed is not None:  # a turn like the handlers': as long to finish
                await asyncio.wait({owed}, timeout=drain_s)
                owed.cancel()
                await asyncio.gather(owed, return_exceptions=True)
            if poller is not None:
                await poller.stop(drain_s)
            if app.updater.running:
                await app.updater.stop()
            await inflight.drain(drain_s)
            await channel.outbox.close()  # what it still owes is marked for the next start
            await channel.imports.close()  # an import cut short continues when sent again
            await channel.memory_files.close()
            await inflight.release_parked()
            if inflight.handled is not None:
                await inflight.handled.flush_answered()
            if app.running:
                await app.stop()


class Telegram:
    """The Telegram channel (`bot.channels.base.Channel`): the Application of `build_application`
    on the root's services, reaching the Bot API (retried until it answers,
    `bot.channels.telegram.startup`) and then serving it (`running`) until the stop."""

    name = "telegram"
    limits = LIMITS

    def __init__(self, services: Services) -> None:
        self.settings = services.settings
        self.app = build_application(
            services.settings, services.conversations, engine=services.engine
        )
        if services.followups is not None:  # the root's follow-up job sends through us
            from bot.followups.telegram import TelegramSender

            services.followups.senders[self.name] = TelegramSender(self.app.bot)

    async def run(self, stop: asyncio.Event) -> int:
        if not await reach_bot_api(self.app.bot, stop):  # retried until up, or stopped
            return 0
        async with running(self.app, self.settings):
            log.info(
                "@%s is up (memory provider %s)",
                self.app.bot.username,
                self.settings.memory.provider,
            )
            await stop.wait()
            log.info("stopping")
        return 0
