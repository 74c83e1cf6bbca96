"""`mnemo memory doctor`: integrity faults of the shared tables and the provider's data,
and notes on what waits (each channel's backlog, embeddings, the background spend guard)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, err, open_memory
from memory.text.display import terminal_safe

if TYPE_CHECKING:
    pass


async def doctor(settings: Settings, out: TextIO | None = None) -> int:
    from memory.contract.maintenance import IntegrityChecker
    from memory.contract.tracing import unwrap
    from memory.transfer.integrity import check_shared

    out = out or sys.stdout  # read now: a default taken at import outlives a redirect

    async with open_memory(settings) as m:
        faults = await check_shared(m.engine)
        checked = ["shared tables"]
        inner = unwrap(m.provider)
        if isinstance(inner, IntegrityChecker):
            faults += await inner.check_integrity()
            checked.append(f"{m.provider.name} provider data")
        else:
            print(
                f"note: the {m.provider.name} provider offers no integrity checks of its own",
                file=sys.stderr,
            )
        from bot.channels.registry import registered

        channel_lines = [
            line for channel in registered() for line in await channel.doctor_notes(m.engine)
        ]
        from bot.ops.embeddings import embeddings_report

        embedding_lines = await embeddings_report(settings, m)
        from bot.ops.usage import guard_report

        embedding_lines += await guard_report(settings, m.engine)
    for fault in faults:
        print(f"FAULT {terminal_safe(str(fault))}", file=out)
    code = EXIT_OK
    if faults:
        codes = sorted({f.code for f in faults})
        err(f"doctor found {len(faults)} fault(s) in {m.where}: {', '.join(codes)}")
        code = EXIT_FAULT
    else:
        print(f"ok: no faults in {m.where} ({', '.join(checked)} checked)", file=out)
    for line in channel_lines + embedding_lines:
        print(line, file=out)
    return code
