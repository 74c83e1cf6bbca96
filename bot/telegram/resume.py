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

Sessions are resumed one after the other in the background while new updates are
handled; the pool's per-session lock keeps a resumed turn and a new one apart.
"""

from __future__ import annotations

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


async def answer_owed(bot: Bot, pool: Pool, handled: HandledUpdates, settings: Settings,
                      pacer: EditPacer, stream_interval: float) -> int:
    """Answer what a previous run stored but did not answer; returns how many answers
    were sent."""
    owed: dict[str, list[PendingReply]] = {}
    for row in await handled.pending(utcnow() - RESUME_WITHIN):
        owed.setdefault(row.session_id, []).append(row)
    sent = 0
    for session_id, rows in owed.items():
        last = rows[-1]
        session = Session(id=session_id, agent_id=settings.agent.id, user_id=last.user_id,
                          channel=CHANNEL)
        target = Target(last.chat_id, last.thread_id, last.message_id)
        stream = ReplyStream(bot, target, pacer, stream_interval)
        try:
            async with typing(bot, target):
                reply = await pool.resume(session, on_delta=stream.on_delta)
            if reply is not None:
                await stream.finish(reply.text)
                sent += 1
                log.info("answered a message of session %s stored before the restart",
                         session_id)
            await handled.settle([r.update_id for r in rows])
        except Exception as exc:  # the next start tries again (within RESUME_WITHIN)
            log.warning("could not answer the owed message of session %s: %s",
                        session_id, exc)
    return sent
