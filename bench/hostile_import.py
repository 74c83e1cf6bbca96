"""Hostile and normal files through every JSON import path (issue #32 item 4): peak RSS
and wall time of reading each, one child process per case, so each peak is its own.

Cases: a Telegram `result.json` and a ChatGPT `conversations.json` whose message text
is nested 10,000 and 100,000 lists deep (about 20 KB and 200 KB), a normal generated
Telegram export (`--messages`, default 100,000: about 25 MB), all read the way an
import's dry run reads them (`FORMATS[fmt].read`, every item); and `mnemo memory
import /dev/zero` (the session import) as the operator runs it. Each child runs under
an address-space limit (`--cap-mb`, default 2048) so a run of the unfixed code cannot
take the shared machine down: it then ends in a MemoryError at the cap, reported as
such.

    python -m bench.hostile_import [--messages 100000] [--cap-mb 2048] [--append-results]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench._common import append_results, machine  # noqa: E402
from tests.chat_import.generate import telegram_export  # noqa: E402
from tests.chat_import.hostile import deep_export  # noqa: E402

# The child: read the file as an import's dry run does, print the item count, or the
# refusal's first line (what the operator would see) and how it ended.
READ = """
import resource, sys
cap = int(sys.argv[3]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from bot.chat_import.importer import FORMATS
from bot.chat_import.sources import ImportRefused
try:  # the limits the operator's import reads within (before issue #32: none)
    from bot.chat_import.limits import operator_limits
    import os
    limits = (operator_limits(os.path.getsize(sys.argv[2])),)
except ImportError:
    limits = ()
try:
    with open(sys.argv[2], "rb") as f:
        n = sum(1 for _ in FORMATS[sys.argv[1]].read(f, "export.json", *limits))
    print(f"read {n} items")
except ImportRefused as exc:
    print(f"refused: {str(exc)[:110]}")
except BaseException as exc:
    print(f"{type(exc).__name__}: {str(exc)[:100]}")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--cap-mb", type=int, default=2048)
    ap.add_argument("--append-results", action="store_true")
    args = ap.parse_args()
    rows: list[tuple[str, float, str, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        cases: list[tuple[str, str, Path]] = []
        for fmt in ("telegram", "chatgpt"):
            for depth in (10_000, 100_000):
                path = tmp / f"{fmt}-{depth}.json"
                path.write_bytes(deep_export(fmt, depth))
                cases.append((f"{fmt}, text nested {depth:,} deep", fmt, path))
        normal = tmp / "normal.json"
        telegram_export(normal, args.messages, chats=20)
        cases.append((f"telegram, normal export of {args.messages:,} messages", "telegram", normal))
        for name, fmt, path in cases:
            cmd = [sys.executable, "-c", READ, fmt, str(path), str(args.cap_mb)]
            # One child per case: RUSAGE_CHILDREN's peak is the largest child's so far,
            # so the smallest cases run first and each reads its own peak via wait4.
            line, wall, cpu, rss = _measured(cmd, args.cap_mb)
            rows.append((name, path.stat().st_size / 2**20, line, wall, cpu, rss))
        config = tmp / "config.yaml"
        config.write_text(
            f"database:\n  url: sqlite+aiosqlite:///{tmp}/m.db\ndata_dir: {tmp}/data\n",
            encoding="utf-8",
        )
        cmd = [sys.executable, "-m", "bot.cli", "--config", str(config)]
        cmd += ["memory", "import", "/dev/zero"]
        line, wall, cpu, rss = _measured(cmd, args.cap_mb)
        rows.append(("`mnemo memory import /dev/zero`", 0.0, line, wall, cpu, rss))
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    out = [
        f"## Hostile imports: peak RSS and time per JSON path "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {head})",
        "",
        f"- machine: {machine()}",
        f"- command: `python -m bench.hostile_import --messages {args.messages}"
        f" --cap-mb {args.cap_mb}` (each case a child under RLIMIT_AS {args.cap_mb} MB)",
        "",
        "| case | file MB | outcome | wall s | CPU s | peak RSS MB |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for name, mb, line, wall, cpu, rss in rows:
        cells = f"{name} | {mb:.1f} | {line.replace('|', '/')} | {wall:.2f} | {cpu:.2f} | {rss:.0f}"
        out.append(f"| {cells} |")
    text = "\n".join(out) + "\n"
    print(text)
    if args.append_results:
        append_results(text)


def _measured(cmd: list[str], cap_mb: int) -> tuple[str, float, float, float]:
    """`cmd`'s last line, wall time, CPU time (user + system: less swayed by a busy
    machine) and its own peak RSS (os.wait4's rusage)."""

    def limit() -> None:
        cap = cap_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MNEMO_CONFIG", None)
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, preexec_fn=limit
        )
        _, _, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = 0  # reaped by wait4 above
        out.seek(0)
        text = out.read().decode(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    cpu = usage.ru_utime + usage.ru_stime
    return (lines[-1][:160] if lines else "no output"), wall, cpu, usage.ru_maxrss / 1024


if __name__ == "__main__":
    main()
