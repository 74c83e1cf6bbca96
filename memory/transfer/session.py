"""Export and import of one session, lossless (`mnemo memory export|import`).

The JSON document holds every stored row of the session, as stored: the conversation,
its messages with their parts (tool calls, tool results, reasoning), token counts and
origins (where a channel received them; the key only for a message that has one),
the session's snapshot, the memory of its (user, agent) (profile, soul, constraints,
version and the whole changelog), and the provider's own data (`Exporter`: lcm's
summary DAG and context items, simple's markers and its user's notes file). Database
ids are left out (messages are referred to by seq; inside fact changelog rows too:
memory.transfer.fact_refs), so export -> import into another database -> export gives
the same document.

Import checks the whole document first (`memory.transfer.schema`), then writes it in one
transaction: a session that already exists is refused and nothing is
written; the (user, agent) memory is written only when the target has none for them
(an existing one is kept and the report says so: two sessions of one user carry the
same memory, and we never overwrite memory with an older copy). Provider data kept
outside the database (simple's notes) is staged during the transaction and put in
place only after the commit (`memory.contract.maintenance.StagedFiles`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.errors import Conflict, InvalidArgument, NotFound
from memory.contract.maintenance import Exporter, StagedFiles
from memory.contract.tracing import unwrap
from memory.contract.types import Owner, as_utc, iso_utc
from memory.facts.models import SUPPORT, evidence, facts
from memory.followups import store as followup_store
from memory.storage.db import lock_for_transaction, write_transaction
from memory.storage.history import conversations, messages, origins, parts
from memory.storage.stores import changelog_table, snapshot_table, state_table
from memory.text.display import terminal_safe
from memory.transfer import fact_refs
from memory.transfer.schema import (
    FORMAT,
    VERSION,
    FactRecord,
    MessageRecord,
    SessionDocument,
    SnapshotRecord,
    UserMemory,
    validate_document,
)

if TYPE_CHECKING:
    from memory.contract.capabilities import Provider

_FACT_FIELDS = (
    "id",
    "key",
    "value",
    "state",
    "valid_from",
    "valid_to",
    "version_from",
    "version_to",
    "source",
    "session_id",
    "replaced_by",
    "created_at",
)
_CHANGELOG_FIELDS = (
    "session_id",
    "scope",
    "action",
    "source",
    "version_before",
    "version_after",
    "before_text",
    "after_text",
    "created_at",
)


def _exporter(provider: Provider | None) -> Exporter | None:
    inner = unwrap(provider) if provider is not None else None
    return inner if isinstance(inner, Exporter) else None


# --- export ---------------------------------------------------------------------------


async def export_session(
    engine: AsyncEngine, session_id: str, provider: Provider | None = None
) -> dict[str, Any]:
    """The session as a JSON-ready document. Raises NotFound for an unknown session."""
    async with engine.connect() as conn:
        conv = (
            (
                await conn.execute(
                    sa.select(conversations).where(conversations.c.session_id == session_id)
                )
            )
            .mappings()
            .first()
        )
        if conv is None:
            raise NotFound(f"session {session_id!r} not found")
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "session": {
                "id": conv["session_id"],
                "agent_id": conv["agent_id"],
                "user_id": conv["user_id"],
                "channel": conv["channel"],
                "title": conv["title"],
                "archived": bool(conv["archived"]),
                "created_at": iso_utc(conv["created_at"]),
                "updated_at": iso_utc(conv["updated_at"]),
            },
            "messages": await _export_messages(conn, conv["id"]),
            "snapshot": await _export_snapshot(conn, session_id),
            "user_memory": await export_user_memory(conn, conv["user_id"], conv["agent_id"]),
        }
        seqs = {
            int(i): int(q)
            for i, q in await conn.execute(
                sa.select(messages.c.id, messages.c.seq).where(
                    messages.c.conversation_id == conv["id"]
                )
            )
        }
        made = await followup_store.export_session(
            conn, session_id, conv["user_id"], conv["agent_id"], seqs
        )
        if made is not None:  # the key only where there are follow-ups (older documents)
            doc["followups"] = made
    exporter = _exporter(provider)
    overlay = await exporter.export_overlay(session_id) if exporter is not None else None
    # (an overlay comes only from a provider's exporter)
    if overlay is None or provider is None:
        doc["provider"] = None
    else:
        doc["provider"] = {"name": provider.name, "data": overlay}
    return doc


async def _export_messages(conn: AsyncConnection, conv_id: int) -> list[dict[str, Any]]:
    rows = (
        (
            await conn.execute(
                sa.select(messages)
                .where(messages.c.conversation_id == conv_id)
                .order_by(messages.c.seq)
            )
        )
        .mappings()
        .all()
    )
    part_rows = (
        (
            await conn.execute(
                sa.select(parts, messages.c.seq)
                .join(messages, parts.c.message_id == messages.c.id)
                .where(messages.c.conversation_id == conv_id)
                .order_by(messages.c.seq, parts.c.ordinal)
            )
        )
        .mappings()
        .all()
    )
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for p in part_rows:
        by_seq.setdefault(p["seq"], []).append(
            {
                "ordinal": p["ordinal"],
                "kind": p["kind"],
                "tool_call_id": p["tool_call_id"],
                "tool_name": p["tool_name"],
                "content": p["content"],
            }
        )
    origin_rows = (
        (
            await conn.execute(
                sa.select(origins, messages.c.seq)
                .join(messages, origins.c.message_id == messages.c.id)
                .where(messages.c.conversation_id == conv_id)
            )
        )
        .mappings()
        .all()
    )
    where = {
        o["seq"]: {
            "channel": o["channel"],
            "chat_id": o["chat_id"],
            "message_id": o["channel_message_id"],
            "thread_id": o["thread_id"],
            **({"sender_id": o["sender_id"]} if o["sender_id"] is not None else {}),
        }
        for o in origin_rows
    }
    return [
        {
            "seq": r["seq"],
            "role": r["role"],
            "content": r["content"],
            "token_count": r["token_count"],
            "created_at": iso_utc(r["created_at"]),
            "parts": by_seq.get(r["seq"], []),
            **({"origin": where[r["seq"]]} if r["seq"] in where else {}),
        }
        for r in rows
    ]


async def _export_snapshot(conn: AsyncConnection, session_id: str) -> dict[str, Any] | None:
    row = (
        (
            await conn.execute(
                sa.select(snapshot_table).where(snapshot_table.c.session_id == session_id)
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    return {
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "version": row["version"],
        "updated_at": iso_utc(row["updated_at"]),
    }


async def export_user_memory(conn: AsyncConnection, user_id: int, agent_id: str) -> dict[str, Any]:
    owner = sa.and_(state_table.c.user_id == user_id, state_table.c.agent_id == agent_id)
    state = (await conn.execute(sa.select(state_table).where(owner))).mappings().first()
    log_rows = (
        (
            await conn.execute(
                sa.select(changelog_table)
                .where(changelog_table.c.user_id == user_id, changelog_table.c.agent_id == agent_id)
                .order_by(changelog_table.c.id)
            )
        )
        .mappings()
        .all()
    )
    log = [
        {k: (iso_utc(r[k]) if k == "created_at" else r[k]) for k in _CHANGELOG_FIELDS}
        for r in log_rows
    ]
    await fact_refs.export_rows(conn, user_id, agent_id, log)
    return {
        "state": None
        if state is None
        else {
            "profile": state["profile"],
            "soul": state["soul"],
            "constraints": state["constraints"],
            "version": state["version"],
            "updated_at": iso_utc(state["updated_at"]),
        },
        "changelog": log,
        "facts": await _export_facts(conn, user_id, agent_id),
    }


async def _export_facts(conn: AsyncConnection, user_id: int, agent_id: str) -> list[dict[str, Any]]:
    """Every fact of the memory in any state, with its evidence by (session, seq)."""
    rows = (
        (
            await conn.execute(
                sa.select(facts)
                .where(facts.c.user_id == user_id, facts.c.agent_id == agent_id)
                .order_by(facts.c.created_at, facts.c.id)
            )
        )
        .mappings()
        .all()
    )
    refs: dict[str, list[dict[str, Any]]] = {}
    cited = await conn.execute(
        sa.select(evidence.c.fact_id, conversations.c.session_id, messages.c.seq, evidence.c.role)
        .join(messages, messages.c.id == evidence.c.message_id)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .join(facts, facts.c.id == evidence.c.fact_id)
        .where(facts.c.user_id == user_id, facts.c.agent_id == agent_id)
        .order_by(evidence.c.fact_id, conversations.c.session_id, messages.c.seq)
    )
    for fact_id, session_id, seq, role in cited:
        # The role only when it is not the default: exports made before it read the same.
        extra = {} if role == SUPPORT else {"role": role}
        refs.setdefault(fact_id, []).append({"session_id": session_id, "seq": seq, **extra})
    out = []
    for r in rows:
        item: dict[str, Any] = {k: r[k] for k in _FACT_FIELDS}
        for k in ("valid_from", "valid_to", "created_at"):
            item[k] = iso_utc(as_utc(r[k]))
        item["evidence"] = refs.get(r["id"], [])
        out.append(item)
    return out


# --- validation -----------------------------------------------------------------------


class DocumentReader:
    """Typed access to an untrusted object; every error names the JSON path. Providers'
    import hooks (plugins/*/maintenance.py) read their sections with it (the document
    itself is checked whole by `memory.transfer.schema` before the import writes)."""

    def __init__(self, obj: Any, path: str) -> None:
        if not isinstance(obj, dict):
            raise InvalidArgument(f"{path or 'document'}: expected an object")
        self.obj, self.path = obj, path

    def _get(self, key: str) -> Any:
        if key not in self.obj:
            raise InvalidArgument(f"{self.path}.{key}: missing")
        return self.obj[key]

    def text(self, key: str, *, optional: bool = False) -> str | None:
        value = self._get(key)
        if isinstance(value, str) or (optional and value is None):
            return value
        raise InvalidArgument(f"{self.path}.{key}: expected a string")

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


# --- import ---------------------------------------------------------------------------


@dataclass
class ImportReport:
    session_id: str
    messages: int = 0
    notes: list[str] = field(default_factory=list)
    followups: int = 0


async def import_session(
    engine: AsyncEngine, doc: Any, provider: Provider | None = None
) -> ImportReport:
    """Write an exported session into `engine`'s database, all or nothing.

    The document is checked whole first (`memory.transfer.schema`, the provider's data by
    the provider's schema): InvalidArgument naming the first problem, before any write.
    Conflict when the session already exists.
    """
    checked = validate_document(doc, provider)
    staged: list[StagedFiles] = []
    try:
        async with write_transaction(engine) as conn:
            report = await write_session(conn, checked, provider, staged)
    except BaseException:
        # Rolled back, or the commit failed: the provider's staged files go as well.
        for files in staged:
            files.discard()
        raise
    await publish(staged)
    return report


async def publish(staged: list[StagedFiles]) -> None:
    """Only after the commit, so a failed import leaves no files. A failure (or a crash)
    between the commit and this rename leaves the session imported without the
    provider's files; the provider's error names them, to move by hand."""
    for files in staged:
        await asyncio.to_thread(files.publish)


async def write_session(
    conn: AsyncConnection,
    checked: SessionDocument,
    provider: Provider | None,
    staged: list[StagedFiles],
) -> ImportReport:
    """Write one checked session inside the caller's transaction (`import_session`, and
    a whole memory export, `memory.transfer.memory_export`). Conflict when the session
    exists; the provider's files outside the database are appended to `staged`, for the
    caller to publish after its commit (or discard)."""
    exporter = _exporter(provider)
    s = checked.session
    report = ImportReport(s.id)
    await lock_for_transaction(conn, f"session:{s.id}")
    exists = await conn.scalar(
        sa.select(conversations.c.id).where(conversations.c.session_id == s.id)
    )
    if exists is not None:
        raise Conflict(f"session {s.id!r} already exists; nothing was imported")
    conv_id = await conn.scalar(
        sa.insert(conversations)
        .values(
            session_id=s.id,
            agent_id=s.agent_id,
            user_id=s.user_id,
            channel=s.channel,
            title=s.title,
            archived=s.archived,
            created_at=s.created_at,
            updated_at=s.updated_at,
        )
        .returning(conversations.c.id)
    )
    ids = await _import_messages(conn, conv_id, checked.messages)
    report.messages = len(ids)
    await _import_snapshot(conn, s.id, checked.snapshot)
    kept, notes = await import_user_memory(conn, s.user_id, s.agent_id, checked.user_memory)
    report.notes += [kept, *notes] if kept else notes
    if checked.followups is not None:
        report.followups = await followup_store.import_session(
            conn, s.id, Owner(s.user_id, s.agent_id), checked.followups, ids
        )
    if checked.provider is not None and exporter is not None:
        files = await exporter.import_overlay(conn, conv_id, checked.provider.data, ids)
        if files is not None:
            staged.append(files)
    return report


async def _import_messages(
    conn: AsyncConnection, conv_id: int, items: list[MessageRecord]
) -> dict[int, int]:
    ids: dict[int, int] = {}
    for m in items:
        msg_id = await conn.scalar(
            sa.insert(messages)
            .values(
                conversation_id=conv_id,
                seq=m.seq,
                role=m.role,
                content=m.content,
                token_count=m.token_count,
                created_at=m.created_at,
            )
            .returning(messages.c.id)
        )
        ids[m.seq] = msg_id
        if m.parts:
            await conn.execute(
                sa.insert(parts),
                [
                    {
                        "message_id": msg_id,
                        "ordinal": p.ordinal,
                        "kind": p.kind,
                        "tool_call_id": p.tool_call_id,
                        "tool_name": p.tool_name,
                        "content": p.content,
                    }
                    for p in m.parts
                ],
            )
        if m.origin is not None:
            await conn.execute(
                sa.insert(origins).values(
                    message_id=msg_id,
                    channel=m.origin.channel,
                    chat_id=m.origin.chat_id,
                    channel_message_id=m.origin.message_id,
                    thread_id=m.origin.thread_id,
                    sender_id=m.origin.sender_id,
                )
            )
    return ids


async def _import_snapshot(
    conn: AsyncConnection, session_id: str, snap: SnapshotRecord | None
) -> None:
    if snap is None:
        return
    taken = await conn.scalar(
        sa.select(snapshot_table.c.session_id).where(snapshot_table.c.session_id == session_id)
    )
    if taken is not None:
        raise Conflict(
            f"session {session_id!r} already has a memory snapshot; nothing was imported"
        )
    await conn.execute(
        sa.insert(snapshot_table).values(
            session_id=session_id,
            user_id=snap.user_id,
            agent_id=snap.agent_id,
            version=snap.version,
            updated_at=snap.updated_at,
        )
    )


async def import_user_memory(
    conn: AsyncConnection, user_id: int, agent_id: str, memory: UserMemory
) -> tuple[str, list[str]]:
    """(why the export's memory was not written, else ""; notes on what it lacks)."""
    state = memory.state
    if state is None and not memory.changelog:
        return "", []
    existing = await conn.scalar(
        sa.select(state_table.c.version).where(
            state_table.c.user_id == user_id, state_table.c.agent_id == agent_id
        )
    )
    has_log = await conn.scalar(
        sa.select(changelog_table.c.id)
        .where(changelog_table.c.user_id == user_id, changelog_table.c.agent_id == agent_id)
        .limit(1)
    )
    if existing is not None or has_log is not None:
        return (
            f"kept the existing memory of user {user_id} agent {agent_id!r} "
            f"(version {existing or 0}); the export's copy was not imported"
        ), []
    if state is not None:
        await conn.execute(
            sa.insert(state_table).values(
                user_id=user_id,
                agent_id=agent_id,
                profile=state.profile,
                soul=state.soul,
                constraints=state.constraints,
                version=state.version,
                updated_at=state.updated_at,
            )
        )
    # One row at a time keeps ids in export order (executemany order is not promised).
    missing = 0
    for c in memory.changelog:
        row = c.model_dump()
        if fact_refs.is_fact_row(row):
            row["before_text"], row["after_text"], lost = await fact_refs.import_texts(
                conn, user_id, agent_id, row["before_text"], row["after_text"]
            )
            missing += lost
        await conn.execute(
            sa.insert(changelog_table).values(user_id=user_id, agent_id=agent_id, **row)
        )
    notes = [await _import_facts(conn, user_id, agent_id, memory.facts)]
    if missing:
        notes.append(
            f"{missing} source(s) in the fact change history name messages not in this "
            "database; those changes were imported without them"
        )
    return "", [n for n in notes if n]


async def _import_facts(
    conn: AsyncConnection, user_id: int, agent_id: str, items: list[FactRecord]
) -> str:
    """The facts with the evidence that resolves here (the message's conversation is in
    this database, the imported one included); the rest is said in the report."""
    if not items:
        return ""
    taken = await conn.scalar(
        sa.select(facts.c.id).where(facts.c.id.in_([f.id for f in items])).limit(1)
    )
    if taken is not None:
        raise Conflict(f"fact {taken!r} already exists in this database; nothing was imported")
    missing = 0
    ids = await fact_refs.message_ids(
        conn, user_id, agent_id, {(r.session_id, r.seq) for f in items for r in f.evidence}
    )
    for f in items:
        await conn.execute(
            sa.insert(facts).values(
                user_id=user_id, agent_id=agent_id, **f.model_dump(exclude={"evidence"})
            )
        )
        for ref in f.evidence:
            message_id = ids.get((ref.session_id, ref.seq))
            if message_id is None:
                missing += 1
                continue
            await conn.execute(
                sa.insert(evidence).values(fact_id=f.id, message_id=message_id, role=ref.role)
            )
    if not missing:
        return ""
    return (
        f"{missing} fact source(s) name messages of conversations not in this database "
        "(import them first to keep those links); the facts were imported without them"
    )


# --- Markdown -------------------------------------------------------------------------


def render_markdown(doc: dict[str, Any], provider: Provider | None = None) -> str:
    """A readable rendering of an export document (JSON stays the lossless format). For
    display: control and bidi characters are shown as escapes (`memory.text.display`), and
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
        out += [
            "",
            f"### #{m['seq']} · {m['role']} · {m['created_at']} · {m['token_count']} tokens",
            "",
        ]
        if m["content"]:
            out.append(m["content"])
        for p in m["parts"]:
            if p["kind"] == "reasoning":
                out += ["", "> reasoning: " + p["content"].replace("\n", "\n> ")]
            elif p["kind"] == "tool_call":
                out += [
                    "",
                    f"tool call `{p['tool_name']}` (id `{p['tool_call_id']}`):",
                    "",
                    "```json",
                    p["content"],
                    "```",
                ]
            elif p["kind"] == "tool_result":
                out += ["", f"(result of tool call `{p['tool_call_id']}`, `{p['tool_name']}`)"]
    mem = doc["user_memory"]
    state = mem["state"]
    if state is not None or mem["changelog"]:
        out += [
            "",
            f"## Memory of user `{s['user_id']}` (version {state['version'] if state else 0})",
        ]
        if state is not None:
            constraints = json.loads(state["constraints"] or "[]")
            out += [
                "",
                "### Profile",
                "",
                state["profile"] or "(empty)",
                "",
                "### Soul",
                "",
                state["soul"] or "(empty)",
                "",
                "### Constraints",
                "",
            ]
            out += [f"- `{c.get('id')}` {c.get('text')}" for c in constraints] or ["(none)"]
        if mem.get("facts"):
            out += ["", "### Facts", ""]
            out += [
                f"- {f['key']}: {f['value']} ({f['state']}, {f['valid_from'][:10]} -> "
                f"{(f['valid_to'] or '')[:10] or 'now'}; {len(f['evidence'])} source(s))"
                for f in mem["facts"]
            ]
        if mem["changelog"]:
            out += [
                "",
                "### Changelog",
                "",
                "| versions | scope | action | source | session | at |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
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
