"""simple's part of the operator commands: export/import of its compact markers
(`memory.contract.maintenance.Exporter`) and their integrity checks
(`memory.contract.maintenance.IntegrityChecker`). Mixed into `SimpleProvider`.

Markers refer to the history by `through_seq`, which survives an import unchanged. The
Archive entries the markers name live in the per-(agent, user) notes file
(`memory.simple.store_dir`), not in the database: the export carries that user's whole
notes file (`notes`, every Note and Archive), and the import merges it into the target's
store_dir after the database commit (`plugins.simple.notes_transfer`: identical entries
skipped, a differing one refuses the import). Back store_dir up with the database.

Checks, per conversation:
- `marker_beyond_history`: a marker covering a seq past the last message;
- `marker_order`: markers, in the order they were written, cover ever more messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.errors import InvalidArgument
from memory.contract.maintenance import Fault, StagedFiles, parse_timestamp
from memory.contract.types import iso_utc
from memory.storage.history import HistoryStore, conversations, messages
from memory.transfer.session import DocumentReader
from plugins.simple import notes_transfer
from plugins.simple.export_schema import SimpleOverlay
from plugins.simple.markers import markers
from plugins.simple.notes_store import NotesStore

_FIELDS = (
    "through_seq",
    "summary",
    "archive_name",
    "archived_at",
    "messages_compacted",
    "source_tokens",
)
_INTS = ("through_seq", "messages_compacted", "source_tokens")


class SimpleMaintenance:
    engine: AsyncEngine
    history: HistoryStore
    notes: NotesStore
    # Checked with the whole document before the import writes (memory.transfer.schema).
    overlay_model = SimpleOverlay
    # The person's notes, the same in every session's data: a whole-memory export keeps
    # them in its first session only (memory.transfer.memory_export.OWNER_KEYS).
    owner_overlay_keys = ("notes",)

    async def export_overlay(self, session_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            conv = (
                await conn.execute(
                    sa.select(
                        conversations.c.id, conversations.c.agent_id, conversations.c.user_id
                    ).where(conversations.c.session_id == session_id)
                )
            ).first()
            if conv is None:
                return None
            conv_id = conv.id
            rows = (
                (
                    await conn.execute(
                        sa.select(markers)
                        .where(markers.c.conversation_id == conv_id)
                        .order_by(markers.c.id)
                    )
                )
                .mappings()
                .all()
            )
        notes = await self.notes.entries(conv.agent_id, conv.user_id)
        return {
            "markers": [
                {k: (iso_utc(r[k]) if k == "archived_at" else r[k]) for k in _FIELDS} for r in rows
            ],
            "notes": notes_transfer.export_entries(notes),
        }

    async def import_overlay(
        self,
        conn: AsyncConnection,
        conversation_id: int,
        data: dict[str, Any],
        message_ids: Mapping[int, int],
    ) -> StagedFiles | None:
        raw = data.get("markers")
        if not isinstance(raw, list):
            raise InvalidArgument(".provider.data.markers: expected a list")
        last = max(message_ids, default=0)
        rows = []
        for i, m in enumerate(raw):
            where = f".provider.data.markers[{i}]"
            if not isinstance(m, dict) or any(k not in m for k in _FIELDS):
                raise InvalidArgument(f"{where}: expected an object with {', '.join(_FIELDS)}")
            if (
                any(isinstance(m[k], bool) or not isinstance(m[k], int) for k in _INTS)
                or not isinstance(m["summary"], str)
                or not isinstance(m["archive_name"], str)
            ):
                raise InvalidArgument(f"{where}: wrong value types")
            # PostgreSQL would fail on a longer name with a raw DataError, SQLite keep it.
            DocumentReader(m, where).bounded("archive_name", markers.c.archive_name)
            if not 0 < m["through_seq"] <= last:
                raise InvalidArgument(
                    f"{where}.through_seq: {m['through_seq']} is not a message of this session"
                )
            archived = parse_timestamp(m["archived_at"], f"{where}.archived_at")
            rows.append(
                {
                    **{k: m[k] for k in _FIELDS},
                    "archived_at": archived,
                    "conversation_id": conversation_id,
                }
            )
        # Exports made before notes travelled have no `notes`: nothing to merge.
        notes = notes_transfer.read_entries(data.get("notes", []))
        for row in rows:  # one at a time: ids (and so marker order) follow export order
            await conn.execute(sa.insert(markers).values(**row))
        if not notes:
            return None
        owner = (
            await conn.execute(
                sa.select(conversations.c.agent_id, conversations.c.user_id).where(
                    conversations.c.id == conversation_id
                )
            )
        ).one()
        path = self.notes.path_for(owner.agent_id, owner.user_id)
        # Last, so the file's writer lock is held only from here to the commit.
        return await asyncio.to_thread(notes_transfer.stage, path, notes)

    def overlay_markdown(self, data: dict[str, Any]) -> str:
        out = [f"### Compactions ({len(data['markers'])})"]
        for m in data["markers"]:
            out += [
                "",
                f"#### through message #{m['through_seq']} · archive `{m['archive_name']}` · "
                f"{m['archived_at']}",
                "",
                m["summary"],
            ]
        notes = data.get("notes", [])
        out += ["", f"### Notes and archives of the user ({len(notes)})"]
        for n in notes:
            aliases = f" (also {', '.join(n['aliases'])})" if n["aliases"] else ""
            out += [
                "",
                f"#### {n['kind']} `{n['name']}`{aliases} · {n['created_at']}",
                "",
                n["content"],
            ]
        return "\n".join(out) + "\n"

    async def check_integrity(self) -> list[Fault]:
        faults: list[Fault] = []
        query = (
            sa.select(
                conversations.c.session_id,
                markers.c.id,
                markers.c.through_seq,
                sa.select(sa.func.max(messages.c.seq))
                .where(messages.c.conversation_id == markers.c.conversation_id)
                .scalar_subquery(),
            )
            .join(conversations, conversations.c.id == markers.c.conversation_id)
            .order_by(markers.c.conversation_id, markers.c.id)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        previous: dict[str, int] = {}
        for session_id, marker_id, through, last in rows:
            where = f"session {session_id} marker {marker_id}"
            if through > (last or 0):
                faults.append(
                    Fault(
                        "marker_beyond_history",
                        where,
                        f"covers through #{through} but the last message is #{last or 0}",
                    )
                )
            if through <= previous.get(session_id, 0):
                faults.append(
                    Fault(
                        "marker_order",
                        where,
                        f"covers through #{through}, not past the previous marker's "
                        f"#{previous[session_id]}",
                    )
                )
            previous[session_id] = max(through, previous.get(session_id, 0))
        return faults
