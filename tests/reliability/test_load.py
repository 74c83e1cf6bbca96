"""A smaller run of bench/load_chats.py: 200 concurrent chats x 3 messages through the
real bot subprocess. Correctness only (no timing): no error reply, every message
answered once and stored once. The full load (1,000 x 5) and its RSS/fd figures are in
bench/RESULTS.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.load_chats import run_load


@pytest.mark.slow
async def test_200_chats_x_3_messages(tmp_path: Path) -> None:
    result = await run_load(200, 3, "sqlite", tmp_path)
    assert result.errors == []
    assert result.answered == 600
    assert (result.stored_user, result.stored_assistant) == (600, 600)
