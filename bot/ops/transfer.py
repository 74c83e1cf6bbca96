"""`mnemo memory export` and `mnemo memory import`: one session out as JSON (lossless)
or Markdown (for reading), and an export back in, in one transaction: a session's JSON,
or a person's whole memory (`/memory export`'s zip or its memory.json,
`memory.transfer.memory_export`), into its own owner or, with `--user`, another's."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, EXIT_USAGE, err, open_memory
from memory.contract.errors import ContractError, InvalidArgument
from memory.text.display import json_terminal_safe, terminal_safe


async def export(settings: Settings, session_id: str, fmt: str, out: TextIO = sys.stdout) -> int:
    from memory.contract.errors import NotFound
    from memory.transfer.session import export_session, render_markdown

    async with open_memory(settings) as m:
        try:
            doc = await export_session(m.engine, session_id, m.provider)
        except NotFound:
            err(f"no session {session_id!r} (see `mnemo memory sessions`)")
            return EXIT_FAULT
        if fmt == "markdown":
            out.write(render_markdown(doc, m.provider))  # escaped for display
        else:  # lossless: escaped only as JSON escapes
            out.write(json_terminal_safe(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n")
    return EXIT_OK


async def refuse(line: str) -> int:
    err(line)
    return EXIT_USAGE


async def export_memory_zip(settings: Settings, user: int, out: BinaryIO | None = None) -> int:
    """A person's whole memory as /memory export makes it (the zip), on stdout."""
    from memory.transfer.memory_export import export_memory, to_zip

    async with open_memory(settings) as m:
        doc = await export_memory(m.engine, user, settings.agent.id, m.provider)
        body = await asyncio.to_thread(to_zip, doc, m.provider)
    if not doc["sections"]["sessions"] and doc["sections"]["memory"]["state"] is None:
        err(f"user {user} has no memory here (agent {settings.agent.id!r})")
        return EXIT_FAULT
    (out or sys.stdout.buffer).write(body)
    return EXIT_OK


def _read_document(path: str) -> Any:
    from memory.transfer.memory_export import from_bytes
    from memory.transfer.schema import MAX_DOCUMENT_BYTES, read_document

    if path == "-":
        return read_document(sys.stdin.buffer)
    with Path(path).open("rb") as stream:
        if stream.read(2) == b"PK":  # `/memory export`'s zip
            stream.seek(0)
            return from_bytes(stream.read(MAX_DOCUMENT_BYTES + 1), MAX_DOCUMENT_BYTES)
        stream.seek(0)
        return read_document(stream)  # bounded: a size cap, read in chunks


async def import_(
    settings: Settings, path: str, *, user: int | None = None, dry_run: bool = False
) -> int:
    from memory.transfer.memory_export import import_memory, is_memory_export
    from memory.transfer.session import import_session

    try:
        doc = await asyncio.to_thread(_read_document, path)
    except OSError as exc:
        err(f"cannot read {path}: {exc.strerror or exc}")
        return EXIT_FAULT
    except InvalidArgument as exc:
        err(f"{path} is not a JSON export: {exc}")
        return EXIT_FAULT
    whole = is_memory_export(doc)
    if not whole and (user is not None or dry_run):
        err("--user and --dry-run are for a memory export (`/memory export`'s file)")
        return EXIT_FAULT
    async with open_memory(settings, create=True) as m:
        try:
            if whole:
                into = None if user is None else (user, settings.agent.id)
                memory = await import_memory(
                    m.engine, doc, m.provider, retarget=into, dry_run=dry_run
                )
            else:
                report = await import_session(m.engine, doc, m.provider)
        except ContractError as exc:
            err(f"import refused, nothing was written: {exc}")
            return EXIT_FAULT
    if whole:
        for line in memory.lines(dry_run=dry_run):
            print(terminal_safe(line))
        if not dry_run:
            print(f"into {m.where}")
        return EXIT_OK
    for note in report.notes:
        print(f"note: {terminal_safe(note)}", file=sys.stderr)
    print(
        f"imported session {terminal_safe(report.session_id)} ({report.messages} messages) "
        f"into {m.where}"
    )
    return EXIT_OK
