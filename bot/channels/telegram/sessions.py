"""Which conversation an update belongs to, who may use the bot, when a group
message is addressed to it, and how its author and the message it replies to are named
in its stored text.

- Private chat: one conversation per (agent, user); the memory scope is the user.
- Group: one conversation per chat, or per forum topic (`message_thread_id`); the memory
  scope is the group itself (its chat id stands as the user id), so a group never sees a
  member's private memory and a private chat never sees the group's.
- `/new` rotates the live session through the conversation service; the base session here never changes.
- Access: `telegram.allowed_ids` lists user ids and/or group chat ids (empty = everyone);
  `telegram.admin_ids` lists the user ids allowed operator-only sub-commands (empty =
  nobody: an operator must name themselves); in a group its own admins, as Telegram says
  (members/admins.py), may use the group-wide ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import Chat, Message, MessageEntity

from bot.channels.telegram.settings import TelegramSettings
from memory.contract.types import Session
from memory.text.replies import first_words, reply_note

CHANNEL = "telegram"
OPTED_OUT_MEMBER = "a member who opted out"


@dataclass(frozen=True)
class Place:
    """Where a message was written: the chat, and the forum topic if any."""

    chat_id: int
    thread_id: int | None
    is_group: bool

    @classmethod
    def of(cls, message: Message) -> Place:
        chat = message.chat
        is_group = chat.type in (Chat.GROUP, Chat.SUPERGROUP)
        thread = message.message_thread_id if (is_group and message.is_topic_message) else None
        return cls(chat.id, thread, is_group)


def base_session(agent_id: str, place: Place, user_id: int) -> Session:
    """The base session (generation 0) of the conversation at `place`."""
    if not place.is_group:
        return Session(
            id=f"{agent_id}:{CHANNEL}:{user_id}",
            agent_id=agent_id,
            user_id=user_id,
            channel=CHANNEL,
        )
    sid = f"{agent_id}:{CHANNEL}:{place.chat_id}"
    if place.thread_id is not None:
        sid += f":{place.thread_id}"
    return Session(id=sid, agent_id=agent_id, user_id=place.chat_id, channel=CHANNEL)


def is_allowed(settings: TelegramSettings, user_id: int | None, chat_id: int) -> bool:
    """Everyone when `allowed_ids` is empty; else the user or the whole group is listed."""
    if not settings.allowed_ids:
        return True
    return (
        user_id is not None and user_id in settings.allowed_ids
    ) or chat_id in settings.allowed_ids


def is_admin(settings: TelegramSettings, user_id: int | None) -> bool:
    return user_id is not None and user_id in settings.admin_ids


def _mentions(text: str, entities: tuple[MessageEntity, ...], bot_id: int, username: str) -> bool:
    handle = "@" + username.lower()
    for e in entities:
        if e.type == MessageEntity.MENTION:
            if _slice(text, e).lower() == handle:
                return True
        elif e.type == MessageEntity.TEXT_MENTION and e.user is not None and e.user.id == bot_id:
            return True
    return False


def _slice(text: str, entity: MessageEntity) -> str:
    raw = text.encode("utf-16-le")
    return raw[2 * entity.offset : 2 * (entity.offset + entity.length)].decode(
        "utf-16-le", "replace"
    )


def is_reply_to_bot(message: Message, bot_id: int) -> bool:
    """A real reply to one of the bot's messages. In a forum topic every message "replies"
    to the topic's creation message; that does not count."""
    replied = message.reply_to_message
    if replied is None or replied.forum_topic_created is not None:
        return False
    return replied.from_user is not None and replied.from_user.id == bot_id


def sender_name(message: Message) -> str:
    if message.sender_chat is not None:
        return message.sender_chat.title or "anonymous"
    user = message.from_user
    return user.full_name if user else "someone"


def stored_text(message: Message, text: str, *, group: bool, hide_replied: bool = False) -> str:
    """`text` as stored: in a group after its author's name (`[Ann] hi`), and, for a
    real reply, with whom and what it answers (`[Ann, replying to Bob: "see you…"]`,
    the form of imported replies): without it a reply to last week's message reads, to
    the model and in search hits, as if it answered the message before it. The words
    are the part the user quoted, if they quoted one. `hide_replied`: the replied
    message's author opted out of the group's memory: neither their name nor words."""
    head = [sender_name(message)] if group else []
    replied = message.reply_to_message
    if replied is not None and replied.forum_topic_created is None and hide_replied:
        head.append(reply_note(OPTED_OUT_MEMBER))
    elif replied is not None and replied.forum_topic_created is None:
        quoted = message.quote.text if message.quote is not None else None
        words = quoted or replied.text or replied.caption or ""
        head.append(reply_note(sender_name(replied), first_words(words)))
    return f"[{', '.join(head)}] {text}" if head else text


def is_addressed(message: Message, bot_id: int, username: str) -> bool:
    """Whether a group message is meant for the bot: it @mentions the bot (text or
    caption) or replies to one of its messages."""
    if is_reply_to_bot(message, bot_id):
        return True
    if message.text and _mentions(message.text, message.entities, bot_id, username):
        return True
    return bool(
        message.caption and _mentions(message.caption, message.caption_entities, bot_id, username)
    )


def strip_mention(text: str, username: str) -> str:
    """The message without the bot's @handle (case-insensitive), tidied."""
    handle = "@" + username
    lowered, needle = text.lower(), handle.lower()
    out, i = [], 0
    while True:
        j = lowered.find(needle, i)
        if j < 0:
            out.append(text[i:])
            break
        end = j + len(needle)
        if end < len(text) and (text[end].isalnum() or text[end] == "_"):
            out.append(text[i:end])  # a longer handle that merely starts like ours
        else:
            out.append(text[i:j])
            if end < len(text) and text[end] == " " and (j == 0 or text[j - 1] in " \n"):
                end += 1  # the space that separated the handle from the words
        i = end
    return "".join(out).strip()
