"""Where a stored message came from (`memory.contract.types.Origin`, table `message_origins`), and
how people open the original again.

A channel passes the origin with the user's message (`Message.origin`); the shared
history stores it in the append's transaction and `read_message` returns it, only
within the caller's memory scope. Telegram can link into a supergroup (and a forum
topic in it): `https://t.me/c/<internal id>/[<topic>/]<message>`, where the internal id
is the chat id without its `-100` prefix; a link opens only for members, which is
what a group's memory is for. A private chat or a basic group has no link: a channel
shows such a source as a reply quoting the original (same chat) or by its date and
first words (`bot/channels/telegram/sources.py`).

The bot's own answers get an origin too, once the channel has sent them (`answer_sent`:
the first message of an answer split in several), so a cited answer of the bot and
`/memory show` of it link like a user's message. The answer is stored before it is
sent, so the channel names the message it answered and the stored turn is read back
from that (`AnswerOrigins.answered_turn`): no id travels with the answer, and an answer
sent late (after flood control, after a restart) is linked the same way. So a final
answer stored without an origin is one no channel has reported sent (`answer_shown`
reads that): a crash between storing and sending leaves exactly that.
"""

from __future__ import annotations

from memory.contract.capabilities import AnswerOrigins, MessageReader, Provider
from memory.contract.tracing import capability
from memory.contract.types import Origin, Session

TELEGRAM = "telegram"
_SUPERGROUP_PREFIX = "-100"


def link(origin: Origin | None) -> str | None:
    """A link that opens the original message, or None when there is none (module doc)."""
    if origin is None or origin.channel != TELEGRAM:
        return None
    chat = str(origin.chat_id)
    if not chat.startswith(_SUPERGROUP_PREFIX) or len(chat) <= len(_SUPERGROUP_PREFIX):
        return None
    internal = chat[len(_SUPERGROUP_PREFIX) :]
    topic = f"{origin.thread_id}/" if origin.thread_id is not None else ""
    return f"https://t.me/c/{internal}/{topic}{origin.message_id}"


def same_chat(origin: Origin | None, channel: str, chat_id: int) -> bool:
    """Whether the original is in chat `chat_id` of `channel` (so a reply can quote it)."""
    return origin is not None and origin.channel == channel and origin.chat_id == chat_id


async def answer_id(provider: Provider, session: Session, asked: Origin) -> str | None:
    """The id of the stored answer to the message received from `asked` in `session`;
    None when the provider keeps no origins or no answer to it is stored. A channel
    looks it up while the answer is being sent, so that recording where it went
    (`answer_sent`) is a single insert once the answer is out."""
    origins = capability(provider, AnswerOrigins)
    if origins is None:
        return None
    turn = await origins.answered_turn(session, asked)
    return None if turn is None else turn.answer_id


async def answer_sent(
    provider: Provider, session: Session, asked: Origin, sent: Origin, answer: str | None = None
) -> bool:
    """Record that the stored answer to the message received from `asked` (its id
    `answer`, when already looked up) went out as `sent` (module doc); False when the
    provider keeps no origins, the answer is not stored in `session`, or it has its
    origin already."""
    origins = capability(provider, AnswerOrigins)
    if origins is None:
        return False
    found = answer if answer is not None else await answer_id(provider, session, asked)
    return found is not None and await origins.add_origin(session, found, sent)


async def answer_shown(provider: Provider, session: Session, asked: Origin) -> bool | None:
    """Whether the stored answer to the message received from `asked` has gone out (it
    has an origin, module doc); None when that cannot be told: the provider keeps no
    origins, or no answer to that message is stored in `session`."""
    origins = capability(provider, AnswerOrigins)
    reader = capability(provider, MessageReader)
    if origins is None or reader is None:
        return None
    turn = await origins.answered_turn(session, asked)
    if turn is None:
        return None
    found = await reader.read_message(session, turn.answer_id)
    return found.origin is not None
