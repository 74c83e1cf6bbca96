"""How much an export may cost to read, enforced while it streams, before memory grows.

ijson's prefixed events (`ijson.parse`, `ijson.items`) carry the path of every open
container as a string, built anew for each event, so a file nested n deep costs O(n^2):
a 200 KB `result.json` nested 100,000 lists deep took 3 GB and more (bench/RESULTS.md,
"Hostile imports"). ijson builds the events of a whole buffer before yielding the first,
so the stream is read `READ_BYTES` at a time: a buffer of that many `[` costs at most
~40 MB of paths, and the depth, counted as the events pass, is refused past
`Limits.depth` after the first such buffer. (ijson's basic events, their depth checked
before `ijson.parse` built the paths from them, cost less memory still but made the
whole read of a normal export 25% slower: bench/RESULTS.md.) The stream counts bytes: past
`Limits.file_bytes` in all, or `Limits.gap_bytes` without a single event (one endless
string, or whitespace), or past the deadline (`Limits.seconds`, checked at each read),
the read stops with one line.

The memory the reading process may take (`Limits.memory_mb`) is enforced around the
dry run's read, in a child process (`bot.chat_import.sandbox`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import ijson

from bot.chat_import.refused import ImportRefused

MB = 2**20
READ_BYTES = 4096  # 4096 levels of paths at most before the depth is seen: ~40 MB


@dataclass(frozen=True)
class Limits:
    # An export nests about 8 deep (Telegram: chats > list > chat > messages > message >
    # text > entity; ChatGPT: conversation > mapping > node > message > content > parts):
    # 64 leaves room for any metadata and costs nothing.
    depth: int = 64
    # Bytes read with no event: one token (a string, a number) or a run of whitespace.
    # A message is cut at 65,536 characters anyway.
    gap_bytes: int = 64 * MB
    file_bytes: int | None = None  # None: whatever the (regular) file holds
    seconds: float | None = None  # the whole read; None: no deadline
    memory_mb: int = 2048  # the dry run's child process, beyond what it starts with


# The in-chat import: the Bot API lets a bot download 20 MB; a 20 MB export reads in
# seconds (25 MB of Telegram export: 4.5 s on a loaded 2-core machine), and parsing a
# ChatGPT conversation whole takes about 20x its size, so 1 GB and 2 minutes are ample.
IN_CHAT = Limits(file_bytes=20 * MB, seconds=120.0, memory_mb=1024)


def operator_limits(size: int) -> Limits:
    """`mnemo memory import-chat` of a regular file of `size` bytes: any size, read at
    no less than 0.5 MB/s (about ten times slower than the loaded machine above)."""
    return Limits(file_bytes=size, seconds=120.0 + 2.0 * size / MB, memory_mb=4096)


class _Metered:
    """`stream`, read within `limits` (the byte and time budgets)."""

    def __init__(self, stream: BinaryIO, name: str, limits: Limits) -> None:
        self.stream, self.name, self.limits = stream, name, limits
        self.total = 0
        self.events = 0  # counted by bounded_events
        self._events_then = -1
        self._gap = 0
        self._deadline = None if limits.seconds is None else time.monotonic() + limits.seconds

    def read(self, size: int = -1) -> bytes:
        limits = self.limits
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise ImportRefused(
                f"{self.name}: reading it took longer than {limits.seconds:.0f} s: refused"
            )
        chunk = self.stream.read(size)
        self.total += len(chunk)
        if limits.file_bytes is not None and self.total > limits.file_bytes:
            raise ImportRefused(f"{self.name} is larger than {_size(limits.file_bytes)}: refused")
        self._gap = self._gap + len(chunk) if self.events == self._events_then else len(chunk)
        self._events_then = self.events
        if self._gap > limits.gap_bytes:
            raise ImportRefused(
                f"{self.name}: over {_size(limits.gap_bytes)} without a JSON value ending "
                f"(at byte {self.total - self._gap:,}): refused"
            )
        return chunk


def bounded_events(stream: BinaryIO, name: str, limits: Limits) -> Iterator[tuple[str, str, Any]]:
    """ijson's (prefix, event, value) events of `stream`, within `limits`; ImportRefused
    (one line) past one of them, or for a file that is not JSON (ijson's syntax errors,
    a string that is not UTF-8: a lone surrogate escape)."""
    metered = _Metered(stream, name, limits)
    depth = 0
    try:
        for item in ijson.parse(metered, use_float=True, buf_size=READ_BYTES):
            metered.events += 1
            event = item[1]
            if event == "start_map" or event == "start_array":
                depth += 1
                if depth > limits.depth:
                    raise ImportRefused(
                        f"{name}: nested deeper than {limits.depth} levels "
                        f"(at byte {metered.total:,} or before): not an export, refused"
                    )
            elif event == "end_map" or event == "end_array":
                depth -= 1
            yield item
    except ijson.JSONError as exc:
        # ijson's messages (bytes, for some) quote what it choked on on their next
        # lines: the first line only, short.
        said = exc.args[0] if exc.args else ""
        said = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
        reason = said.strip().splitlines()[0][:160] if said.strip() else "not valid JSON"
        raise ImportRefused(f"{name} is not valid JSON: {reason}") from None
    except UnicodeDecodeError:
        raise ImportRefused(
            f"{name} is not valid JSON: a string in it is not UTF-8 text "
            f"(a lone surrogate escape, or bytes that are no character; near byte "
            f"{metered.total:,})"
        ) from None


def _size(n: int) -> str:
    return f"{n / MB:.0f} MB" if n >= MB else f"{n:,} bytes"
