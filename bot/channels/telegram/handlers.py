"""What the bot does with each kind of update: one short handler per kind.

What users see of each (groups, files, voice, photos, edits, refusals) is documented
once, in docs/CHAT.md "Telegram"; the delivery guarantees in docs/RELIABILITY.md. What
the code relies on:
- The updates of a chat (or forum topic) reach these handlers one at a time, in order
  (`delivery/chat_queues.py`): no handler orders turns itself.
- Nothing is stored of what is refused (not allowed, too long, unreadable, media the
  model cannot see without a caption), so a refusal needs no cleanup; it is not
  recorded as handled either, so after a crash it may be said twice.
- Edited messages are ignored: the original was answered, and answering the edit would
  store a turn the user did not send as one.
- A turn or command recorded as handled is skipped on redelivery; a download is looked
  up before it is fetched, so a redelivered voice message is not transcribed again.
- A database that is away holds the turn (`bot.conversation.store_wait`); any other
  unexpected error gets one apology line (`FAILED`), never its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from telegram import Bot, Document, Message, PhotoSize, Update, User
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.channels.telegram import confirmations, sources
from bot.channels.telegram.attachments import (
    Unreadable,
    media_note,
    read_text,
    text_document,
    with_file,
)
from bot.channels.telegram.confirmations import PREFIX as BUTTONS
from bot.channels.telegram.delivery.handled import ReplyTo
from bot.channels.telegram.delivery.inflight import Inflight, UpdateReceipt
from bot.channels.telegram.delivery.outbox import Outbox, finish_or_owe
from bot.channels.telegram.delivery.resume import OwedAnswers
from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.imports import PREFIX as IMPORT_BUTTONS
from bot.channels.telegram.imports import ChatImports, export_format, is_import_command
from bot.channels.telegram.imports import pressed as pressed_import
from bot.channels.telegram.members.admins import ChatAdmins
from bot.channels.telegram.members.consent import author_id, keeps_out
from bot.channels.telegram.photos import PHOTOS_AT_ONCE, fetched, photo_size, photo_text
from bot.channels.telegram.portability.mcp_access import is_mcp_command, mcp_command
from bot.channels.telegram.portability.memory_files import MemoryFiles, is_memory_file
from bot.channels.telegram.render.replies import EditPacer, ReplyStream, send_plain_reply, typing
from bot.channels.telegram.review import buttons as review_buttons
from bot.channels.telegram.sessions import (
    CHANNEL,
    Place,
    base_session,
    is_addressed,
    is_admin,
    is_allowed,
    stored_text,
    strip_mention,
)
from bot.channels.telegram.settings import telegram_settings
from bot.channels.telegram.voice import (
    NOT_LISTENING,
    RECORDINGS_AT_ONCE,
    Recording,
    Transcriber,
    recording,
    transcribed,
)
from bot.config.settings import Settings
from bot.conversation.commands import COMMANDS, command_parts, handle_command
from bot.conversation.people import People
from bot.conversation.service import Conversations, Reply
from bot.conversation.session_binding import bind_session
from bot.conversation.store_wait import DELAYED, NOT_SAVED_YET, StoreWait, transient
from bot.conversation.turns import MEMORY_DOWN
from bot.followups import telegram as followups
from bot.mcp.access import AccessStore
from bot.model.images import Image
from memory.actions.commands import group_wide, split_words
from memory.contract.tracing import unwrap
from memory.contract.types import Origin, Owner, Session, utcnow
from memory.storage.usage import UsageRecorder

log = logging.getLogger(__name__)

T = TypeVar("T")

COMMAND_NAMES = tuple(name for name, _ in COMMANDS)

MAX_INPUT_CHARS = 65_536
EDIT_MIN_GAP_S = 1.0  # Telegram: about one message per second per chat

NOT_ALLOWED = "Sorry, this is a private bot and I can't talk with you. Ask its operator for access."
TEXT_ONLY = "I only read text for now: please send your message as text."
TOO_LONG = (
    "That message is too long for me ({n} characters; the limit is {limit}). "
    "Please send a shorter one."
)
FAILED = "Sorry, something went wrong on my side. Please try again."
ONLY_MENTION = "Yes? Write your question after the mention."
UNKNOWN = "I don't know /{name}. Commands: " + " ".join("/" + n for n in COMMAND_NAMES)

MEDIA = (
    filters.PHOTO
    | filters.Sticker.ALL
    | filters.VOICE
    | filters.AUDIO
    | filters.VIDEO
    | filters.VIDEO_NOTE
    | filters.ANIMATION
    | filters.Document.ALL
    | filters.LOCATION
    | filters.VENUE
    | filters.CONTACT
    | filters.POLL
    | filters.Dice.ALL
)


class TelegramChannel:
    """The handlers, bound to one conversation service and one config."""

    def __init__(
        self,
        conversations: Conversations,
        settings: Settings,
        inflight: Inflight | None = None,
        *,
        reply_limit: int,
    ) -> None:
        self.conversations = conversations
        self.reply_limit = reply_limit  # characters of a command answer (the channel's)
        self.inflight = inflight
        self.settings = settings
        self.tg = telegram_settings(settings)
        # Voice is transcribed only when configured (bot.channels.telegram.voice says why).
        self.transcriber: Transcriber | None = (
            conversations.llm
            if settings.llm.transcription_model and isinstance(conversations.llm, Transcriber)
            else None
        )
        # A recording may be 20 MB, held whole while it is transcribed: a few at a time.
        self.recordings = asyncio.Semaphore(RECORDINGS_AT_ONCE)
        # Photos are shown to the model only when on (bot.channels.telegram.photos says why).
        self.vision = settings.llm.vision
        # A photo (up to 10 MB) is held until its turn's answer: a few turns at a time.
        self.photos = asyncio.Semaphore(PHOTOS_AT_ONCE)
        self.pacer = EditPacer(EDIT_MIN_GAP_S)
        self.outbox = Outbox()  # answers Telegram could not take yet
        self.stream_interval = max(self.tg.stream_edit_interval_s, EDIT_MIN_GAP_S)
        self.imports = ChatImports(conversations, settings)  # exports sent in private chats
        # A person's own memory as a file: /memory export, and that file sent back.
        self.memory_files = MemoryFiles(conversations, settings.agent.id)
        # Names, for the console: where the memory is an SQL provider's (a stand-in
        # conversation service, as the throughput bench's, has no provider at all).
        provider = getattr(conversations, "provider", None)
        engine = getattr(unwrap(provider), "engine", None) if provider is not None else None
        self.people = People(engine) if engine is not None else None
        # Whose words a group keeps (members/consent.py); follow-ups' confirmations and
        # buttons (bot/followups/).
        self.engine = engine
        self.admins = ChatAdmins()  # who administers a group, as Telegram says
        self.mcp_access = AccessStore(engine) if engine is not None else None  # /memory mcp
        self.started = (
            utcnow()
        )  # turns handled since are this run's (bot.channels.telegram.delivery.resume)

    async def answer_owed(self, bot: Bot) -> int:
        """Answer messages a previous run stored but did not answer (`bot.channels.telegram.delivery.resume`)."""
        if self.inflight is None or self.inflight.handled is None:
            return 0
        return await OwedAnswers(
            bot,
            self.conversations,
            self.inflight.handled,
            self.settings,
            self.pacer,
            self.stream_interval,
            self.outbox,
            self.started,
        ).answer()

    def register(self, app: Application) -> None:
        new = filters.UpdateType.MESSAGE  # edited messages have their own handler
        app.add_handler(CommandHandler(COMMAND_NAMES, self.on_command, filters=new))
        app.add_handler(MessageHandler(new & filters.COMMAND, self.on_unknown_command))
        app.add_handler(MessageHandler(new & filters.TEXT, self.on_text))
        app.add_handler(MessageHandler(new & MEDIA, self.on_media))
        app.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE, self.on_edited))
        app.add_handler(CallbackQueryHandler(self.on_button, pattern=f"^{BUTTONS}"))
        app.add_handler(CallbackQueryHandler(self.on_import_button, pattern=f"^{IMPORT_BUTTONS}"))
        app.add_handler(
            CallbackQueryHandler(self.on_review_button, pattern=f"^{review_buttons.PREFIX}")
        )
        app.add_handler(
            CallbackQueryHandler(self.on_followup_button, pattern=f"^{followups.PREFIX}")
        )
        app.add_error_handler(self.on_error)

    # --- gatekeeping -----------------------------------------------------------------

    async def _admit(
        self, update: Update, context: ContextTypes.DEFAULT_TYPE, *, command: bool = False
    ) -> tuple[Message, Place, User | None] | None:
        """The message, its place and sender when the bot should act on it; None (after
        a refusal line, where one is due) otherwise."""
        message = update.effective_message
        if message is None:
            return None
        place = Place.of(message)
        user = message.from_user
        if place.is_group:
            mode = self.tg.group_mode
            if mode == "disabled":
                return None
            if (
                mode == "mention"
                and not command
                and not is_addressed(message, context.bot.id, context.bot.username)
            ):
                return None
        if not is_allowed(self.tg, user.id if user else None, place.chat_id):
            log.info(
                "refused a message from user %s in chat %s (not in allowed_ids)",
                user.id if user else "?",
                place.chat_id,
            )
            await send_plain_reply(context.bot, self._target(message, place), NOT_ALLOWED)
            return None
        return message, place, user

    def _receipt(self, update: Update) -> UpdateReceipt | None:
        return self.inflight.receipt(update) if self.inflight is not None else None

    @staticmethod
    def _target(message: Message, place: Place) -> Target:
        return Target(
            place.chat_id, place.thread_id, message.message_id if place.is_group else None
        )

    # --- handlers --------------------------------------------------------------------

    async def on_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        admitted = await self._admit(update, context)
        if admitted is None:
            return
        message, place, user = admitted
        text = message.text or ""
        if place.is_group:
            text = strip_mention(text, context.bot.username)
            if not text:
                await send_plain_reply(context.bot, self._target(message, place), ONLY_MENTION)
                return
        await self._turn(update, context, message, place, user, text)

    async def on_media(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        admitted = await self._admit(update, context)
        if admitted is None:
            return
        message, place, user = admitted
        target = self._target(message, place)
        # A memory export or a chat export sent in private: an import offer (dry run).
        offers = (
            self.memory_files
            if is_memory_file(message.document)
            else self.imports
            if export_format(message.document)
            else None
        )
        if offers is not None and not place.is_group and user is not None:
            receipt = self._receipt(update)  # a redelivered offer is not fetched again
            if receipt is None or not await receipt.seen_before():
                assert message.document is not None
                await offers.offer(context.bot, target, user.id, message.document)
                if receipt is not None:
                    await receipt.record()
            return
        caption = message.caption or ""
        if place.is_group:
            caption = strip_mention(caption, context.bot.username)
        doc = text_document(message)
        note = media_note(message)
        sound = recording(message)
        listening = sound is not None and self.transcriber is not None
        photo = photo_size(message) if self.vision else None
        if photo is not None:
            await self._photo(update, context, message, place, user, photo, caption)
            return
        if not listening and doc is None and (note is None or not caption):
            line = NOT_LISTENING if sound is not None else TEXT_ONLY
            await send_plain_reply(context.bot, target, line)
            return
        if listening:
            # The transcription's usage is the user's, stored with the message it became.
            base = base_session(self.settings.agent.id, place, user.id if user else place.chat_id)
            async with self._usage_of(base):
                read = await self._fetch(
                    update,
                    context.bot,
                    target,
                    lambda: self._read(context.bot, sound, doc, caption),
                )
                if read is not None:
                    await self._turn(update, context, message, place, user, read)
            return
        if doc is not None:
            read = await self._fetch(
                update, context.bot, target, lambda: self._read(context.bot, sound, doc, caption)
            )
            if read is None:
                return
            text = read
        else:
            text = f"{note}\n{caption}"
        await self._turn(update, context, message, place, user, text)

    @contextlib.asynccontextmanager
    async def _usage_of(self, base: Session) -> AsyncIterator[None]:
        """Model calls in the block are `base`'s user's, and their usage rows go into a
        ledger the turn's first append stores (memory/storage/usage.py)."""
        usage: UsageRecorder | None = getattr(self.conversations.llm, "usage", None)
        with bind_session(base):
            if usage is None:
                yield
                return
            async with usage.collecting():
                yield

    async def _photo(
        self,
        update: Update,
        context: ContextTypes.DEFAULT_TYPE,
        message: Message,
        place: Place,
        user: User | None,
        photo: PhotoSize,
        caption: str,
    ) -> None:
        """A turn of the photo, shown to the model."""
        async with self.photos:  # until the answer: the photo is in memory until then
            image = await self._fetch(
                update,
                context.bot,
                self._target(message, place),
                lambda: fetched(context.bot, photo),
            )
            if image is not None:
                await self._turn(
                    update, context, message, place, user, photo_text(caption), images=[image]
                )

    async def _fetch(
        self, update: Update, bot: Bot, target: Target, fetch: Callable[[], Awaitable[T]]
    ) -> T | None:
        """What `fetch` downloads (and reads) for a turn, with "typing…" meanwhile. None
        when the update was handled before (a redelivery is not fetched again: a failing
        second download would answer with a refusal a message that had its answer), or
        when the file is refused (its line sent)."""
        receipt = self._receipt(update)
        if receipt is not None and await receipt.seen_before():
            return None
        try:
            async with typing(bot, target):
                return await fetch()
        except Unreadable as refused:
            await send_plain_reply(bot, target, refused.line)
            return None

    async def _read(
        self, bot: Bot, sound: Recording | None, doc: Document | None, caption: str
    ) -> str:
        """The turn's text of a recording (transcribed) or a text document. Raises
        Unreadable."""
        if sound is not None and self.transcriber is not None:
            async with self.recordings:
                return await transcribed(bot, self.transcriber, sound, caption)
        assert doc is not None
        return with_file(caption, doc.file_name or "file", await read_text(bot, doc))

    async def _turn(
        self,
        update: Update,
        context: ContextTypes.DEFAULT_TYPE,
        message: Message,
        place: Place,
        user: User | None,
        text: str,
        *,
        images: Sequence[Image] = (),
    ) -> None:
        """One turn of the conversation with `text` (the message as the model reads it,
        before `stored_text` names its author and what it replies to): stored, answered,
        streamed. `images` go to the model with it, unstored."""
        target = self._target(message, place)
        if len(text) > MAX_INPUT_CHARS:
            await send_plain_reply(
                context.bot, target, TOO_LONG.format(n=len(text), limit=MAX_INPUT_CHARS)
            )
            return
        base = base_session(self.settings.agent.id, place, user.id if user else place.chat_id)
        receipt = self._receipt(update)
        # A chat under flood control (or owed earlier answers) gets no streaming and no
        # "typing…": Telegram takes nothing there now, and the answer queues behind.
        quiet = self.outbox.owes(place.chat_id)
        stream = ReplyStream(context.bot, target, self.pacer, self.stream_interval)
        # A store that is down holds the update, unacknowledged, while the turn waits
        # for it (bot.conversation.store_wait); the user hears once that the answer is delayed.
        wait = StoreWait(None if quiet else functools.partial(self._delayed, stream))
        try:
            # A member who opted out is answered with nothing stored; a reply to one of
            # their messages is stored without their words (members/consent.py).
            unstored, hidden = await wait.run(
                lambda: self._consent(message, place, base),
                f"the consent of update {update.update_id}",
            )
            text = stored_text(message, text, group=place.is_group, hide_replied=hidden)
            if unstored:
                await self._unstored_turn(update, message, place, base, text, stream, wait, images)
                return
            # Updates of a chat arrive in order: an earlier redelivered update of this
            # conversation has been recognised (or stored) by now.
            if receipt is not None and await receipt.seen_before(turn=True):
                return
            if receipt is not None:  # a stop before the answer: the next start gives it
                receipt.reply_to = ReplyTo(place.chat_id, place.thread_id, message.message_id)
            session = await wait.run(
                lambda: self.conversations.current_session(base),
                f"the session of update {update.update_id}",
            )
        except Exception as exc:
            if not transient(exc):
                raise
            await send_plain_reply(context.bot, target, MEMORY_DOWN)  # past the bound
            return
        asked = Origin(
            CHANNEL,
            place.chat_id,
            message.message_id,
            place.thread_id,
            author_id(message) if place.is_group else None,
        )
        async with contextlib.nullcontext() if quiet else typing(context.bot, target):
            try:
                reply = await self.conversations.chat(
                    session,
                    text,
                    on_delta=None if quiet else stream.on_delta,
                    receipt=receipt,
                    images=images,
                    origin=asked,
                    wait=wait,
                )
                answer, failed, cited = reply.text, reply.error, reply.sources
            except Exception:  # the conversation service reports its own failures; this is a bug
                log.exception("turn of %s failed", session.id)
                answer, failed, cited = FAILED, True, []
        if receipt is not None and receipt.duplicate:
            # A redelivery that another replica (which answers it) or an earlier process
            # stored already: its record met ours in the append's transaction.
            log.info(
                "update %s was stored by another replica or an earlier process: skipped",
                receipt.update_id,
            )
            return
        if failed and receipt is not None:
            await receipt.gave_up()
        await self._show(
            context.bot,
            update.update_id,
            Reply(answer, error=failed, sources=cited),
            stream,
            receipt,
            place=place,
            asked=asked,
            session=session,
        )
        await self._confirm_followups(context.bot, session, place)
        await self._names(message, place)

    async def _consent(self, message: Message, place: Place, base: Session) -> tuple[bool, bool]:
        """(the author opted out of the group's memory, the author of the message it
        replies to did): both False outside groups."""
        if not place.is_group:
            return False, False
        owner = Owner(base.user_id, base.agent_id)
        return (
            await keeps_out(self.engine, owner, message),
            await keeps_out(self.engine, owner, message.reply_to_message),
        )

    async def _unstored_turn(
        self,
        update: Update,
        message: Message,
        place: Place,
        base: Session,
        text: str,
        stream: ReplyStream,
        wait: StoreWait,
        images: Sequence[Image],
    ) -> None:
        """The turn of a member who opted out: answered, nothing of it stored. Its update
        is recorded as handled (its id only) once the answer is shown, so a crash before
        that answers it again; an answer Telegram does not take now waits in this
        process's outbox only (never in the database), and is lost with the process."""
        receipt = self._receipt(update)
        if receipt is not None and await receipt.seen_before():
            return
        quiet = self.outbox.owes(place.chat_id)
        session = await wait.run(
            lambda: self.conversations.current_session(base),
            f"the session of update {update.update_id}",
        )
        async with contextlib.nullcontext() if quiet else typing(stream.bot, stream.target):
            reply = await self.conversations.chat_unstored(
                session, text, on_delta=None if quiet else stream.on_delta, images=images
            )
        await finish_or_owe(
            self.outbox,
            stream,
            reply.text,
            what=f"the unstored answer to update {update.update_id}",
            quote=message.message_id,
        )
        if receipt is not None:
            await receipt.record()

    async def _confirm_followups(self, bot: Bot, session: Session, place: Place) -> None:
        """The one-line confirmation (with Undo) of each follow-up the turn made."""
        if self.engine is None:
            return
        try:
            await followups.confirm_new(
                bot,
                self.engine,
                Owner(session.user_id, session.agent_id),
                Target(place.chat_id, place.thread_id),
            )
        except Exception as exc:  # the answer is shown; /memory followups still lists it
            log.warning("could not confirm follow-ups of %s: %s", session.id, exc)

    @staticmethod
    async def _delayed(stream: ReplyStream) -> None:
        """Said once per held message: its answer waits for the store (bot.conversation.store_wait).
        An answer streamed already (its save failing) is said to be not saved yet."""
        line = NOT_SAVED_YET if stream.message_ids else DELAYED
        with contextlib.suppress(TelegramError):  # a notice: the hold goes on without it
            await send_plain_reply(stream.bot, stream.target, line)

    async def _show(
        self,
        bot: Bot,
        update_id: int,
        reply: Reply,
        stream: ReplyStream,
        receipt: UpdateReceipt | None,
        *,
        place: Place,
        asked: Origin,
        session: Session,
    ) -> None:
        """Show a turn's `reply` (to the message from `asked`) with its sources, now or
        through the outbox; once shown, its sources apart if they must follow on their
        own, and where it went is recorded (bot/channels/telegram/sources.py)."""
        answer, failed, cited = reply.text, reply.error, reply.sources
        target = stream.target
        footer = sources.footer(cited)
        private = footer and not place.is_group  # a group's answer replies to its question
        quote = sources.quoted(cited, place.chat_id) if private else None
        # A streamed message cannot become a reply: its sources then follow on their own,
        # as a reply quoting the original (bot/channels/telegram/sources.py).
        apart = quote is not None and bool(stream.message_ids)
        if quote is not None and not apart:
            stream.target = dataclasses.replace(stream.target, reply_to=quote)
        answer += "" if apart else footer
        # Stored, so never lost: what Telegram does not take now is owed, marked so a
        # restart sends it, and shown later by the outbox (bot.channels.telegram.delivery.outbox).
        marks = receipt is not None and not failed
        stored = None if failed else sources.look_up(self.conversations, session, asked)

        async def after() -> None:  # the answer is shown: its origin, its sources apart
            if not failed:  # first: until it is recorded, a crash means a resend
                await sources.record_sent(self.conversations, session, asked, stream, stored)
            if apart and quote is not None:
                with contextlib.suppress(TelegramError):  # the answer is shown; this is extra
                    await send_plain_reply(
                        bot, dataclasses.replace(target, reply_to=quote), footer.strip()
                    )

        async def late() -> None:  # the outbox delivered it
            await after()
            if marks and receipt is not None:
                await receipt.delivered()

        shown = await finish_or_owe(
            self.outbox,
            stream,
            answer,
            what=f"the answer to update {update_id}",
            quote=asked.message_id,
            mark=receipt.undelivered if marks and receipt else None,
            late=late,
            dropped=receipt.gave_up if marks and receipt else None,
        )
        if shown:
            if receipt is not None:
                receipt.answered()
            await after()

    async def on_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        admitted = await self._admit(update, context, command=True)
        if admitted is None:
            return
        message, place, user = admitted
        target = self._target(message, place)
        if len(message.text or "") > MAX_INPUT_CHARS:
            await send_plain_reply(
                context.bot,
                target,
                TOO_LONG.format(n=len(message.text or ""), limit=MAX_INPUT_CHARS),
            )
            return
        receipt = self._receipt(update)
        if receipt is not None and await receipt.seen_before():
            return
        name, args = command_parts(message.text or "")
        handled, said = await self._own_memory(context.bot, target, place, user, name, args)
        if handled:  # the sender's own memory, outside the action registry
            if receipt is not None:
                await receipt.record()
            if said is not None:
                await send_plain_reply(context.bot, target, said)
            return
        base = base_session(self.settings.agent.id, place, user.id if user else place.chat_id)
        async with typing(context.bot, target):
            member = author_id(message) if place.is_group else None
            answer = await handle_command(
                self.conversations,
                base,
                name,
                args.strip(),
                is_admin=is_admin(self.tg, user.id if user else None),
                limit=self.reply_limit,
                member=member,
                group_admin=name == "memory"
                and await self._group_admin(context.bot, place, member, args),
            )
        if receipt is not None:
            await receipt.record()  # its effect happened: never run it twice
        words = args if name == "memory" else None  # a forget preview gets its buttons
        markup = review_buttons.review_buttons(answer) if words is not None else None
        if markup is not None and split_words(args)[0] == "review":  # Keep / Revert
            await send_plain_reply(context.bot, target, answer, markup)
            return
        if followups.is_listing(words) and self.engine is not None:
            owner = Owner(base.user_id, base.agent_id)
            await followups.send_listing(context.bot, self.engine, owner, target, answer)
            return
        await confirmations.reply(context.bot, self.conversations, target, answer, words)

    async def _own_memory(
        self, bot: Bot, target: Target, place: Place, user: User | None, name: str, args: str
    ) -> tuple[bool, str | None]:
        """`/memory export`, `/memory mcp ...` and the import offers' confirmations: a
        person's own memory, in a private chat only. (handled, what to say)."""
        if name != "memory":
            return False, None
        sub = args.lower().split()[:1]
        uid = None if place.is_group or user is None else user.id  # None: not private
        if sub == ["export"]:
            if uid is None:
                return True, "/memory export sends your own memory: ask me in a private chat."
            return True, self.memory_files.export(bot, target, uid)
        if sub == ["mcp"] and is_mcp_command(args):
            if uid is None:
                return True, "/memory mcp reaches your own memory: ask me in a private chat."
            said = await mcp_command(
                self.mcp_access, self.settings.mcp, uid, self.settings.agent.id, CHANNEL, args
            )
            return True, said
        if uid is None:
            return False, None
        if sub == ["import"] and self.memory_files.has_offer(uid):
            return True, await self.memory_files.command(uid, args)
        if is_import_command(args):
            return True, await self.imports.command(bot, target, uid, args)
        return False, None

    async def _group_admin(self, bot: Bot, place: Place, member: int | None, words: str) -> bool:
        """Whether `member` administers the group at `place` (Telegram says; cached),
        asked only for a group-wide `/memory <words>`."""
        if not place.is_group or member is None or is_admin(self.tg, member):
            return False
        if not group_wide(words):
            return False
        return await self.admins.is_admin(bot, place.chat_id, member)

    async def _names(self, message: Message, place: Place) -> None:
        """Record who wrote (and, in a group, the group) under their memory's ids, for
        the console; after the answer, so a slow or failing write holds up nothing. Only
        for stored messages, not commands: `/memory forget everything` must not leave the
        name it just erased written again."""
        if self.people is None:
            return
        user = message.from_user
        if user is not None and not user.is_bot:
            await self.people.seen(user.id, user.full_name, user.username)
        if place.is_group:
            chat = message.chat
            await self.people.seen(place.chat_id, chat.title or "group", chat.username)

    async def on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A button under a forget preview (bot/channels/telegram/confirmations.py): the command
        it stands for, with its preview's code, run for the person who pressed it."""
        query = update.callback_query
        if query is None or not isinstance(query.message, Message):
            return
        button = confirmations.pressed(query.data or "")
        message, user = query.message, query.from_user
        place = Place.of(message)
        await query.answer()
        if not is_allowed(self.tg, user.id, place.chat_id):
            return
        target = self._target(message, place)
        if button is None:  # a button from before codes: its preview is unknown
            await confirmations.after_press(context.bot, self.conversations, message, None)
            await confirmations.no_longer_valid(context.bot, target)
            return
        code, words = button
        answer = await self._pressed(context.bot, place, user, words)
        await confirmations.after_press(context.bot, self.conversations, message, code)
        await send_plain_reply(context.bot, target, answer)

    async def _pressed(self, bot: Bot, place: Place, user: User, words: str) -> str:
        """The `/memory <words>` a button stands for, run as the person who pressed it."""
        member = user.id if place.is_group else None
        return await handle_command(
            self.conversations,
            base_session(self.settings.agent.id, place, user.id),
            "memory",
            words,
            is_admin=is_admin(self.tg, user.id),
            limit=self.reply_limit,
            member=member,
            group_admin=await self._group_admin(bot, place, member, words),
        )

    async def on_review_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Keep or Revert under a review of reflect's changes
        (bot/channels/telegram/review/buttons.py): the command it stands for, run for the
        person who pressed it, on the change the button was shown with."""
        query = update.callback_query
        if query is None or not isinstance(query.message, Message):
            return
        words = review_buttons.pressed(query.data or "")
        message, user = query.message, query.from_user
        place = Place.of(message)
        await query.answer()
        if words is None or not is_allowed(self.tg, user.id, place.chat_id):
            return
        answer = await self._pressed(context.bot, place, user, words)
        if answer.startswith(("Kept", "Reverted")) or "already kept or reverted" in answer:
            await review_buttons.drop_row(message, query.data or "")
        await send_plain_reply(context.bot, self._target(message, place), answer)

    async def on_import_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Import or Cancel under an import offer (bot/channels/telegram/imports.py): the offer is
        the presser's own, found by their user id (offers are made in private chats), and
        only the one the button was shown with (its code)."""
        query = update.callback_query
        if query is None or not isinstance(query.message, Message):
            return
        action, code = pressed_import(query.data or "")
        message, user = query.message, query.from_user
        place = Place.of(message)
        await query.answer()
        if action not in ("confirm", "cancel") or place.is_group:
            return
        if not is_allowed(self.tg, user.id, place.chat_id):
            return
        with contextlib.suppress(TelegramError):  # pressed twice, or too old to edit
            await message.edit_reply_markup(reply_markup=None)
        target = self._target(message, place)
        said = await self.imports.command(
            context.bot, target, user.id, f"import {action}", code=code
        )
        if said is not None:
            await send_plain_reply(context.bot, target, said)

    async def on_followup_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Undo, Dismiss or Snooze under a follow-up (bot/followups/telegram.py): on the
        follow-up it was shown for, if it is the presser's memory's."""
        query = update.callback_query
        if query is None or not isinstance(query.message, Message) or self.engine is None:
            return
        message, user = query.message, query.from_user
        place = Place.of(message)
        await query.answer()
        if not is_allowed(self.tg, user.id, place.chat_id):
            return
        base = base_session(self.settings.agent.id, place, user.id)
        said = await followups.press(
            context.bot, self.engine, Owner(base.user_id, base.agent_id), query.data or "", message
        )
        await send_plain_reply(context.bot, self._target(message, place), said)

    async def on_unknown_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or not message.text:
            return
        head = message.text.split(maxsplit=1)[0]
        name, _, addressee = head.lstrip("/").partition("@")
        if addressee and addressee.lower() != context.bot.username.lower():
            return  # another bot's command
        if Place.of(message).is_group and not addressee:
            return  # plain /cmd in a group may be meant for another bot
        if await self._admit(update, context, command=True) is None:
            return
        await send_plain_reply(
            context.bot, self._target(message, Place.of(message)), UNKNOWN.format(name=name)
        )

    async def on_edited(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.debug(
            "ignored an edited message in chat %s (see bot.channels.telegram.handlers)",
            update.effective_chat.id if update.effective_chat else "?",
        )

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A handler raised (a bug, or a failure nothing expected): logged, and the user
        hears one plain apology (never the error's text) rather than silence. PTB calls
        this once per failed update (one handler group)."""
        update_id = update.update_id if isinstance(update, Update) else None
        log.error("update %s failed: %s", update_id, context.error, exc_info=context.error)
        message = update.effective_message if isinstance(update, Update) else None
        if message is None:
            return
        with contextlib.suppress(TelegramError):  # nothing more to say if this fails too
            await send_plain_reply(context.bot, self._target(message, Place.of(message)), FAILED)
