"""Chat import (issue 22): `mnemo memory import-chat` of a generated Telegram export of
N messages, as the operator runs it (a subprocess: startup, migration, the dry-run pass
over the file and the import pass), into a fresh database per provider x database.

Reported: the import's own messages/s (its report line), the whole command's wall
time, and the command's peak RSS (ru_maxrss of the child), beside the same for an
export a tenth the size: with the file parsed as a stream, the peak must not grow with
it (figures recorded, not asserted). Every message stored is counted back.

    python bench/import_bench.py [--messages 100000] [--chats 20]
        [--provider lcm,simple] [--db sqlite,postgres] [--append-results]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402

from bench._common import append_results, machine  # noqa: E402
from memory.storage.db import create_engine  # noqa: E402
from memory.storage.history import messages  # noqa: E402
from memory.testing.databases import temp_database_url  # noqa: E402
from tests.chat_import.generate import telegram_export  # noqa: E402
from tests.reliability.process import write_config  # noqa: E402

RATE = re.compile(r"Imported (\d+) messages .* in ([\d.]+) s, (\d+) messages/s")


@dataclass
class Run:
    provider: str
    db: str
    messages: int
    file_mb: float
    stored: int = 0
    import_s: float = 0.0
    rate: int = 0
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    error: str = ""


async def _count(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(sa.select(sa.func.count()).select_from(messages)) or 0)
    finally:
        await engine.dispose()


def _measure(provider: str, db: str, export: Path, expected: int, work: Path) -> Run:
    """One import in a child process of its own (`-c` runs the measuring child, which
    runs the command and reports its peak: the peak of this process's children would
    be the largest of all the runs)."""
    run = Run(provider, db, expected, export.stat().st_size / 1e6)
    code = (
        "import resource, subprocess, sys, time;"
        "t=time.monotonic(); p=subprocess.run(sys.argv[1:], capture_output=True, text=True);"
        "w=time.monotonic()-t;"
        "print(p.returncode, w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
        "print(p.stdout); print(p.stderr[-1500:], file=sys.stderr)"
    )

    async def go() -> None:
        async with temp_database_url(db, work) as url:
            config = write_config(
                work / "config.yaml",
                {
                    "database": {"url": url},
                    "data_dir": str(work / "data"),
                    "memory": {
                        "provider": provider,
                        "simple": {"store_dir": str(work / "notes")},
                    },
                    "log_level": "WARNING",
                },
            )
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            env.pop("MNEMO_CONFIG", None)
            command = [sys.executable, "-m", "bot.cli", "--config", str(config), "memory"]
            command += ["import-chat", str(export), "--format", "telegram", "--user", "42"]
            proc = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", code, *command],
                capture_output=True,
                text=True,
                cwd=work,
                env=env,
            )
            first, _, out = proc.stdout.partition("\n")
            rc, wall, peak_kb = first.split()
            run.wall_s, run.peak_rss_mb = float(wall), int(peak_kb) / 1024
            if rc != "0":
                run.error = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else rc
            found = RATE.search(out)
            if found:
                run.import_s, run.rate = float(found.group(2)), int(found.group(3))
            run.stored = await _count(url)

    asyncio.run(go())
    return run


def _report(runs: list[Run], chats: int, command: str) -> str:
    lines = [
        "## Chat import: `mnemo memory import-chat` of a generated Telegram export",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}; load average at the end {os.getloadavg()[0]:.1f}"
        " (shared machine)",
        f"- command: `{command}`",
        f"- setup: the CLI as a subprocess into a fresh database each; the export has {chats}"
        " group chats, a reply every 10th message, a photo every 25th, a service message"
        " every 50th (skipped); 500 messages per transaction. messages/s: the import pass"
        " (its report line); wall: the whole command (start, migration, the dry-run pass"
        " over the file, the import); peak RSS: the command's ru_maxrss",
        "",
        "| provider | db | messages | file MB | stored | import s | messages/s | wall s |"
        " peak RSS MB | ok |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        ok = "yes" if not r.error and r.stored == r.messages else f"NO {r.error}"
        lines.append(
            f"| {r.provider} | {r.db} | {r.messages} | {r.file_mb:.1f} | {r.stored} |"
            f" {r.import_s:.1f} | {r.rate} | {r.wall_s:.1f} | {r.peak_rss_mb:.0f} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--provider", default="lcm,simple")
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--append-results", action="store_true")
    args = parser.parse_args()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="mnemo-import-") as tmp:
        root = Path(tmp)
        sizes = sorted({max(args.messages // 10, 1), args.messages})
        exports = {}
        for n in sizes:
            path = root / f"result-{n}.json"
            exports[n] = (path, telegram_export(path, n, chats=args.chats))
        for provider in args.provider.split(","):
            for db in args.db.split(","):
                for n in sizes:
                    path, expected = exports[n]
                    work = root / f"{provider}-{db}-{n}"
                    work.mkdir()
                    started = time.monotonic()
                    run = _measure(provider, db, path, expected, work)
                    runs.append(run)
                    print(
                        f"{provider} {db} {n}: {run.stored} stored in"
                        f" {time.monotonic() - started:.1f} s {run.error}",
                        file=sys.stderr,
                    )
    text = _report(
        runs, args.chats, ("python bench/import_bench.py " + " ".join(sys.argv[1:])).strip()
    )
    print(text)
    if args.append_results:
        append_results(text)
    return 0 if all(not r.error and r.stored == r.messages for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
