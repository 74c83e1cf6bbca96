"""`make bench` / `python -m bench`: the bot's two benchmarks (issue 4), a minute in all.

    python -m bench                    # bot throughput vs an echo bot, compaction latency
    python -m bench --append-results   # ... and append the figures to bench/HISTORY.md

The storage benchmarks take longer and run on their own:

    .venv/bin/python bench/lcm_bench.py --db sqlite,postgres --write       # lcm (issue 3)
    .venv/bin/python bench/simple_bench.py --append-results                # simple (issue 8)
    .venv/bin/python bench/load_chats.py --chats 1000 --append-results     # load (issue 7)
    .venv/bin/python -m bench.recall --append-results                      # recall (issue 14)
    .venv/bin/python bench/cost.py --append-results                        # cost (issue 17)
    .venv/bin/python -m bench.fusion_study --db all                        # hybrid fusion variants
    .venv/bin/python bench/search_scale.py --sizes 10000,100000,1000000     # word search at scale (issue 34)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK = [
    ["bot_throughput.py", "--chats", "200", "--rounds", "5"],
    [
        "compaction_latency.py",
        "--provider",
        "lcm",
        "--delay",
        "2",
        "--sessions",
        "8",
        "--turns",
        "60",
        "--max-tokens",
        "800",
    ],
]


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    extra = ["--append-results"] if "--append-results" in argv else []
    for script, *args in QUICK:
        print(f"$ python bench/{script} {' '.join(args + extra)}", flush=True)
        done = subprocess.run([sys.executable, str(HERE / script), *args, *extra], check=False)
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
