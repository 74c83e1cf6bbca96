"""Answers owed from before a restart.

A text message is acknowledged to Telegram once it is stored, before the model answers
(`bot.telegram.inflight`). A stop that cannot wait for the turn (a deploy during a slow
answer: handlers get `channel.DRAIN_S`) or a crash in between leaves the message stored
and unanswered, and Telegram will not send it again. So at each start the bot looks at
the text updates of the last `RESUME_WITHIN` still marked as owed an answer
(`bot.telegram.handled`) and, per session, runs `Pool.resume`: a turn on the stored
history that answers only if the conversation still ends with a user message (so a
message answered meanwhile, by another replica or by the user's next message, gets
nothing). The answer replies to the last such message, so it is clear what it answers.

An answer stored but never seen is sent too: when Telegram did not take it (flood
control, or unreachable past the retries of `bot.telegram.delivery`), the handler marks
its row `undelivered` at once, with the answer's text, and hands it to the outbox
(`bot.telegram.outbox`); a stop before the outbox sent it leaves the mark. Each marked
answer is sent, oldest first, as a reply quoting its own message, from the row (no model
call), and a newer message of the same conversation does not cancel it: the user never
saw it. Only that explicit mark sends it: a row still marked merely because the 5-s
batch had not cleared it yet before a crash had its answer sent. If Telegram still
holds the chat under flood control, the outbox sends it once allowed.

Rows marked before revision bot_0006 carry no text: the latest answer is read back
(`Pool.stored_answer`) and sent only while its message is still the conversation's
latest (not after the user wrote again, nor after a /new).

Sessions are resumed in the background, `RESUME_AT_ONCE` at a time (after a crash under
load there may be many), while new updates are handled; the pool's per-session lock
keeps a resumed turn and a new one apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from telegram import Bot

from bot.config import Settings
from bot.pool import Pool
from bot.telegram import sources
from bot.telegram.delivery import Target
from bot.telegram.handled import HandledUpdates, PendingReply
from bot.telegram.outbox import Outbox, finish_or_owe
from bot.telegram.replies import EditPacer, ReplyStream, typing
from bot.telegram.sessions import CHANNEL
from memory.types import Session, utcnow

log = logging.getLogger(__name__)

# Telegram itself keeps an unacknowledged update this long: a message stored just before
# an outage is answered when the bot is back, like one that was still waiting there.
RESUME_WITHIN = timedelta(hours=24)
RESUME_AT_ONCE = 4


class OwedAnswers:
    """What a previous run stored but did not answer, answered through `pool`."""

    def __init__(
        self,
        bot: Bot,
        pool: Pool,
        handled: HandledUpdates,
        settings: Settings,
        pacer: EditPacer,
        stream_interval: float,
        outbox: Outbox,
    ) -> None:
        self.bot = bot
        self.pool = pool
        self.handled = handled
        self.agent_id = settings.agent.id
        self.pacer = pacer
        self.stream_interval = stream_interval
        self.outbox = outbox

    async def answer(self) -> int:
        """Answer every session still owed an answer; returns how many were sent."""
        owed: dict[str, list[PendingReply]] = {}
        for row in await self.handled.pending(utcnow() - RESUME_WITHIN):
            owed.setdefault(row.session_id, []).append(row)
        slots = asyncio.Semaphore(RESUME_AT_ONCE)

        async def one(session_id: str, rows: list[PendingReply]) -> bool:
            async with slots:
                return await self._resume(session_id, rows)

        return sum(await asyncio.gather(*(one(sid, rows) for sid, rows in owed.items())))

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
                if row.undelivered and row.answer is not None:
                    sent |= await self._send(
                        row,
                        row.answer,
                        self._stream(row),
                        mark=None,
                        what="a stored answer Telegram did not take",
                    )
                else:
                    settled.append(row.update_id)
            stream = self._stream(last)
            quiet = self.outbox.owes(last.chat_id)  # no calls in a held chat
            async with contextlib.nullcontext() if quiet else typing(self.bot, stream.target):
                reply = await self.pool.resume(session, on_delta=None if quiet else stream.on_delta)
            if reply is not None:  # stored now (unless an apology): owed like any answer
                sent |= await self._send(
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

    def _stream(self, row: PendingReply) -> ReplyStream:
        target = Target(row.chat_id, row.thread_id, row.message_id)
        return ReplyStream(self.bot, target, self.pacer, self.stream_interval)

    def _mark(self, row: PendingReply) -> Callable[[str], Awaitable[None]]:
        async def mark(answer: str) -> None:
            await self.handled.undelivered(row.update_id, answer)

        return mark

    async def _send(
        self,
        row: PendingReply,
        answer: str,
        stream: ReplyStream,
        *,
        what: str,
        mark: Callable[[str], Awaitable[None]] | None,
    ) -> bool:
        """Show `answer` to `row`'s message now or through the outbox; its row is
        settled once it went."""

        async def settle() -> None:
            await self.handled.settle([row.update_id])

        if await finish_or_owe(self.outbox, stream, answer, what=what, mark=mark, late=settle):
            await settle()
            log.info("sent %s (session %s)", what, row.session_id)
        return True

    async def _stored_answer(self, session: Session, row: PendingReply) -> str | None:
        """The latest answer read back from the history, unless the user wrote since
        (rows marked before revision bot_0006 carry no text of their own)."""
        answer = await self.pool.stored_answer(session)
        # Checked after the read: a message stored since would be the latest turn.
        if answer is None or await self.handled.latest_turn(session.id) != row.update_id:
            log.info(
                "the undelivered answer of session %s is not sent: the conversation has moved on",
                session.id,
            )
            return None
        return answer
