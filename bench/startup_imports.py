"""What `mnemo --help` imports before it prints: `python -X importtime` of the CLI's entry,
run in a checkout (this one, or `--tree` for another, e.g. a `git worktree` of an older
commit), alternating the trees when several are given. Reports the sum of the top-level
cumulative import times, the number of modules and which heavy packages were imported
(a provider, SQLAlchemy, openai, python-telegram-bot, numpy)."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

HEAVY = ("plugins", "sqlalchemy", "openai", "telegram", "numpy")
ENTRY = "import sys; sys.argv = ['mnemo', {flag!r}]; from bot.cli import main; main()"
LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)")


def measure(tree: Path, flag: str) -> tuple[float, int, list[str]]:
    """Seconds (sum of top-level cumulative), modules imported, heavy packages among them."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", ENTRY.format(flag=flag)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    total, modules, heavy = 0, 0, set()
    for line in run.stderr.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        modules += 1
        if len(m.group(2)) == 1:  # top level: its cumulative time includes its children
            total += int(m.group(1))
        if m.group(3).split(".")[0] in HEAVY:
            heavy.add(m.group(3).split(".")[0])
    return total / 1e6, modules, sorted(heavy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, help="a checkout (repeatable)")
    parser.add_argument("--flag", default="--help", help="what mnemo is given (--help, --version)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per tree, alternated")
    args = parser.parse_args()
    trees = args.tree or [Path(__file__).resolve().parents[1]]
    runs: dict[Path, list[tuple[float, int, list[str]]]] = {t: [] for t in trees}
    for _ in range(args.repeat):
        for tree in trees:
            runs[tree].append(measure(tree, args.flag))
    for tree, got in runs.items():
        times = [t for t, _, _ in got]
        print(
            f"{tree}: mnemo {args.flag}: median {statistics.median(times):.2f} s "
            f"(min {min(times):.2f}, max {max(times):.2f}), {got[-1][1]} modules, "
            f"heavy: {', '.join(got[-1][2]) or 'none'}"
        )


if __name__ == "__main__":
    main()
