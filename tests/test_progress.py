"""The operator's progress bar: redrawn in place on a terminal, one line per step
elsewhere."""

from __future__ import annotations

import io
import sys

import pytest

from bot.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_is_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)  # the default stream, as the commands use
    bar = ProgressBar(3)
    for done in range(4):
        bar.show(done, "embedded")
    bar.close()
    out = screen.getvalue()
    assert "\r" in out and out.count("\n") == 1  # redraws, then one line left behind
    assert "3/3" in out.rsplit("\r", 1)[-1] and "embedded" in out


def test_elsewhere_each_step_is_a_line() -> None:
    log = io.StringIO()
    bar = ProgressBar(2, stream=log, width=4)
    for done in range(3):
        bar.show(done, "compacted")
    bar.close()
    assert log.getvalue().splitlines() == [
        "[....] 0/2 compacted",
        "[##..] 1/2 compacted",
        "[####] 2/2 compacted",
    ]
