"""The message ids inside fact changelog rows, out of and back into a database.

A fact changelog row's before and after (memory/facts/revert.py: JSON lists of facts)
name each fact's evidence by message id, the database's own. A revert reads them (a
restatement's revert unlinks what the row shows it added), so a row copied into another
database as is would name that database's unrelated messages. An export writes each id
as the message's {"session_id", "seq"}, as a fact's own evidence is written, and an
import resolves them through the same (session, seq) -> id map as the messages it wrote:
an id whose message is gone (forgotten) is left out of the export, and a reference that
resolves to nothing here (a conversation not imported, or a bare id from an export made
before this) is left out of the row. Export -> import -> export gives the same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import Scope
from memory.storage.history import conversations, messages

_CHUNK = 500
Ref = tuple[str, int]  # (session id, seq)


def _lists(text: str) -> list[Any] | None:
    """A fact row's JSON list, or None for the content-free row (a forget's) or a text
    that is not one (left as it is: a revert names it corrupt)."""
    if not text.strip():
        return None
    try:
        items = json.loads(text)
    except ValueError:
        return None
    return items if isinstance(items, list) else None


def _rewrite(text: str, each: Callable[[Any], Any | None]) -> str:
    items = _lists(text)
    if items is None:
        return text
    for item in items:
        if isinstance(item, dict) and "evidence" in item:
            cited = item["evidence"] if isinstance(item["evidence"], list) else []
            item["evidence"] = [m for m in map(each, cited) if m is not None]
    # As the store writes them (memory/facts/store.py), so a round trip is byte-equal.
    return json.dumps(items, ensure_ascii=False)


def _cited(text: str) -> list[Any]:
    items = _lists(text) or []
    return [
        m
        for item in items
        if isinstance(item, dict) and isinstance(item.get("evidence"), list)
        for m in item["evidence"]
    ]


def is_fact_row(row: dict[str, Any]) -> bool:
    return row.get("scope") == Scope.FACT.value


async def export_rows(
    conn: AsyncConnection, user_id: int, agent_id: str, rows: list[dict[str, Any]]
) -> None:
    """`rows` (exported changelog rows, changed in place) with their fact evidence ids
    written as (session, seq) references."""
    facts_rows = [r for r in rows if is_fact_row(r)]
    ids = sorted(
        {
            m
            for r in facts_rows
            for k in ("before_text", "after_text")
            for m in _cited(r[k])
            if isinstance(m, int) and not isinstance(m, bool)
        }
    )
    refs: dict[int, dict[str, Any]] = {}
    for i in range(0, len(ids), _CHUNK):
        found = await conn.execute(
            sa.select(messages.c.id, conversations.c.session_id, messages.c.seq)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(
                conversations.c.user_id == user_id,
                conversations.c.agent_id == agent_id,
                messages.c.id.in_(ids[i : i + _CHUNK]),
            )
        )
        refs.update((int(m), {"session_id": s, "seq": int(q)}) for m, s, q in found)
    for r in facts_rows:
        for k in ("before_text", "after_text"):
            r[k] = _rewrite(r[k], lambda m: refs.get(m) if isinstance(m, int) else None)


def _ref(m: Any) -> Ref | None:
    if not isinstance(m, dict) or set(m) != {"session_id", "seq"}:
        return None
    sid, seq = m["session_id"], m["seq"]
    if not isinstance(sid, str) or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return (sid, seq)


async def message_ids(
    conn: AsyncConnection, user_id: int, agent_id: str, refs: set[Ref]
) -> dict[Ref, int]:
    """The ids here of the owner's messages `refs` name; those not here are left out."""
    out: dict[Ref, int] = {}
    for sid in sorted({s for s, _ in refs}):
        seqs = sorted(q for s, q in refs if s == sid)
        for i in range(0, len(seqs), _CHUNK):
            found = await conn.execute(
                sa.select(messages.c.seq, messages.c.id)
                .join(conversations, conversations.c.id == messages.c.conversation_id)
                .where(
                    conversations.c.session_id == sid,
                    conversations.c.user_id == user_id,
                    conversations.c.agent_id == agent_id,
                    messages.c.seq.in_(seqs[i : i + _CHUNK]),
                )
            )
            out.update(((sid, int(q)), int(m)) for q, m in found)
    return out


async def import_texts(
    conn: AsyncConnection, user_id: int, agent_id: str, before: str, after: str
) -> tuple[str, str, int]:
    """A fact row's (before, after) with references resolved to this database's ids;
    how many resolved to nothing (left out)."""
    cited = [_ref(m) for text in (before, after) for m in _cited(text)]
    ids = await message_ids(conn, user_id, agent_id, {r for r in cited if r is not None})
    missing = sum(1 for r in cited if r is None or r not in ids)

    def each(m: Any) -> int | None:
        ref = _ref(m)
        return None if ref is None else ids.get(ref)

    return _rewrite(before, each), _rewrite(after, each), missing


def rename_sessions(memory: Any, renames: dict[str, str]) -> Any:
    """An export's memory section with its references to the sessions `renames` moves
    (an import into another person's memory renames their sessions): the facts'
    evidence and the fact changelog rows'. Anything malformed is left to the check."""
    if not renames or not isinstance(memory, dict):
        return memory

    def moved(ref: Any) -> Any:
        if isinstance(ref, dict) and ref.get("session_id") in renames:
            return {**ref, "session_id": renames[ref["session_id"]]}
        return ref

    out = dict(memory)
    if isinstance(memory.get("facts"), list):
        out["facts"] = [
            {**f, "evidence": [moved(r) for r in f["evidence"]]}
            if isinstance(f, dict) and isinstance(f.get("evidence"), list)
            else f
            for f in memory["facts"]
        ]
    if isinstance(memory.get("changelog"), list):
        out["changelog"] = [
            {
                **row,
                **{
                    k: _rewrite(row[k], moved)
                    for k in ("before_text", "after_text")
                    if isinstance(row.get(k), str)
                },
            }
            if isinstance(row, dict) and is_fact_row(row)
            else row
            for row in memory["changelog"]
        ]
    return out
