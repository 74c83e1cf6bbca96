#!/usr/bin/env python3
"""The image's entrypoint: runs its command (`mnemo run` by default) and passes its exit
code on, except for a configuration error of the bot itself.

Docker's restart policies cannot tell exit codes apart: with `restart: unless-stopped` a
bot started without a token (exit 2, mnemo's EXIT_CONFIG) would be restarted forever,
printing the same line each time. So when `mnemo run` exits 2, this process stays up
instead: the reason is printed once, kept in HOLD_FILE for the health check
(deploy/healthcheck.py reports it, so `docker compose ps` shows the container unhealthy
and `docker inspect` says why) and the container waits to be stopped or recreated with a
corrected configuration. Any other exit (a crash, an outage) is passed on, and the restart
policy restarts the bot as before. One-off commands (`docker compose run bot mnemo ...`)
never wait: only `mnemo run` does.

Signals (docker stop's SIGTERM, `docker kill -s INT`) are passed to the command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import IO

EXIT_CONFIG = 2  # bot/cli.py: a wrong or missing setting
HOLD_FILE = Path(os.environ.get("MNEMO_HOLD_FILE", "/tmp/mnemo-config-error"))
DEFAULT = ["mnemo", "run"]


def is_service(argv: list[str]) -> bool:
    """`mnemo [options] run ...`: the long-running bot, not a one-off command."""
    words = [a for a in argv[1:] if not a.startswith("-")]
    return Path(argv[0]).name == "mnemo" and words[:1] == ["run"]


def relay(stream: IO[str], tail: deque[str]) -> None:
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line.rstrip("\n"))


def hold(reason: list[str]) -> int:
    HOLD_FILE.write_text("\n".join(reason) + "\n", encoding="utf-8")
    print(
        "mnemo-entrypoint: the bot stopped on a configuration error (above); waiting "
        "instead of restarting. Fix .env or config.yaml, then `docker compose up -d` "
        "(or `docker compose restart bot` after editing a mounted config.yaml).",
        file=sys.stderr,
        flush=True,
    )
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    return 0


def main(argv: list[str]) -> int:
    argv = argv or DEFAULT
    HOLD_FILE.unlink(missing_ok=True)
    try:
        child = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, errors="replace")
    except FileNotFoundError:
        print(f"mnemo-entrypoint: no such command: {argv[0]}", file=sys.stderr)
        return 127
    signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
    # Ctrl-C on a terminal (`docker run -it`) reaches the command itself (same process
    # group); passing it on as well would make it a second Ctrl-C.
    if sys.stdin.isatty():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGINT, lambda signum, _frame: child.send_signal(signum))
    tail: deque[str] = deque(maxlen=20)
    relaying = threading.Thread(target=relay, args=(child.stderr, tail), daemon=True)
    relaying.start()
    code = child.wait()
    relaying.join()
    if code == EXIT_CONFIG and is_service(argv):
        reason = [line for line in tail if line.startswith("mnemo: ")] or list(tail)
        return hold(reason)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
