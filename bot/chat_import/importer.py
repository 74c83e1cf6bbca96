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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.chat_import import ledger, sandbox, scan
from bot.chat_import.chatgpt_export import ChatGPTExport
from bot.chat_import.ledger import CHANNEL
from bot.chat_import.limits import Limits
from bot.chat_import.refused import ImportRefused
from bot.chat_import.scan import ChatPlan, Plan, import_session
from bot.chat_import.sources import ExportFormat, SourceChat, SourceItem
from bot.chat_import.telegram_export import TelegramExport
from memory.contract.capabilities import Provider, SessionManager
from memory.contract.errors import NotFound
from memory.contract.options import AppendOptions, append_messages
from memory.contract.tracing import unwrap
from memory.contract.types import Message, Session, SessionInfo
from memory.storage.db import write_transaction

__all__ = ["BATCH", "CHANNEL", "FORMATS", "ChatPlan", "Plan", "Report", "import_session"]

BATCH = 500  # messages per transaction: few commits, short locks
FORMATS: dict[str, ExportFormat] = {f.name: f for f in (TelegramExport(), ChatGPTExport())}


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


@dataclass
class Report:
    messages: int = 0
    sessions: list[Session] = field(default_factory=list)


OnProgress = Callable[[int], Any]


async def run(
    provider: Provider,
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
    items = scan.items(replace(p, limits=replace(p.limits, seconds=None)))
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
