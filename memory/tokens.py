"""Token estimation shared by every provider and the pool."""

from __future__ import annotations

from collections.abc import Iterable

from memory.types import Message


def estimate_tokens(text: str) -> int:
    """About four characters per token, rounded up: the contract's one estimate, so every
    provider counts a message alike."""
    return (len(text) + 3) // 4


def message_tokens(msg: Message) -> int:
    return estimate_tokens(msg.text())


def messages_tokens(msgs: Iterable[Message]) -> int:
    return sum(message_tokens(m) for m in msgs)
