"""Plan and import an export into one user's memory.

`plan` reads the whole file once (checking every item: a malformed file is refused
before anything is written) and says what an import would add: per source
conversation, its messages, date range and tokens, and how many are new (the ledger
knows what an earlier import stored). `run` reads it again and stores the new messages
through the provider contract (`append`, original timestamps), `BATCH` per
transaction, each batch with its ledger row: a killed import resumes after the last
batch that committed, and importing the same file again adds nothing. A newer export of
the same chats adds only what is newer.

Each source conversation becomes one archived session of the user (channel `import`):
searchable, explorable and reviewed by reflect like any other, never the live context
of a chat. Two imports of one conversation at once: the second's batch finds the ledger
moved under it and stops (`ledger.ImportConflict`), storing nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.chat_import import ledger, sandbox
from bot.chat_import.chatgpt_export import ChatGPTExport
from bot.chat_import.limits import Limits
from bot.chat_import.sources import (
    ExportFormat,
    ImportRefused,
    SourceChat,
    SourceItem,
    SourceMessage,
)
from bot.chat_import.telegram_export import TelegramExport
from memory.contract.capabilities import SessionManager
from memory.contract.errors import NotFound
from memory.contract.options import AppendOptions, append_messages
from memory.contract.tracing import unwrap
from memory.contract.types import Message, Session, SessionInfo
from memory.storage.db import write_transaction
from memory.text.tokens import estimate_uncached

CHANNEL = "import"
BATCH = 500  # messages per transaction: few commits, short locks
FORMATS: dict[str, ExportFormat] = {f.name: f for f in (TelegramExport(), ChatGPTExport())}


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


def _items(p: Plan) -> Iterator[SourceItem]:
    try:
        stream = p.path.open("rb")
    except OSError as exc:
        raise ImportRefused(f"cannot read {p.path}: {exc.strerror or exc}") from None
    with stream:
        yield from p.format.read(stream, p.path.name, p.limits)


async def plan(
    engine: AsyncEngine,
    fmt: ExportFormat,
    path: Path,
    user_id: int,
    agent_id: str,
    limits: Limits,
    chat: str | None = None,
) -> Plan:
    """What importing `path` would add (see the module doc). Raises ImportRefused. The
    file is read within `limits`, in a child process (`sandbox`): however hostile the
    file, the bot's memory and its other chats are not what pays."""
    done = await ledger.progress_of(engine, user_id, agent_id)
    return await sandbox.scan(Plan(fmt, path, user_id, agent_id, limits), done, chat)


def _scan(out: Plan, done: dict[str, ledger.Progress], chat: str | None) -> Plan:
    current: ChatPlan | None = None
    titles: list[str] = []
    for item in _items(out):
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


@dataclass
class Report:
    messages: int = 0
    sessions: list[Session] = field(default_factory=list)


OnProgress = Callable[[int], Any]


async def run(
    provider: Any,
    engine: AsyncEngine,
    p: Plan,
    *,
    on_progress: OnProgress | None = None,
) -> Report:
    """Store what `p` found new, batch by batch (see the module doc). Raises
    ImportRefused (the file changed since the plan and is now malformed: the batches
    before stay, a re-run continues) or `ledger.ImportConflict`."""
    manager = unwrap(provider)
    if not isinstance(manager, SessionManager):
        raise ImportRefused(
            f"the {provider.name} memory provider keeps no sessions: it cannot hold imports"
        )
    todo = {c.chat.index: c for c in p.chats if c.new > 0}
    report = Report()
    current: ChatPlan | None = None
    batch: list[tuple[int, str, Message]] = []

    async def flush() -> None:
        nonlocal batch
        if not batch or current is None:
            return
        last_seq, last_key, _ = batch[-1]
        hook = ledger.recorder(
            current.session,
            current.chat.key,
            current.done.last_seq,
            (last_seq, last_key),
            len(batch),
        )
        msgs = [m for _, _, m in batch]
        await append_messages(provider, current.session, msgs, AppendOptions(hook=hook))
        if not hook.ran:  # a provider without the same-transaction hook
            async with write_transaction(engine) as conn:
                await hook.run(conn)
        current.done = ledger.Progress(last_seq, last_key, current.done.messages + len(batch))
        report.messages += len(batch)
        batch = []
        if on_progress is not None:
            on_progress(report.messages)

    async def store(item: SourceItem) -> None:
        nonlocal current
        if isinstance(item, SourceChat):
            await flush()
            current = todo.get(item.index)
            if current is not None:
                await _open_archived(manager, current)
                report.sessions.append(current.session)
            return
        if current is None or item.seq <= current.done.last_seq:
            return
        batch.append((item.seq, item.key, Message(item.role, item.text, created_at=item.at)))
        if len(batch) >= BATCH:
            await flush()

    # The file the plan read (within its limits, in the sandbox) read again here, off
    # the event loop, a batch at a time; no deadline: the writes take what they take.
    items = _items(replace(p, limits=replace(p.limits, seconds=None)))
    while chunk := await asyncio.to_thread(list, islice(items, BATCH)):
        for item in chunk:
            await store(item)
    await flush()
    return report


async def _open_archived(manager: SessionManager, c: ChatPlan) -> None:
    """The session archived (never a chat's live one) and titled before its first
    message is stored."""
    s = c.session
    try:
        info = await manager.load_info(s.id)
    except NotFound:
        info = SessionInfo(id=s.id, agent_id=s.agent_id, user_id=s.user_id, channel=s.channel)
    if info.archived and info.title:
        return
    title = f"{'Telegram' if c.chat.key.startswith('telegram:') else 'ChatGPT'}: {c.chat.title}"
    await manager.save_info(
        SessionInfo(
            id=s.id,
            agent_id=s.agent_id,
            user_id=s.user_id,
            channel=s.channel,
            title=info.title or title,
            archived=True,
        )
    )
