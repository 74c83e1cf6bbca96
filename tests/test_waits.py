"""tests/waits.py: the one rule every hang guard of the suite scales by."""

from __future__ import annotations

import os

import pytest

from tests import waits


def test_the_variable_sets_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(waits.ENV, "3")
    assert waits.scaled(20) == 60
    monkeypatch.setenv(waits.ENV, "0.5")  # a fast machine may shorten them too
    assert waits.scaled(20) == 10


@pytest.mark.parametrize("bad", ["fast", "0", "-2"])
def test_a_bad_variable_is_named(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(waits.ENV, bad)
    with pytest.raises(ValueError, match=waits.ENV):
        waits.factor()


def test_without_it_the_load_per_core_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(waits.ENV, raising=False)
    monkeypatch.setattr(waits, "_cores", lambda: 2)
    for load, expected in ((0.3, 1.0), (2.0, 1.0), (9.0, 4.5), (500.0, waits.MAX_AUTO_FACTOR)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert waits.factor() == expected


async def test_eventually_returns_the_first_result_that_holds() -> None:
    reads = iter([[], [], ["row"]])

    async def read() -> list[str]:
        return next(reads)

    assert await waits.eventually(read, bool) == ["row"]


async def test_eventually_fails_showing_the_last_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(waits.ENV, "1")

    async def read() -> list[str]:
        return ["left"]

    with pytest.raises(
        AssertionError, match=r"emptied did not hold within 0 s; last read: \['left'\]"
    ):
        await waits.eventually(read, lambda v: not v, within=0.2, what="emptied")
