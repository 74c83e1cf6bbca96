"""The dry run's read of an export (`scan.scan`), in a child process whose memory is
capped (RLIMIT_AS) and whose time is limited.

Why a child process, not a thread: a thread shares the bot's memory, so an export that
takes gigabytes to read takes them from the bot, and the kernel's OOM killer then stops
the bot before the update is acknowledged: every restart reads the file again (a crash
loop). A child with its own address-space limit gets its own MemoryError (or dies) and
the bot refuses the file, once. The streaming limits (`bot.chat_import.limits`) stop
the known hostile shapes early; the cap stops what they do not foresee.

The child is spawned fresh (`python -m bot.chat_import.sandbox`), not forked: the bot
has threads and open connections that a fork would copy. It takes the plan to fill
(pickled) on stdin and answers on stdout, pickled: ("ok", plan) or ("refused", line).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import resource
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.chat_import.refused import ImportRefused

if TYPE_CHECKING:
    from bot.chat_import import ledger
    from bot.chat_import.scan import Plan

log = logging.getLogger(__name__)

START_S = 30.0  # the child's own start (imports) beyond the read's deadline
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


async def scan(plan: Plan, done: dict[str, ledger.Progress], chat: str | None) -> Plan:
    """`scan.scan(plan, done, chat)` in a capped child; ImportRefused (one line)
    for what the child refused, and for a child that ran out of memory or time."""
    limits = plan.limits
    path = [_PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.chat_import.sandbox",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    wait = None if limits.seconds is None else limits.seconds + START_S
    too_slow = ImportRefused(
        f"{plan.path.name}: reading it took longer than {limits.seconds or 0:.0f} s: refused"
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(pickle.dumps((plan, done, chat))), wait)
    except TimeoutError:
        raise too_slow from None
    finally:
        if proc.returncode is None:  # timed out, or the bot is stopping
            proc.kill()
            await proc.wait()
    try:
        verdict, value = pickle.loads(out)
    except Exception:
        verdict, value = "died", None
    if verdict == "ok":
        return value  # type: ignore[no-any-return]
    if verdict == "refused":
        raise ImportRefused(value)
    if proc.returncode == -signal.SIGXCPU:  # its CPU time limit (`_cap`)
        raise too_slow
    if verdict == "memory" or proc.returncode == -signal.SIGKILL:
        raise ImportRefused(
            f"{plan.path.name}: reading it needs more than {limits.memory_mb} MB of memory: refused"
        )
    # An unforeseen failure of the reader: logged (its last line, cut short), and
    # the file refused like any other, so the update is acknowledged.
    tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    log.warning("the export reader failed on %s: %s", plan.path.name, tail[0][:200])
    raise ImportRefused(f"{plan.path.name} could not be read (the reader failed): refused")


def _cap(memory_mb: int, seconds: float | None) -> None:
    """This process's address space: what it holds now plus `memory_mb`; its CPU time:
    `seconds` (with the start's margin), past which the kernel stops it."""
    vm = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                vm = int(line.split()[1]) * 1024
    except OSError:  # no /proc: the cap counts from nothing, tighter but still a cap
        pass
    for which, want in (
        (resource.RLIMIT_AS, vm + memory_mb * 2**20),
        (resource.RLIMIT_CPU, None if seconds is None else int(seconds + START_S)),
    ):
        _, hard = resource.getrlimit(which)
        if want is not None and (hard == resource.RLIM_INFINITY or want < hard):
            # (A limit inherited from whoever started us is tighter already, and stays.)
            resource.setrlimit(which, (want, want if which == resource.RLIMIT_AS else hard))


def _answer(verdict: str, value: Any) -> None:
    sys.stdout.buffer.write(pickle.dumps((verdict, value)))
    sys.stdout.buffer.flush()


def main() -> None:
    from bot.chat_import.scan import scan

    # Our own parent's pickle: the plan to fill, what is imported already, the filter.
    plan, done, chat = pickle.loads(sys.stdin.buffer.read())
    _cap(plan.limits.memory_mb, plan.limits.seconds)
    try:
        answer: tuple[str, Any] = ("ok", scan(plan, done, chat))
    except ImportRefused as exc:
        answer = ("refused", str(exc))
    except MemoryError:
        answer = ("memory", None)
    _answer(*answer)


if __name__ == "__main__":
    main()
