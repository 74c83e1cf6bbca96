"""`mnemo memory status SESSION` and `mnemo memory sessions`: one session's figures, and
the listing of every session with its counts."""

from __future__ import annotations

import sys
from typing import TextIO

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, err, open_memory, when
from memory.contract.errors import ContractError
from memory.contract.types import ListOptions, Session
from memory.text.display import terminal_safe


async def status(settings: Settings, session_id: str, out: TextIO = sys.stdout) -> int:
    from memory.storage import operator_reads as reads
    from memory.storage.history import HistoryStore

    async with open_memory(settings) as m:
        try:
            info = await HistoryStore(m.engine).load_info(session_id)
        except ContractError:
            err(f"no session {session_id!r} (see `mnemo memory sessions`)")
            return EXIT_FAULT
        stats = await m.provider.stats(Session(info.id, info.agent_id, info.user_id, info.channel))
        snap = await reads.snapshot_version(m.engine, session_id)
        current = await reads.memory_version(m.engine, info.user_id, info.agent_id)
    rows = [
        (
            "session",
            f"{info.id} (agent {info.agent_id}, user {info.user_id}, channel {info.channel})",
        ),
        ("title", info.title or "-"),
        ("provider", m.provider.name),
        ("database", m.where),
        (
            "messages",
            f"{stats.message_count} ({stats.token_count} tokens), "
            f"{when(stats.oldest_at)} .. {when(stats.newest_at)}",
        ),
        ("summaries", str(stats.summary_count)),
        ("context", f"{stats.context_tokens} tokens"),
        (
            "memory",
            f"snapshot version {snap if snap is not None else '-'}, current version {current or 0}",
        ),
        ("created", when(info.created_at)),
        ("active", when(info.last_active)),
        ("archived", "yes" if info.archived else "no"),
    ]
    for key, value in rows:
        print(f"{key:<10} {terminal_safe(value)}", file=out)
    return EXIT_OK


async def sessions(settings: Settings, out: TextIO = sys.stdout) -> int:
    from memory.storage.operator_reads import session_counts

    async with open_memory(settings) as m:
        rows = await session_counts(m.provider, m.engine, ListOptions(include_archived=True))
        lines = [  # escaped before the widths are measured
            (
                terminal_safe(r.info.id),
                str(r.info.user_id),
                str(r.message_count),
                str(r.summary_count),
                when(r.info.last_active),
                ("[archived] " if r.info.archived else "") + terminal_safe(r.info.title),
            )
            for r in rows
        ]
    if not lines:
        print(f"no sessions in {m.where}", file=out)
        return EXIT_OK
    header = ("SESSION", "USER", "MESSAGES", "SUMMARIES", "LAST ACTIVE", "TITLE")
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(5)]
    for line in [header, *lines]:
        print(
            "  ".join(c.ljust(w) for c, w in zip(line[:5], widths, strict=True)) + "  " + line[5],
            file=out,
        )
    print(f"{len(lines)} session(s) in {m.where}", file=sys.stderr)
    return EXIT_OK
