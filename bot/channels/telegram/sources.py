"""An answer's sources as Telegram shows them (memory/actions/provenance.py chooses them).

The answer's citations are numbered (`[1]`); its last line lists them: in a supergroup,
each number links to the original message (`memory.actions.origins.link`); where Telegram has no
link (a private chat, a basic group, a summary or archive), the number is followed by
the date and first words. In a private chat the answer is also sent as a reply quoting
its first cited message when that message is in this chat; an answer already shown
while it streamed cannot become a reply, so its sources then follow as a message of
their own quoting the original (bot/channels/telegram/handlers.py).

Once Telegram has taken an answer (at once, from the outbox, or after a restart), its
first message is recorded as the stored answer's origin (`record_sent`), so the bot's
own answer, cited later or opened with `/memory show`, links like a user's message.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from bot.channels.telegram.render.replies import ReplyStream
from bot.channels.telegram.sessions import CHANNEL
from memory.actions import origins
from memory.actions.provenance import Source
from memory.contract.types import Origin, Session

if TYPE_CHECKING:
    from bot.conversation.service import Conversations

log = logging.getLogger(__name__)

_MARKUP = re.compile(r"[*_`\[\]~|>]+")  # Markdown markers a quoted message must not bring


def footer(sources: Sequence[Source]) -> str:
    """The Markdown line(s) that end an answer citing `sources` ("" for none)."""
    if not sources:
        return ""
    linked: list[str] = []
    plain: list[str] = []
    for s in sources:
        url = origins.link(s.origin)
        if url is not None:
            linked.append(f"[{s.number}]({url})")
            continue
        date = f" {s.at:%Y-%m-%d}" if s.at else ""
        words = _MARKUP.sub(" ", s.words).strip()
        what = f"“{words}”" if words else f"{s.ref.kind} {s.ref.id}"
        plain.append(f"{s.number}.{date} {what}")
    lines = [f"Sources: {' · '.join(linked)}"] if linked else []
    if plain:
        lines.append(("Sources:\n" if not linked else "") + "\n".join(plain))
    return "\n\n" + "\n".join(lines)


def quoted(sources: Sequence[Source], chat_id: int) -> int | None:
    """The message of chat `chat_id` a private answer replies to: its first cited
    message that was written in this chat and has no link."""
    for s in sources:
        if origins.link(s.origin) is None and origins.same_chat(
            s.origin, origins.TELEGRAM, chat_id
        ):
            assert s.origin is not None
            return s.origin.message_id
    return None


def look_up(
    conversations: Conversations, session: Session, asked: Origin
) -> asyncio.Task[str | None]:
    """The stored answer's id, looked up in the background while the answer is sent:
    once Telegram took it, `record_sent` then writes its origin in one insert. Until
    that commits, a crash makes the next start send the answer again
    (bot.channels.telegram.delivery.resume), so that window is kept as short as it can be."""

    async def find() -> str | None:
        try:
            return await conversations.answer_id(session, asked)
        except Exception as exc:  # record_sent looks again
            log.warning("could not look up the stored answer of %s: %s", session.id, exc)
            return None

    return asyncio.ensure_future(find())


async def record_sent(
    conversations: Conversations,
    session: Session,
    asked: Origin,
    stream: ReplyStream,
    answer: Awaitable[str | None] | None = None,
) -> None:
    """The answer to the message from `asked`, shown through `stream`, went out as the
    stream's first message: recorded as its origin (module doc); `answer`: its stored
    id, from `look_up`. Best effort: the answer is shown; a failure only leaves it
    without a link."""
    if not stream.message_ids:
        return
    target = stream.target
    sent = Origin(CHANNEL, target.chat_id, stream.message_ids[0], target.thread_id)
    try:
        await conversations.answer_sent(
            session, asked, sent, None if answer is None else await answer
        )
    except Exception as exc:
        log.warning("could not record where the answer of %s was sent: %s", session.id, exc)
