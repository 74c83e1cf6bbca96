"""A COMMIT whose answer was lost is run again only by work that may run twice."""

from __future__ import annotations

import pytest

from memory.storage.db import CommitUncertain, retry_on_disconnect


async def test_idempotent_work_is_run_again_after_a_lost_commit_answer() -> None:
    calls: list[int] = []

    async def bootstrap() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise CommitUncertain("lost")
        return "done"

    assert await retry_on_disconnect(bootstrap, "bootstrap", idempotent=True) == "done"
    assert len(calls) == 2


async def test_other_work_is_not_repeated_blindly() -> None:
    calls: list[int] = []

    async def append() -> None:
        calls.append(1)
        raise CommitUncertain("lost")

    with pytest.raises(CommitUncertain):
        await retry_on_disconnect(append, "append")
    assert len(calls) == 1
