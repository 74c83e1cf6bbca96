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

An answer stored but never seen is sent too: when sending it failed for good (Telegram
unreachable past the retries of `bot.telegram.delivery`), the handler marks its row
`undelivered` at once. Such a conversation ends with the answer, so `Pool.resume` does
nothing; the stored answer is read back (`Pool.stored_answer`, no model call) and sent
as a reply to its message. Only that explicit mark sends it: a row still marked merely
because the 5-s batch had not cleared it yet before a crash had its answer sent.

If the user has written in that conversation since (a later message is stored), the
missed answer is not sent: the later message got (or is owed) its own answer, given by a
model that saw the missed one, and an old answer arriving late, out of order, would
confuse more than it tells. Only the answer to the conversation's latest message is
redelivered; likewise not after a /new archived the conversation.

Sessions are resumed in the background, `RESUME_AT_ONCE` at a time (after a crash under
load there may be many), while new updates are handled; the pool's per-session lock
keeps a resumed turn and a new one apart.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from telegram import Bot

from bot.config import Settings
from bot.pool import Pool
from bot.telegram.delivery import Target
from bot.telegram.handled import HandledUpdates, PendingReply
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

    def __init__(self, bot: Bot, pool: Pool, handled: HandledUpdates, settings: Settings,
                 pacer: EditPacer, stream_interval: float) -> None:
        self.bot = bot
        self.pool = pool
        self.handled = handled
        self.agent_id = settings.agent.id
        self.pacer = pacer
        self.stream_interval = stream_interval

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
        """Answer one session's owed message(s), if still owed; True if an answer went."""
        last = rows[-1]
        session = Session(id=session_id, agent_id=self.agent_id, user_id=last.user_id,
                          channel=CHANNEL)
        target = Target(last.chat_id, last.thread_id, last.message_id)
        stream = ReplyStream(self.bot, target, self.pacer, self.stream_interval)
        try:
            async with typing(self.bot, target):
                reply = await self.pool.resume(session, on_delta=stream.on_delta)
            if reply is not None:
                await stream.finish(reply.text)
                log.info("answered a message of session %s stored before the restart",
                         session_id)
                sent = True
            else:
                sent = last.undelivered and await self._redeliver(session, last, stream)
            await self.handled.settle([r.update_id for r in rows])
        except Exception as exc:  # the next start tries again (within RESUME_WITHIN)
            log.warning("could not answer the owed message of session %s: %s",
                        session_id, exc)
            return False
        return sent

    async def _redeliver(self, session: Session, row: PendingReply,
                         stream: ReplyStream) -> bool:
        """Send the stored answer to `row`'s message, unless the user wrote since."""
        answer = await self.pool.stored_answer(session)
        # Checked after the read: a message stored since would be the latest turn.
        if answer is None or await self.handled.latest_turn(session.id) != row.update_id:
            log.info("the undelivered answer of session %s is not sent: the "
                     "conversation has moved on", session.id)
            return False
        await stream.finish(answer)
        log.info("sent the stored answer of session %s that could not be sent before",
                 session.id)
        return True
