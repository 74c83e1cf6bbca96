"""The operator's progress bar: redrawn in place on a terminal, one line per step
elsewhere."""

from __future__ import annotations

import io
import sys

import pytest

from bot.ops.progress import ProgressBar


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


def test_elsewhere_each_step_is_a_line_with_rate_and_time_left() -> None:
    log = io.StringIO()
    now = [100.0]
    bar = ProgressBar(4, stream=log, width=4, unit="summaries", clock=lambda: now[0])
    for done in range(3):
        bar.show(done, "tg:1")
        now[0] += 40
    bar.show(5)  # more work than estimated: the total follows
    bar.close()
    assert log.getvalue().splitlines() == [
        "[....] 0/4 summaries tg:1",
        "[#...] 1/4 summaries (0.03/s, 2m00s left) tg:1",
        "[##..] 2/4 summaries (0.03/s, 1m20s left) tg:1",
        "[####] 5/5 summaries (0.04/s, 0s left)",
    ]
