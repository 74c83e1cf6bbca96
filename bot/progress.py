"""The operator's progress bar (`mnemo memory compact --all`, `mnemo memory embed`), on
stderr: on a terminal, tqdm's bar redrawn in place (with rate and time left); elsewhere
(logs, pipes, CI) one plain line per step, readable without carriage returns."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


class ProgressBar:
    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total, self.width = max(total, 0), width
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
                bar_format="{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}] {postfix}",
            )

    def show(self, done: int, label: str = "") -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(done - self._bar.n)
            return
        filled = self.width if self.total == 0 else self.width * done // self.total
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} {label}"
        self.stream.write(line.rstrip() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
