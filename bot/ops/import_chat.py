"""`mnemo memory import-chat FILE --format telegram|chatgpt --user ID`: a Telegram
Desktop or ChatGPT export into one user's memory (bot.chat_import says how).

The plan goes to stdout first (chats, messages, date range, tokens; `--dry-run` stops
there, writing nothing); then the import, with a progress bar on stderr. A malformed
file is refused in one line before anything is written. Ctrl-C or a kill keeps the
batches stored so far; the same command continues after them.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

from bot.chat_import import importer
from bot.chat_import.ledger import ImportConflict
from bot.chat_import.limits import operator_limits
from bot.chat_import.refused import ImportRefused
from bot.chat_import.summary import plan_lines, report_line
from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, err, open_memory
from bot.ops.progress import ProgressBar
from memory.text.display import terminal_safe

SHOW_EVERY_S = 0.5  # progress lines at most this often (a plain line each, off a terminal)


async def import_chat(
    settings: Settings,
    path: str,
    fmt: str,
    user_id: int,
    agent_id: str | None,
    chat: str | None,
    dry_run: bool,
) -> int:
    agent = agent_id or settings.agent.id
    source = Path(path)
    try:
        size = _regular_size(source)
    except ImportRefused as exc:
        err(f"import refused, nothing was written: {exc}")
        return EXIT_FAULT
    async with open_memory(settings, create=True) as m:
        try:
            plan = await importer.plan(
                m.engine,
                importer.FORMATS[fmt],
                source,
                user_id,
                agent,
                operator_limits(size),
                chat,
            )
        except ImportRefused as exc:
            err(f"import refused, nothing was written: {exc}")
            return EXIT_FAULT
        for line in plan_lines(plan, max_chats=1_000_000):
            print(terminal_safe(line))
        print(f"Into the memory of user {user_id} (agent {terminal_safe(agent)}) in {m.where}.")
        if dry_run:
            print("Dry run: nothing was written.")
            return EXIT_OK
        if not plan.new:
            return EXIT_OK
        bar = ProgressBar(plan.new, unit="messages")
        shown = [0.0]

        def progress(done: int) -> None:
            now = time.monotonic()
            if now - shown[0] >= SHOW_EVERY_S or done >= plan.new:
                shown[0] = now
                bar.show(done)

        started = time.monotonic()
        try:
            report = await importer.run(m.provider, m.engine, plan, on_progress=progress)
        except (ImportRefused, ImportConflict) as exc:
            bar.close()
            err(f"import stopped: {exc}; what was stored is kept, run the command again")
            return EXIT_FAULT
        bar.close()
    print(report_line(report, time.monotonic() - started))
    print("The running bot compacts them in the background; search and /memory ask reach them now.")
    return EXIT_OK


def _regular_size(path: Path) -> int:
    """The size of the export at `path`, which the import reads twice (the plan, then
    the import): a regular file, not a pipe or a device (`/dev/zero` has no end)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ImportRefused(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ImportRefused(f"{path} is not a regular file (an export is read twice)")
    return st.st_size
