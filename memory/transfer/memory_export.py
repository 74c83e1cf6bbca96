"""A person's whole memory out and back in: `/memory export`, `/memory import` in a
private chat and `mnemo memory export --user` / `mnemo memory import`.

The document (`FORMAT`, `VERSION`), documented in docs/OPERATIONS.md:

    {"format": "mnemo.memory-export", "version": 1,
     "owner": {"user_id": 42, "agent_id": "mnemo"},
     "exported_at": "2026-11-27T22:00:00+00:00",
     "sections": {
       "sessions": [<mnemo.session-export documents, their user_memory empty>],
       "memory": {"state": {profile, soul, constraints, version, updated_at} | null,
                  "changelog": [...], "facts": [...]}}}

Each session is a session export (`memory.transfer.session`): its messages with dates
and origins, its snapshot and the provider's data (lcm: summaries with the messages and
summaries each was made from). The (user, agent) memory (profile, soul, rules, and the
changelog: every earlier version of them) is written once, in `memory`, not once per
session. New kinds of memory (facts, follow-ups) come as new sections under the same
version: a reader refuses a section it does not know, by name, rather than import a
memory without it; a change to an existing section's shape is a new version.

An import checks every section first, then writes all of it in one transaction, into
the memory of `retarget`'s (user, agent) when given (a person importing their export
into their own memory on another bot, or under another account): the sessions' ids and
owners are rewritten to name the importer, nothing else changes.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.errors import InvalidArgument
from memory.contract.tracing import unwrap
from memory.contract.types import iso_utc
from memory.storage.db import write_transaction
from memory.storage.history import conversations
from memory.transfer import fact_refs
from memory.transfer.schema import SessionDocument, UserMemory, load_document, validate_document
from memory.transfer.session import (
    export_session,
    export_user_memory,
    import_user_memory,
    publish,
    render_markdown,
    write_session,
)

if TYPE_CHECKING:
    from memory.contract.capabilities import Provider
    from memory.contract.maintenance import StagedFiles

FORMAT = "mnemo.memory-export"
VERSION = 1
SECTIONS = ("sessions", "memory")  # what this version knows; see the module doc
JSON_NAME = "memory.json"
MARKDOWN_NAME = "memory.md"
_EMPTY_MEMORY: dict[str, Any] = {"state": None, "changelog": []}


async def export_memory(
    engine: AsyncEngine, user_id: int, agent_id: str, provider: Provider | None = None
) -> dict[str, Any]:
    """Every session of (user, agent), archived ones too, and their memory. A group's
    sessions are the group's (another scope), never a member's."""
    async with engine.connect() as conn:
        ids = (
            await conn.scalars(
                sa.select(conversations.c.session_id)
                .where(conversations.c.user_id == user_id, conversations.c.agent_id == agent_id)
                .order_by(conversations.c.created_at, conversations.c.id)
            )
        ).all()
        memory = await export_user_memory(conn, user_id, agent_id)
    sessions: list[dict[str, Any]] = []
    owned = _owner_keys(provider)
    for session_id in ids:
        doc = await export_session(engine, session_id, provider)
        doc["user_memory"] = dict(_EMPTY_MEMORY)  # once, in the memory section
        if sessions and doc.get("provider") is not None:
            for key in owned:  # once, in the first session
                doc["provider"]["data"].pop(key, None)
        sessions.append(doc)
    return {
        "format": FORMAT,
        "version": VERSION,
        "owner": {"user_id": user_id, "agent_id": agent_id},
        "exported_at": iso_utc(datetime.now(UTC)),
        "sections": {"sessions": sessions, "memory": memory},
    }


def _owner_keys(provider: Provider | None) -> tuple[str, ...]:
    """The keys of a provider's session data that hold the person's, not the session's
    (simple: the notes file), the same in every session: written once in a whole-memory
    export, so its import stages them once (a provider's files are locked from staging
    to the commit: twice in one transaction would wait on itself)."""
    inner = unwrap(provider) if provider is not None else None
    keys = getattr(inner, "owner_overlay_keys", ())
    return tuple(keys) if isinstance(keys, tuple) else ()


def memory_content(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without when it was made: what two exports of the same memory share."""
    return {k: v for k, v in doc.items() if k != "exported_at"}


