"""Answers owed from before a restart.

A text message is acknowledged to Telegram once it is stored, before the model answers
(`bot.channels.telegram.delivery.inflight`). A stop that cannot wait for the turn (a deploy during a slow
answer: handlers get `channel.DRAIN_S`) or a crash in between leaves the message stored
and unanswered, and Telegram will not send it again. So at each start the bot looks at
the text updates of the last `RESUME_WITHIN` still marked as owed an answer
(`bot.channels.telegram.delivery.handled`) and, per session, runs `Conversations.resume`: a turn on the stored
history that answers only if the conversation still ends with a user message (so a
message answered meanwhile, by another replica or by the user's next message, gets
nothing). The answer replies to the last such message, so it is clear what it answers.

An answer stored but never seen is sent too: when Telegram did not take it (flood
control, or unreachable past the retries of `bot.channels.telegram.delivery.sent`), the handler marks
its row `undelivered` at once, with the answer's text, and hands it to the outbox
(`bot.channels.telegram.delivery.outbox`); a stop before the outbox sent it leaves the mark. Each marked
answer is sent, oldest first, as a reply quoting its own message, from the row (no model
call), and a newer message of the same conversation does not cancel it: the user never
saw it. Only that explicit mark sends it: a row still marked merely because the 5-s
batch had not cleared it yet before a crash had its answer sent. If Telegram still
holds the chat under flood control, the outbox sends it once allowed.

A stored answer sent again carries the sources it had when first computed: they are found
again from its stored turn, read back by where its question came from
(`Conversations.answered`; the row's own text is the fallback, and may lack them: an answer
whose sources followed on their own, or a row with no text). Each answer sent is
linked to its first Telegram message (`sources.record_sent`).

An answer a crash kept from Telegram is sent too: stored, then the process died before
Telegram took it, so nothing marked it `undelivered`. Its row is still marked as owed
(it is cleared only once the answer went), and the stored answer has no origin (one is
recorded as soon as Telegram took it, `sources.record_sent`). Each such answer is sent
like an undelivered one, under the session's turn lock (`Conversations.turn_lock`): two
processes starting together send it once, the second finding the origin the first
recorded. Only rows handled before this run started are looked at: a turn of this run
is still being sent by its handler. One window remains: Telegram took the answer and
the process died before its origin was committed (one insert after the send,
`sources.look_up`); that answer is sent again, a duplicate rather than a loss
(docs/RELIABILITY.md). A provider that keeps no origins cannot tell: its rows are
settled as before. The origin is the truth for `undelivered` rows too: one whose
answer has an origin went (the crash came before its mark was cleared) and is settled.

Rows marked before revision bot_0006 carry no text: the latest answer is read back
(`Conversations.stored_answer`) and sent only while its message is still the conversation's
latest (not after the user wrote again, nor after a /new).

Sessions are resumed in the background, `RESUME_AT_ONCE` at a time (after a crash under
load there may be many), while new updates are handled; the conversation service's per-session lock
keeps a resumed turn and a new one apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from telegram import Bot

from bot.channels.telegram import sources
from bot.channels.telegram.delivery.handled import HandledUpdates, PendingReply
from bot.channels.telegram.delivery.outbox import Outbox, finish_or_owe
from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import EditPacer, ReplyStream, typing
from bot.channels.telegram.sessions import CHANNEL
from bot.config.settings import Settings
from bot.conversation.service import Conversations
from memory.contract.types import Origin, Session, utcnow

log = logging.getLogger(__name__)

# Telegram itself keeps an unacknowledged update this long: a message stored just before
# an outage is answered when the bot is back, like one that was still waiting there.
RESUME_WITHIN = timedelta(hours=24)
RESUME_AT_ONCE = 4


class OwedAnswers:
    """What a previous run stored but did not answer, answered through `conversations`."""

    def __init__(
        self,
        bot: Bot,
        conversations: Conversations,
        handled: HandledUpdates,
        settings: Settings,
        pacer: EditPacer,
        stream_interval: float,
        outbox: Outbox,
        started: datetime | None = None,
    ) -> None:
        self.bot = bot
        self.started = started  # rows handled since are this run's own turns
        self.conversations = conversations
        self.handled = handled
        self.agent_id = settings.agent.id
        self.pacer = pacer
        self.stream_interval = stream_interval
        self.outbox = outbox

    async def answer(self) -> int:
        """Answer every session still owed an answer; returns how many were sent."""
        owed: dict[str, list[PendingReply]] = {}
        for row in await self.handled.pending(utcnow() - RESUME_WITHIN, self.started):
            owed.setdefault(row.session_id, []).append(row)
        slots = asyncio.Semaphore(RESUME_AT_ONCE)

        async def one(session_id: str, rows: list[PendingReply]) -> bool:
            async with slots:
                return await self._resume(session_id, rows)

        sent = sum(await asyncio.gather(*(one(sid, rows) for sid, rows in owed.items())))
        log.info("owed answers looked at: %d session(s), %d answer(s) sent", len(owed), sent)
        return sent

    async def _resume(self, session_id: str, rows: list[PendingReply]) -> bool:
        """Answer one session's owed message(s), if still owed; True if an answer went
        (or was handed to the outbox, when Telegram could not take it yet)."""
        last = rows[-1]
        session = Session(
            id=session_id, agent_id=self.agent_id, user_id=last.user_id, channel=CHANNEL
        )
        sent = False
        try:
            # Answers stored and owed, oldest first, each quoting its own message.
            settled: list[int] = []
            for row in rows:
                # Owed, but its origin says it went: a crash before the mark was cleared.
                if row.undelivered and await self.conversations.answer_shown(session, _asked(row)):
                    settled.append(row.update_id)
                elif row.undelivered and row.answer is not None:
                    sent |= await self._send(
                        session,
                        row,
                        await self._again(session, row) or row.answer,
                        self._stream(row),
                        mark=None,
                        what="a stored answer Telegram did not take",
                    )
                elif await self._unshown(session, row):
                    sent = True
                else:
                    settled.append(row.update_id)
            stream = self._stream(last)
            quiet = self.outbox.owes(last.chat_id)  # no calls in a held chat
            async with contextlib.nullcontext() if quiet else typing(self.bot, stream.target):
                reply = await self.conversations.resume(
                    session, on_delta=None if quiet else stream.on_delta
                )
            if reply is not None:  # stored now (unless an apology): owed like any answer
                sent |= await self._send(
                    session,
                    last,
                    reply.text + sources.footer(reply.sources),
                    stream,
                    what="the answer to a message cut off by a stop",
                    mark=None if reply.error else self._mark(last),
                )
                settled = [u for u in settled if u != last.update_id]
            elif last.undelivered and last.answer is None:  # marked before bot_0006
                answer = await self._stored_answer(session, last)
                if answer is not None:
                    sent |= await self._send(
                        session,
                        last,
                        answer,
                        stream,
                        mark=None,
                        what="a stored answer that could not be sent",
                    )
                    settled = [u for u in settled if u != last.update_id]
            await self.handled.settle(settled)
        except Exception as exc:  # the next start tries again (within RESUME_WITHIN)
            log.warning("could not answer the owed message of session %s: %s", session_id, exc)
        return sent

    async def _unshown(self, session: Session, row: PendingReply) -> bool:
        """Send the stored answer to `row`'s message if Telegram never took it (module
        doc); True if it went, or is owed through the outbox."""
        async with self.conversations.turn_lock(session):
            reply = await self.conversations.unshown(session, _asked(row))
            if reply is None:
                return False
            return await self._send(
                session,
                row,
                reply.text + sources.footer(reply.sources),
                self._stream(row),
                what="a stored answer a crash kept from Telegram",
                mark=self._mark(row),
            )

    def _stream(self, row: PendingReply) -> ReplyStream:
        target = Target(row.chat_id, row.thread_id, row.message_id)
        return ReplyStream(self.bot, target, self.pacer, self.stream_interval)

    def _mark(self, row: PendingReply) -> Callable[[str], Awaitable[None]]:
        async def mark(answer: str) -> None:
            await self.handled.undelivered(row.update_id, answer)

        return mark

    async def _send(
        self,
        session: Session,
        row: PendingReply,
        answer: str,
        stream: ReplyStream,
        *,
        what: str,
        mark: Callable[[str], Awaitable[None]] | None,
    ) -> bool:
        """Show `answer` to `row`'s message now or through the outbox; its row is
        settled once it went, and the stored answer linked to where it went."""

        stored = sources.look_up(self.conversations, session, _asked(row))

        async def settle() -> None:
            await sources.record_sent(self.conversations, session, _asked(row), stream, stored)
            await self.handled.settle([row.update_id])

        async def dropped() -> None:  # a 400 or a timeout: not worth another start's try
            await self.handled.settle([row.update_id])

        if await finish_or_owe(
            self.outbox, stream, answer, what=what, mark=mark, late=settle, dropped=dropped
        ):
            await settle()
            log.info("sent %s (session %s)", what, row.session_id)
        return True

    async def _again(self, session: Session, row: PendingReply) -> str | None:
        """The stored answer to `row`'s message with the sources it had when first shown,
        found again from its stored turn (memory.actions.provenance's `answered`): the row's own
        text may lack them (an answer whose sources followed on their own, or a row
        marked before they existed). None when the turn cannot be read back."""
        try:
            found = await self.conversations.answered(session, _asked(row))
        except Exception as exc:  # the row's own text is sent instead
            log.warning("could not read back the answer of session %s: %s", session.id, exc)
            return None
        return None if found is None else found.text + sources.footer(found.sources)

    async def _stored_answer(self, session: Session, row: PendingReply) -> str | None:
        """The latest answer read back from the history, unless the user wrote since
        (rows marked before revision bot_0006 carry no text of their own)."""
        answer = await self._again(session, row) or await self.conversations.stored_answer(session)
        # Checked after the read: a message stored since would be the latest turn.
        if answer is None or await self.handled.latest_turn(session.id) != row.update_id:
            log.info(
                "the undelivered answer of session %s is not sent: the conversation has moved on",
                session.id,
            )
            return None
        return answer


def _asked(row: PendingReply) -> Origin:
    """Where the message `row` answers came from (as the handler stored it)."""
    return Origin(CHANNEL, row.chat_id, row.message_id, row.thread_id)
