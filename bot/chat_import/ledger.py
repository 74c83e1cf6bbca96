"""The `chat_imports` table (revision `bot_0007`): how far each imported source
conversation got, written in the transaction that stores each batch of its messages
(an `AppendHook`), so it never says more or less than what committed."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.append_hook import AppendHook
from memory.contract.errors import Conflict
from memory.contract.types import Session, utcnow
from memory.storage import forgetting as fg
from memory.storage.db import conflict_insert
from memory.storage.forgetting import Owner

# The channel of every imported session (`default:import:42:telegram:7`): the ledger's
# sessions are named by it, and the importer makes them.
CHANNEL = "import"

_meta = sa.MetaData()
chat_imports = sa.Table(
    "chat_imports",
    _meta,
    sa.Column("session_id", sa.String(255), primary_key=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=False),
    sa.Column("source", sa.String(255), nullable=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("last_key", sa.String(255), nullable=False),
    sa.Column("messages", sa.BigInteger, nullable=False),
    sa.Column("compacted", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class Progress:
    """The last source message stored of one conversation, and how many were."""

    last_seq: int = -1
    last_key: str = ""
    messages: int = 0


async def progress_of(engine: AsyncEngine, user_id: int, agent_id: str) -> dict[str, Progress]:
    """Every imported conversation of (`user_id`, `agent_id`): session id -> progress."""
    t = chat_imports
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(t.c.session_id, t.c.last_seq, t.c.last_key, t.c.messages).where(
                t.c.user_id == user_id, t.c.agent_id == agent_id
            )
        )
        return {sid: Progress(int(s), k, int(n)) for sid, s, k, n in rows}


class ImportConflict(Conflict):
    """Another import of the same conversation moved its row meanwhile."""


def recorder(
    session: Session, source: str, expected_seq: int, last: tuple[int, str], count: int
) -> AppendHook:
    """The hook that moves `session`'s row from `expected_seq` past a batch of `count`
    messages ending at `last` (seq, key), in the batch's transaction. The append holds
    the session's lock, so a row found elsewhere than `expected_seq` means another
    import stored this batch meanwhile: ImportConflict rolls this one back."""
    last_seq, last_key = last

    async def write(conn: AsyncConnection) -> None:
        seq = await conn.scalar(
            sa.select(chat_imports.c.last_seq).where(chat_imports.c.session_id == session.id)
        )
        if (-1 if seq is None else int(seq)) != expected_seq:
            raise ImportConflict(
                "another import of this conversation ran meanwhile; run the import again"
            )
        now = utcnow()
        insert = conflict_insert(conn, chat_imports).values(
            session_id=session.id,
            user_id=session.user_id,
            agent_id=session.agent_id,
            source=source,
            last_seq=last_seq,
            last_key=last_key,
            messages=count,
            compacted=False,
            updated_at=now,
        )
        await conn.execute(
            insert.on_conflict_do_update(
                index_elements=[chat_imports.c.session_id],
                set_={
                    "last_seq": last_seq,
                    "last_key": last_key,
                    "messages": chat_imports.c.messages + count,
                    "compacted": False,
                    "updated_at": now,
                },
            )
        )

    return AppendHook(write)


async def uncompacted(engine: AsyncEngine, limit: int = 100) -> list[Session]:
    """Imported sessions the background compaction has not seen since their import."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(chat_imports.c.session_id, chat_imports.c.agent_id, chat_imports.c.user_id)
            .where(chat_imports.c.compacted.is_(False))
            .order_by(chat_imports.c.updated_at)
            .limit(limit)
        )
        return [Session(sid, agent, user, CHANNEL) for sid, agent, user in rows]


async def mark_compacted(engine: AsyncEngine, session_id: str) -> None:
    from memory.storage.db import write_transaction

    async with write_transaction(engine) as conn:
        await conn.execute(
            chat_imports.update()
            .where(chat_imports.c.session_id == session_id)
            .values(compacted=True)
        )


async def erase_imports(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    """An erasure deletes the owner's import records with their sessions: a later
    import of the same export then starts afresh."""
    result = await conn.execute(
        chat_imports.delete().where(
            chat_imports.c.user_id == owner.user_id, chat_imports.c.agent_id == owner.agent_id
        )
    )
    return {"chat import record(s)": int(result.rowcount or 0)}


def register() -> None:
    fg.on_erase("chat_imports", erase_imports)