def render_memory_markdown(doc: dict[str, Any], provider: Provider | None = None) -> str:
    """The readable rendering: the memory, then each session as `mnemo memory export`
    renders one (the JSON stays the lossless format)."""
    owner = doc["owner"]
    memory = doc["sections"]["memory"]
    head = {
        "session": {
            "id": f"memory of user {owner['user_id']}",
            "agent_id": owner["agent_id"],
            "user_id": owner["user_id"],
            "channel": "-",
            "title": f"exported {doc['exported_at']}",
            "archived": False,
            "created_at": doc["exported_at"],
            "updated_at": doc["exported_at"],
        },
        "messages": [],
        "user_memory": memory,
        "provider": None,
    }
    parts = [render_markdown(head, provider)]
    parts += [render_markdown(s, provider) for s in doc["sections"]["sessions"]]
    return "\n---\n\n".join(parts)


def to_zip(doc: dict[str, Any], provider: Provider | None = None) -> bytes:
    """The file people get: the JSON document and its Markdown rendering."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(JSON_NAME, json.dumps(doc, indent=1, ensure_ascii=False))
        z.writestr(MARKDOWN_NAME, render_memory_markdown(doc, provider))
    return out.getvalue()


def from_bytes(body: bytes, limit: int) -> Any:
    """The parsed document of an export file: the zip (its memory.json) or the JSON
    itself; InvalidArgument in one line otherwise. `limit`: the most bytes the JSON may
    take once unpacked (a zip bomb is refused by its declared and its read size)."""
    if body[:2] == b"PK":
        try:
            with zipfile.ZipFile(io.BytesIO(body)) as z:
                info = z.getinfo(JSON_NAME)
                if info.file_size > limit:
                    raise InvalidArgument(f"{JSON_NAME} is over {limit} bytes unpacked")
                with z.open(info) as f:
                    raw = f.read(limit + 1)
        except KeyError:
            raise InvalidArgument(f"the zip holds no {JSON_NAME}") from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as exc:
            raise InvalidArgument(f"not a readable zip: {exc}") from None
        if len(raw) > limit:
            raise InvalidArgument(f"{JSON_NAME} is over {limit} bytes unpacked")
    else:
        raw = body
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("not UTF-8 JSON") from None
    return load_document(text)


def is_memory_export(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FORMAT


@dataclass
class Checked:
    owner: tuple[int, str]
    sessions: list[SessionDocument]
    memory: UserMemory


@dataclass
class MemoryImportReport:
    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    existing: list[str] = field(default_factory=list)  # sessions already there (dry run)
    channels: dict[str, str] = field(default_factory=dict)  # session id -> its channel
    memory: str = ""  # what became of the profile, soul and rules
    notes: list[str] = field(default_factory=list)

    def lines(self, *, dry_run: bool) -> list[str]:
        verb = "would import" if dry_run else "imported"
        out = [f"{verb.capitalize()} {len(self.sessions)} conversations, {self.messages} messages."]
        if self.existing:
            out.append(
                f"{len(self.existing)} of them are here already, so nothing can be imported: "
                + ", ".join(self.existing[:5])
            )
        out.append(self.memory)
        return out + self.notes


def retarget_session(doc: Any, user_id: int, agent_id: str) -> Any:
    """A session document moved to (user_id, agent_id): the owner and the ids that name
    it (a bot's session id `<agent>:<channel>:<user>...`, the snapshot's owner)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("session"), dict):
        return doc  # the check names what is wrong
    out = dict(doc)
    s = out["session"] = dict(doc["session"])
    old_prefix = f"{s.get('agent_id')}:{s.get('channel')}:"
    sid = s.get("id")
    if isinstance(sid, str) and sid.startswith(old_prefix):
        rest = re.sub(r"^-?\d+(?=$|[:#])", str(user_id), sid[len(old_prefix) :])
        s["id"] = f"{agent_id}:{s.get('channel')}:{rest}"
    s["user_id"], s["agent_id"] = user_id, agent_id
    if isinstance(doc.get("snapshot"), dict):
        out["snapshot"] = {**doc["snapshot"], "user_id": user_id, "agent_id": agent_id}
    return out


def _session_id(doc: Any) -> str | None:
    session = doc.get("session") if isinstance(doc, dict) else None
    sid = session.get("id") if isinstance(session, dict) else None
    return sid if isinstance(sid, str) else None


