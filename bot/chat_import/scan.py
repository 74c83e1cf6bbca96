"""What an export holds and what importing it would add: the `Plan`, per source
conversation (`ChatPlan`), filled by one read of the whole file (`scan`, run in the
sandbox by `importer.plan`), checking every item so that a malformed file is refused
before anything is written."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bot.chat_import import ledger
from bot.chat_import.ledger import CHANNEL
from bot.chat_import.limits import Limits
from bot.chat_import.refused import ImportRefused
from bot.chat_import.sources import ExportFormat, SourceChat, SourceItem, SourceMessage
from memory.contract.types import Session
from memory.text.tokens import estimate_uncached


def import_session(agent_id: str, user_id: int, source_key: str) -> Session:
    """The archived session a source conversation becomes (deterministic: the same
    conversation of the same user is the same session on every import; its key is
    plain, `sources.plain_id`)."""
    sid = f"{agent_id}:{CHANNEL}:{user_id}:{source_key}"
    return Session(sid, agent_id, user_id, CHANNEL)


@dataclass
class ChatPlan:
    chat: SourceChat
    session: Session
    done: ledger.Progress
    messages: int = 0  # in the file
    new: int = 0  # not stored yet
    new_tokens: int = 0
    first: datetime | None = None
    last: datetime | None = None
    changed: bool = False  # its messages no longer line up with what was imported
    _last_seq: int = -1
    _confirmed: bool = False

    def see(self, m: SourceMessage, file_name: str, stable_seq: bool) -> None:
        if m.seq <= self._last_seq:
            raise ImportRefused(
                f"{file_name}: chat {self.chat.title!r}: message {m.key} is out of order "
                f"(after {self._last_seq})"
            )
        self._last_seq = m.seq
        self.messages += 1
        self.first = m.at if self.first is None else min(self.first, m.at)
        self.last = m.at if self.last is None else max(self.last, m.at)
        if m.seq > self.done.last_seq:
            self.new += 1
            self.new_tokens += estimate_uncached(m.text)  # not cached: the bot's chats use it
        elif m.seq == self.done.last_seq and m.key == self.done.last_key:
            self._confirmed = True
        if stable_seq:
            self._confirmed = True

    def close(self) -> None:
        """A conversation whose last imported message is no longer where it was (a
        ChatGPT message edited or regenerated since) is left as it is."""
        if self.done.last_seq >= 0 and not self._confirmed:
            self.changed, self.new, self.new_tokens = True, 0, 0


@dataclass
class Plan:
    format: ExportFormat
    path: Path
    user_id: int
    agent_id: str
    limits: Limits
    chats: list[ChatPlan] = field(default_factory=list)
    others: int = 0  # chats in the file left out by --chat

    @property
    def messages(self) -> int:
        return sum(c.messages for c in self.chats)

    @property
    def new(self) -> int:
        return sum(c.new for c in self.chats)

    @property
    def new_tokens(self) -> int:
        return sum(c.new_tokens for c in self.chats)

    @property
    def first(self) -> datetime | None:
        return min((c.first for c in self.chats if c.first), default=None)

    @property
    def last(self) -> datetime | None:
        return max((c.last for c in self.chats if c.last), default=None)


def _matches(chat: SourceChat, wanted: str) -> bool:
    w = wanted.strip().casefold()
    return w in (chat.title.casefold(), chat.key.casefold(), chat.key.split(":", 1)[1].casefold())


def items(p: Plan) -> Iterator[SourceItem]:
    try:
        stream = p.path.open("rb")
    except OSError as exc:
        raise ImportRefused(f"cannot read {p.path}: {exc.strerror or exc}") from None
    with stream:
        yield from p.format.read(stream, p.path.name, p.limits)


def scan(out: Plan, done: dict[str, ledger.Progress], chat: str | None) -> Plan:
    current: ChatPlan | None = None
    titles: list[str] = []
    for item in items(out):
        if isinstance(item, SourceChat):
            if current is not None:
                current.close()
            titles.append(item.title)
            if chat is not None and not _matches(item, chat):
                current = None
                out.others += 1
                continue
            session = import_session(out.agent_id, out.user_id, item.key)
            current = ChatPlan(item, session, done.get(session.id, ledger.Progress()))
            out.chats.append(current)
        elif current is not None:
            current.see(item, out.path.name, out.format.stable_seq)
    if current is not None:
        current.close()
    if chat is not None and not out.chats:
        shown = ", ".join(repr(t) for t in titles[:10]) + (" …" if len(titles) > 10 else "")
        raise ImportRefused(f"no chat named {chat!r} in {out.path.name}; it holds {shown}")
    return out
