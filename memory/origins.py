"""Where a stored message came from (`memory.types.Origin`, table `message_origins`), and
how people open the original again.

A channel passes the origin with the user's message (`Message.origin`); the shared
history stores it in the append's transaction and `read_message` returns it, only
within the caller's memory scope. Telegram can link into a supergroup (and a forum
topic in it): `https://t.me/c/<internal id>/[<topic>/]<message>`, where the internal id
is the chat id without its `-100` prefix; a link opens only for members, which is
what a group's memory is for. A private chat or a basic group has no link: a channel
shows such a source as a reply quoting the original (same chat) or by its date and
first words (`bot/telegram/sources.py`).
"""

from __future__ import annotations

from memory.types import Origin

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
