"""Export and import of one session, lossless (`mnemo memory export|import`).

The JSON document holds every stored row of the session, as stored: the conversation,
its messages with their parts (tool calls, tool results, reasoning) and token counts,
the session's snapshot, the memory of its (user, agent) (profile, soul, constraints,
version and the whole changelog), and the provider's own data (`Exporter`: lcm's
summary DAG and context items, simple's markers and its user's notes file). Database
ids are left out (messages are referred to by seq), so export -> import into another
database -> export gives the same document.

Import is one transaction: a session that already exists is refused and nothing is
written; the (user, agent) memory is written only when the target has none for them
(an existing one is kept and the report says so: two sessions of one user carry the
same memory, and we never overwrite memory with an older copy). Provider data kept
outside the database (simple's notes) is staged during the transaction and put in
place only after the commit (`memory.maintenance.StagedFiles`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.db import lock_for_transaction, write_transaction
from memory.display import terminal_safe
from memory.errors import Conflict, InvalidArgument, NotFound
from memory.history import conversations, messages, parts
from memory.maintenance import Exporter, StagedFiles, parse_timestamp
from memory.stores import changelog_table, snapshot_table, state_table
from memory.tracing import unwrap
from memory.types import iso_utc

FORMAT = "mnemo.session-export"
VERSION = 1

_CHANGELOG_FIELDS = ("session_id", "scope", "action", "source", "version_before",
                     "version_after", "before_text", "after_text", "created_at")


def _exporter(provider: Any) -> Exporter | None:
    inner = unwrap(provider) if provider is not None else None
    return inner if isinstance(inner, Exporter) else None


# --- export ---------------------------------------------------------------------------


async def export_session(engine: AsyncEngine, session_id: str, provider: Any = None) -> dict[str, Any]:
    """The session as a JSON-ready document. Raises NotFound for an unknown session."""
    async with engine.connect() as conn:
        conv = (await conn.execute(
            sa.select(conversations).where(conversations.c.session_id == session_id)
        )).mappings().first()
        if conv is None:
            raise NotFound(f"session {session_id!r} not found")
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "session": {
                "id": conv["session_id"], "agent_id": conv["agent_id"],
                "user_id": conv["user_id"], "channel": conv["channel"], "title": conv["title"],
                "archived": bool(conv["archived"]), "created_at": iso_utc(conv["created_at"]),
                "updated_at": iso_utc(conv["updated_at"]),
            },
            "messages": await _export_messages(conn, conv["id"]),
            "snapshot": await _export_snapshot(conn, session_id),
            "user_memory": await _export_user_memory(conn, conv["user_id"], conv["agent_id"]),
        }
    exporter = _exporter(provider)
    overlay = await exporter.export_overlay(session_id) if exporter is not None else None
    doc["provider"] = None if overlay is None else {"name": provider.name, "data": overlay}
    return doc


async def _export_messages(conn: AsyncConnection, conv_id: int) -> list[dict[str, Any]]:
    rows = (await conn.execute(
        sa.select(messages).where(messages.c.conversation_id == conv_id).order_by(messages.c.seq)
    )).mappings().all()
    part_rows = (await conn.execute(
        sa.select(parts, messages.c.seq)
        .join(messages, parts.c.message_id == messages.c.id)
        .where(messages.c.conversation_id == conv_id)
        .order_by(messages.c.seq, parts.c.ordinal)
    )).mappings().all()
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for p in part_rows:
        by_seq.setdefault(p["seq"], []).append({
            "ordinal": p["ordinal"], "kind": p["kind"], "tool_call_id": p["tool_call_id"],
            "tool_name": p["tool_name"], "content": p["content"],
        })
    return [
        {
            "seq": r["seq"], "role": r["role"], "content": r["content"],
            "token_count": r["token_count"], "created_at": iso_utc(r["created_at"]),
            "parts": by_seq.get(r["seq"], []),
        }
        for r in rows
    ]


async def _export_snapshot(conn: AsyncConnection, session_id: str) -> dict[str, Any] | None:
    row = (await conn.execute(
        sa.select(snapshot_table).where(snapshot_table.c.session_id == session_id)
    )).mappings().first()
    if row is None:
        return None
    return {"user_id": row["user_id"], "agent_id": row["agent_id"], "version": row["version"],
            "updated_at": iso_utc(row["updated_at"])}


async def _export_user_memory(conn: AsyncConnection, user_id: int, agent_id: str) -> dict[str, Any]:
    owner = sa.and_(state_table.c.user_id == user_id, state_table.c.agent_id == agent_id)
    state = (await conn.execute(sa.select(state_table).where(owner))).mappings().first()
    log_rows = (await conn.execute(
        sa.select(changelog_table)
        .where(changelog_table.c.user_id == user_id, changelog_table.c.agent_id == agent_id)
        .order_by(changelog_table.c.id)
    )).mappings().all()
    return {
        "state": None if state is None else {
            "profile": state["profile"], "soul": state["soul"],
            "constraints": state["constraints"], "version": state["version"],
            "updated_at": iso_utc(state["updated_at"]),
        },
        "changelog": [
            {k: (iso_utc(r[k]) if k == "created_at" else r[k]) for k in _CHANGELOG_FIELDS}
            for r in log_rows
        ],
    }


# --- validation -----------------------------------------------------------------------


class DocumentReader:
    """Typed access to an untrusted document; every error names the JSON path. Providers'
    import hooks (plugins/*/maintenance.py) read their sections with it too."""

    def __init__(self, obj: Any, path: str) -> None:
        if not isinstance(obj, dict):
            raise InvalidArgument(f"{path or 'document'}: expected an object")
        self.obj, self.path = obj, path

    def _get(self, key: str) -> Any:
        if key not in self.obj:
            raise InvalidArgument(f"{self.path}.{key}: missing")
        return self.obj[key]

    def _fail(self, key: str, expected: str) -> InvalidArgument:
        return InvalidArgument(f"{self.path}.{key}: expected {expected}, got {self.obj.get(key)!r:.60}")

    def text(self, key: str, *, optional: bool = False) -> str | None:
        value = self._get(key)
        if isinstance(value, str) or (optional and value is None):
            return value
        raise self._fail(key, "a string")

    def bounded(self, key: str, column: sa.Column[Any]) -> str:
        """A string that fits `column`'s VARCHAR(n). PostgreSQL refuses a longer one with
        a raw DataError and SQLite stores it whole, so the limit is checked here."""
        value = self.text(key)
        assert value is not None
        limit = getattr(column.type, "length", None)
        if limit is not None and len(value) > limit:
            raise InvalidArgument(
                f"{self.path}.{key}: {len(value)} characters, longer than the limit of {limit}"
            )
        return value

    def integer(self, key: str, *, optional: bool = False) -> int | None:
        value = self._get(key)
        if (isinstance(value, int) and not isinstance(value, bool)) or (optional and value is None):
            return value
        raise self._fail(key, "an integer")

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if isinstance(value, bool):
            return value
        raise self._fail(key, "true or false")

    def timestamp(self, key: str) -> datetime:
        return parse_timestamp(self._get(key), f"{self.path}.{key}")

    def items(self, key: str) -> list[Any]:
        value = self._get(key)
        if isinstance(value, list):
            return value
        raise self._fail(key, "a list")

    def child(self, key: str, *, optional: bool = False) -> DocumentReader | None:
        value = self._get(key)
        if optional and value is None:
            return None
        return DocumentReader(value, f"{self.path}.{key}")


def _check_header(doc: Any) -> DocumentReader:
    top = DocumentReader(doc, "")
    if doc.get("format") != FORMAT:
        raise InvalidArgument(f"not a mnemo session export (format is {doc.get('format')!r}, expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise InvalidArgument(f"export version {doc.get('version')!r} is not supported (this mnemo reads {VERSION})")
    return top


# --- import ---------------------------------------------------------------------------


@dataclass
class ImportReport:
    session_id: str
    messages: int = 0
    notes: list[str] = field(default_factory=list)


async def import_session(engine: AsyncEngine, doc: Any, provider: Any = None) -> ImportReport:
    """Write an exported session into `engine`'s database, all or nothing.

    Raises InvalidArgument for a malformed document (a string longer than its column
    included) or provider data the configured provider cannot take, Conflict when the
    session already exists.
    """
    top = _check_header(doc)
    session = top.child("session")
    assert session is not None
    session_id = session.bounded("id", conversations.c.session_id)
    if not session_id:
        raise InvalidArgument(".session.id: must not be empty")
    # Read (and so validate) every session field before the transaction starts.
    agent_id = session.bounded("agent_id", conversations.c.agent_id)
    user_id = session.integer("user_id")
    assert user_id is not None
    conv_values: dict[str, Any] = {
        "session_id": session_id, "agent_id": agent_id, "user_id": user_id,
        "channel": session.bounded("channel", conversations.c.channel),
        "title": session.bounded("title", conversations.c.title), "archived": session.flag("archived"),
        "created_at": session.timestamp("created_at"), "updated_at": session.timestamp("updated_at"),
    }
    overlay = top.child("provider", optional=True)
    exporter = _exporter(provider)
    if overlay is not None:
        name = overlay.text("name")
        if exporter is None or name != provider.name:
            configured = getattr(provider, "name", "none")
            raise InvalidArgument(
                f"the export carries {name!r} provider data but the configured provider is "
                f"{configured!r}; set memory.provider: {name} to import it"
            )
    report = ImportReport(session_id)
    staged: StagedFiles | None = None
    try:
        async with write_transaction(engine) as conn:
            await lock_for_transaction(conn, f"session:{session_id}")
            exists = await conn.scalar(
                sa.select(conversations.c.id).where(conversations.c.session_id == session_id)
            )
            if exists is not None:
                raise Conflict(f"session {session_id!r} already exists; nothing was imported")
            conv_id = await conn.scalar(
                sa.insert(conversations).values(**conv_values).returning(conversations.c.id)
            )
            ids = await _import_messages(conn, conv_id, top.items("messages"))
            report.messages = len(ids)
            await _import_snapshot(conn, session_id, top.child("snapshot", optional=True))
            memory = top.child("user_memory")
            assert memory is not None
            note = await _import_user_memory(conn, user_id, agent_id, memory)
            if note:
                report.notes.append(note)
            if overlay is not None and exporter is not None:
                data = overlay.obj.get("data")
                if not isinstance(data, dict):
                    raise InvalidArgument(".provider.data: expected an object")
                staged = await exporter.import_overlay(conn, conv_id, data, ids)
    except BaseException:
        # Rolled back, or the commit failed: the provider's staged files go as well.
        if staged is not None:
            staged.discard()
        raise
    if staged is not None:
        # Only after the commit, so a failed import leaves no files. A failure (or a
        # crash) between the commit and this rename leaves the session imported without
        # the provider's files; the provider's error names them, to move by hand.
        await asyncio.to_thread(staged.publish)
    return report


async def _import_messages(conn: AsyncConnection, conv_id: int, items: list[Any]) -> dict[int, int]:
    ids: dict[int, int] = {}
    for i, item in enumerate(items):
        m = DocumentReader(item, f".messages[{i}]")
        seq = m.integer("seq")
        assert seq is not None
        if seq in ids:
            raise InvalidArgument(f".messages[{i}].seq: {seq} appears twice")
        msg_id = await conn.scalar(
            sa.insert(messages).values(
                conversation_id=conv_id, seq=seq, role=m.bounded("role", messages.c.role),
                content=m.text("content"),
                token_count=m.integer("token_count"), created_at=m.timestamp("created_at"),
            ).returning(messages.c.id)
        )
        ids[seq] = msg_id
        rows = []
        for j, raw in enumerate(m.items("parts")):
            p = DocumentReader(raw, f".messages[{i}].parts[{j}]")
            rows.append({
                "message_id": msg_id, "ordinal": p.integer("ordinal"),
                "kind": p.bounded("kind", parts.c.kind),
                "tool_call_id": p.text("tool_call_id", optional=True),
                "tool_name": p.text("tool_name", optional=True), "content": p.text("content"),
            })
        if rows:
            await conn.execute(sa.insert(parts), rows)
    return ids


async def _import_snapshot(conn: AsyncConnection, session_id: str, snap: DocumentReader | None) -> None:
    if snap is None:
        return
    taken = await conn.scalar(
        sa.select(snapshot_table.c.session_id).where(snapshot_table.c.session_id == session_id)
    )
    if taken is not None:
        raise Conflict(f"session {session_id!r} already has a memory snapshot; nothing was imported")
    await conn.execute(sa.insert(snapshot_table).values(
        session_id=session_id, user_id=snap.integer("user_id"),
        agent_id=snap.bounded("agent_id", snapshot_table.c.agent_id),
        version=snap.integer("version"), updated_at=snap.timestamp("updated_at"),
    ))


async def _import_user_memory(conn: AsyncConnection, user_id: int, agent_id: str, memory: DocumentReader) -> str:
    state = memory.child("state", optional=True)
    changelog = memory.items("changelog")
    if state is None and not changelog:
        return ""
    existing = await conn.scalar(
        sa.select(state_table.c.version)
        .where(state_table.c.user_id == user_id, state_table.c.agent_id == agent_id)
    )
    has_log = await conn.scalar(
        sa.select(changelog_table.c.id)
        .where(changelog_table.c.user_id == user_id, changelog_table.c.agent_id == agent_id)
        .limit(1)
    )
    if existing is not None or has_log is not None:
        return (f"kept the existing memory of user {user_id} agent {agent_id!r} "
                f"(version {existing or 0}); the export's copy was not imported")
    if state is not None:
        await conn.execute(sa.insert(state_table).values(
            user_id=user_id, agent_id=agent_id, profile=state.text("profile"),
            soul=state.text("soul"), constraints=state.text("constraints"),
            version=state.integer("version"), updated_at=state.timestamp("updated_at"),
        ))
    rows = []
    for i, raw in enumerate(changelog):
        c = DocumentReader(raw, f".user_memory.changelog[{i}]")
        rows.append({
            "user_id": user_id, "agent_id": agent_id,
            "session_id": c.bounded("session_id", changelog_table.c.session_id),
            "scope": c.bounded("scope", changelog_table.c.scope),
            "action": c.bounded("action", changelog_table.c.action),
            "source": c.bounded("source", changelog_table.c.source),
            "version_before": c.integer("version_before", optional=True),
            "version_after": c.integer("version_after", optional=True),
            "before_text": c.text("before_text"), "after_text": c.text("after_text"),
            "created_at": c.timestamp("created_at"),
        })
    # One row at a time keeps ids in export order (executemany order is not promised).
    for row in rows:
        await conn.execute(sa.insert(changelog_table).values(**row))
    return ""


# --- Markdown -------------------------------------------------------------------------


def render_markdown(doc: dict[str, Any], provider: Any = None) -> str:
    """A readable rendering of an export document (JSON stays the lossless format). For
    display: control and bidi characters are shown as escapes (`memory.display`), and
    the one-line fields (ids, title) keep to their line."""
    s = doc["session"]
    one = terminal_safe  # a one-line field
    out = [
        f"# Session `{one(s['id'])}`",
        "",
        f"- agent: `{one(s['agent_id'])}`, user: `{s['user_id']}`, channel: `{one(s['channel'])}`",
        f"- title: {one(s['title'] or '') or '(none)'}",
        f"- created: {s['created_at']}, last active: {s['updated_at']}"
        + (", archived" if s["archived"] else ""),
        "",
        f"## Messages ({len(doc['messages'])})",
    ]
    for m in doc["messages"]:
        out += ["", f"### #{m['seq']} · {m['role']} · {m['created_at']} · {m['token_count']} tokens", ""]
        if m["content"]:
            out.append(m["content"])
        for p in m["parts"]:
            if p["kind"] == "reasoning":
                out += ["", "> reasoning: " + p["content"].replace("\n", "\n> ")]
            elif p["kind"] == "tool_call":
                out += ["", f"tool call `{p['tool_name']}` (id `{p['tool_call_id']}`):", "",
                        "```json", p["content"], "```"]
            elif p["kind"] == "tool_result":
                out += ["", f"(result of tool call `{p['tool_call_id']}`, `{p['tool_name']}`)"]
    mem = doc["user_memory"]
    state = mem["state"]
    if state is not None or mem["changelog"]:
        out += ["", f"## Memory of user `{s['user_id']}` (version {state['version'] if state else 0})"]
        if state is not None:
            constraints = json.loads(state["constraints"] or "[]")
            out += ["", "### Profile", "", state["profile"] or "(empty)",
                    "", "### Soul", "", state["soul"] or "(empty)", "", "### Constraints", ""]
            out += [f"- `{c.get('id')}` {c.get('text')}" for c in constraints] or ["(none)"]
        if mem["changelog"]:
            out += ["", "### Changelog", "", "| versions | scope | action | source | session | at |",
                    "| --- | --- | --- | --- | --- | --- |"]
            out += [
                f"| {c['version_before']} -> {c['version_after']} | {c['scope']} | {c['action']} "
                f"| {c['source']} | {c['session_id']} | {c['created_at']} |"
                for c in mem["changelog"]
            ]
    overlay = doc.get("provider")
    if overlay is not None:
        out += ["", f"## Provider data ({overlay['name']})", ""]
        exporter = _exporter(provider)
        if exporter is not None and getattr(provider, "name", None) == overlay["name"]:
            out.append(exporter.overlay_markdown(overlay["data"]).rstrip())
        else:
            out += ["```json", json.dumps(overlay["data"], indent=2, ensure_ascii=False), "```"]
    return terminal_safe("\n".join(out), multiline=True) + "\n"
