"""ChatGPT's data export (`conversations.json`): a list of conversations, each a tree of
messages (`mapping`: node id -> message, parent, children), since editing a message or
regenerating an answer starts a branch. The branch imported is the one the conversation
showed last: from `current_node` up to the root (without one, the newest child at each
step down).

Kept: the user's and the assistant's messages, as `user` and `assistant`, at their
`create_time` (the conversation's when a message has none), text and code (fenced),
an image noted `[image]`. Skipped: system and tool messages, the assistant's calls to
its tools (`recipient` other than `all`), hidden messages (custom instructions),
browsing and reasoning displays, and messages left empty.

The conversations are read one at a time (one tree in memory, never the whole list).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, BinaryIO

import ijson
from pydantic import BaseModel, ConfigDict, ValidationError

from bot.chat_import.limits import Limits, bounded_events
from bot.chat_import.sources import (
    ImportRefused,
    SourceChat,
    SourceItem,
    SourceMessage,
    clipped,
    first_error,
    plain_id,
    timestamp,
)

KEPT_ROLES = ("user", "assistant")


class Author(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str


class Content(BaseModel):
    model_config = ConfigDict(extra="ignore")
    content_type: str
    parts: list[Any] | None = None
    text: str | None = None


class GptMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    author: Author
    create_time: float | None = None
    content: Content
    recipient: str | None = "all"
    metadata: dict[str, Any] | None = None


class Node(BaseModel):
    model_config = ConfigDict(extra="ignore")
    message: GptMessage | None = None
    parent: str | None = None
    children: list[str] = []


class Conversation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str | None = None
    create_time: float | None = None
    mapping: dict[str, Node]
    current_node: str | None = None
    conversation_id: str | None = None
    id: str | None = None

    def key(self) -> str:
        """The conversation's id; for an export without one, a digest of what
        identifies it (its title, creation time and root), stable across exports."""
        if self.conversation_id or self.id:
            return f"chatgpt:{plain_id(self.conversation_id or self.id or '')}"
        roots = sorted(k for k, n in self.mapping.items() if n.parent is None)
        seed = f"{self.title}|{self.create_time}|{roots[:1]}".encode()
        return f"chatgpt:{hashlib.sha256(seed).hexdigest()[:32]}"


def branch(conv: Conversation) -> list[str]:
    """Node ids of the current branch, root first. Raises ValueError naming a fault."""
    mapping = conv.mapping
    if not mapping:
        return []
    leaf = conv.current_node
    if leaf is None:  # the newest child at each step down from the root
        roots = [k for k, n in mapping.items() if n.parent is None]
        if not roots:
            raise ValueError("no root message (every message has a parent)")
        leaf = roots[0]
        seen_down: set[str] = set()
        while mapping[leaf].children and leaf not in seen_down:
            seen_down.add(leaf)
            leaf = mapping[leaf].children[-1]
            if leaf not in mapping:
                raise ValueError(f"child {leaf!r} is not in mapping")
    if leaf not in mapping:
        raise ValueError(f"current_node {leaf!r} is not in mapping")
    path: list[str] = []
    seen: set[str] = set()
    node: str | None = leaf
    while node is not None:
        if node in seen:
            raise ValueError(f"the parents of {leaf!r} loop back to {node!r}")
        if node not in mapping:
            raise ValueError(f"parent {node!r} is not in mapping")
        seen.add(node)
        path.append(node)
        node = mapping[node].parent
    path.reverse()
    return path


def text_of(msg: GptMessage) -> str:
    """What a message says; "" for what is not imported."""
    if msg.author.role not in KEPT_ROLES or (msg.recipient or "all") != "all":
        return ""
    if (msg.metadata or {}).get("is_visually_hidden_from_conversation"):
        return ""
    c = msg.content
    if c.content_type == "code" and c.text:
        return f"```\n{c.text}\n```"
    if c.content_type not in ("text", "multimodal_text"):
        return ""
    out = []
    for part in c.parts or ():
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and "image" in str(part.get("content_type", "")):
            out.append("[image]")
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
    return "\n".join(p for p in out if p).strip()


class ChatGPTExport:
    name = "chatgpt"
    file_name = "conversations.json"
    stable_seq = False

    def read(self, stream: BinaryIO, name: str, limits: Limits) -> Iterator[SourceItem]:
        index = 0
        for raw in ijson.items(bounded_events(stream, name, limits), "item"):
            yield from self._conversation(index, raw, name)
            index += 1
        if index == 0:
            raise ImportRefused(
                f"{name}: no conversation in it: is it the conversations.json "
                "of a ChatGPT data export (a list of conversations)?"
            )

    def _conversation(self, index: int, raw: Any, name: str) -> Iterator[SourceItem]:
        where = f"{name}: conversation {index + 1}"
        if isinstance(raw, dict) and isinstance(raw.get("title"), str):
            where += f" ({raw['title'][:60]!r})"
        try:
            conv = Conversation.model_validate(raw)
            path = branch(conv)
        except ValidationError as exc:
            raise ImportRefused(f"{where}: {first_error(exc)}") from None
        except ValueError as exc:
            raise ImportRefused(f"{where}: {exc}") from None
        yield SourceChat(index, conv.key(), conv.title or "untitled")
        started = (
            timestamp(conv.create_time, f"{where}: create_time")
            if conv.create_time is not None
            else datetime(1970, 1, 1, tzinfo=UTC)
        )
        for seq, node_id in enumerate(path):
            msg = conv.mapping[node_id].message
            text = text_of(msg) if msg is not None else ""
            if not text or msg is None:
                continue
            at = (
                timestamp(msg.create_time, f"{where}: message {node_id[:60]!r}: create_time")
                if msg.create_time is not None
                else started
            )
            yield SourceMessage(index, seq, plain_id(node_id), at, msg.author.role, clipped(text))