def check_memory_document(
    doc: Any, provider: Provider | None, retarget: tuple[int, str] | None = None
) -> Checked:
    """Every section checked (InvalidArgument naming the first problem, by path)."""
    if not is_memory_export(doc):
        raise InvalidArgument(f"not a mnemo memory export (expected format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise InvalidArgument(
            f"memory export version {doc.get('version')!r} is not supported "
            f"(this mnemo reads {VERSION})"
        )
    sections, owner = doc.get("sections"), doc.get("owner")
    if not isinstance(sections, dict) or not isinstance(owner, dict):
        raise InvalidArgument("expected objects at .owner and .sections")
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise InvalidArgument(
            f"the export holds sections this mnemo does not know ({', '.join(unknown)}): "
            "import it with a newer mnemo, so nothing of it is left out"
        )
    user_id, agent_id = owner.get("user_id"), owner.get("agent_id")
    if not isinstance(user_id, int) or not isinstance(agent_id, str):
        raise InvalidArgument(".owner: expected user_id (integer) and agent_id (string)")
    if retarget is not None:
        user_id, agent_id = retarget
    raw_sessions = sections.get("sessions", [])
    if not isinstance(raw_sessions, list):
        raise InvalidArgument(".sections.sessions: expected a list")
    checked = []
    renames: dict[str, str] = {}  # session ids a retarget rewrites
    owned = _owner_keys(provider)
    for i, raw in enumerate(raw_sessions):
        data = (raw.get("provider") or {}).get("data") if isinstance(raw, dict) else None
        if i and isinstance(data, dict) and any(key in data for key in owned):
            raise InvalidArgument(
                f".sections.sessions[{i}].provider.data: the person's own data "
                f"({', '.join(k for k in owned if k in data)}) comes once, in the first session"
            )
        if retarget is not None:
            moved = retarget_session(raw, user_id, agent_id)
            old_id, new_id = _session_id(raw), _session_id(moved)
            if old_id is not None and new_id is not None and old_id != new_id:
                renames[old_id] = new_id
            raw = moved
        try:
            one = validate_document(raw, provider)
        except InvalidArgument as exc:
            raise InvalidArgument(f".sections.sessions[{i}]: {exc}") from None
        if (one.session.user_id, one.session.agent_id) != (user_id, agent_id):
            raise InvalidArgument(
                f".sections.sessions[{i}]: belongs to user {one.session.user_id}, not to the "
                f"export's owner {user_id}"
            )
        checked.append(one)
    try:
        memory = UserMemory.model_validate(
            fact_refs.rename_sessions(sections.get("memory", _EMPTY_MEMORY), renames)
        )
    except ValueError as exc:
        raise InvalidArgument(f".sections.memory: {str(exc).splitlines()[0]}") from None
    return Checked((user_id, agent_id), checked, memory)


async def import_memory(
    engine: AsyncEngine,
    doc: Any,
    provider: Provider | None = None,
    *,
    retarget: tuple[int, str] | None = None,
    dry_run: bool = False,
) -> MemoryImportReport:
    """Write an export, all or nothing (module doc). `dry_run`: check it and say what
    would be written, writing nothing (the transaction is rolled back)."""
    checked = check_memory_document(doc, provider, retarget)
    report = MemoryImportReport()
    staged: list[StagedFiles] = []

    class _DryRun(Exception):
        pass

    try:
        async with write_transaction(engine) as conn:
            for one in checked.sessions:
                sid = one.session.id
                taken = await conn.scalar(
                    sa.select(conversations.c.id).where(conversations.c.session_id == sid)
                )
                if taken is not None:
                    report.existing.append(sid)
                report.sessions.append(sid)
                report.channels[sid] = one.session.channel
                report.messages += len(one.messages)
            if dry_run or report.existing:
                raise _DryRun
            for one in checked.sessions:
                written = await write_session(conn, one, provider, staged)
                report.notes += written.notes
            user_id, agent_id = checked.owner
            kept, notes = await import_user_memory(conn, user_id, agent_id, checked.memory)
            report.notes += notes
    except _DryRun:
        for files in staged:
            files.discard()
        if dry_run:
            report.memory = _memory_line(checked.memory, kept=None)
            return report
        raise InvalidArgument(
            f"{len(report.existing)} of its conversations are here already "
            f"({', '.join(report.existing[:3])}); nothing was imported"
        ) from None
    except BaseException:
        for files in staged:
            files.discard()
        raise
    await publish(staged)
    report.memory = _memory_line(checked.memory, kept=kept)
    return report


def _memory_line(memory: UserMemory, *, kept: str | None) -> str:
    if memory.state is None and not memory.changelog:
        return "No profile, soul or rules in it."
    what = f"profile, soul and rules with {len(memory.changelog)} earlier changes"
    if kept:  # the target's own memory is never overwritten with a copy
        return f"Your existing profile, soul and rules were kept; the export's {what} were not imported."
    return (
        ("Would import its " if kept is None else "Imported its ")
        + what
        + (" (if you have none here yet)." if kept is None else ".")
    )
