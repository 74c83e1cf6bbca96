"""The operator's progress bar (`mnemo memory compact`, `mnemo memory embed`), on stderr:
on a terminal, tqdm's bar redrawn in place (with rate and time left); elsewhere (logs,
pipes, CI) one plain line per step, readable without carriage returns, with the rate
and time left too once a step is done."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm


class ProgressBar:
    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        width: int = 30,
        *,
        unit: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.width, self.unit = max(total, 0), width, unit
        self.clock = clock
        self.started = clock()
        # Looked up now, not at import: a test or a caller may have replaced sys.stderr.
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty()) if callable(isatty) else False
        self._bar: tqdm[None] | None = None
        if self.tty:
            self._bar = tqdm(
                total=self.total,
                file=self.stream,
                dynamic_ncols=True,
                leave=True,
                unit=f" {unit}" if unit else "it",
                bar_format="{l_bar}{bar}| {n}/{total} {unit} [{elapsed}<{remaining}, "
                "{rate_fmt}] {postfix}",
            )

    def grow(self, total: int) -> None:
        """A better estimate of the total (work found as it went)."""
        self.total = max(total, 0)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def show(self, done: int, label: str = "") -> None:
        if done > self.total:  # an estimate fell short: the bar never runs past its end
            self.grow(done)
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(done - self._bar.n)
            return
        filled = self.width if self.total == 0 else self.width * done // self.total
        unit = f" {self.unit}" if self.unit else ""
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total}{unit}"
        line += self._pace(done) + (f" {label}" if label else "")
        self.stream.write(line.rstrip() + "\n")
        self.stream.flush()

    def _pace(self, done: int) -> str:
        elapsed = self.clock() - self.started
        if done <= 0 or elapsed <= 0:
            return ""
        rate = done / elapsed
        left = (self.total - done) / rate
        return f" ({rate:.2f}/s, {_duration(left)} left)"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
