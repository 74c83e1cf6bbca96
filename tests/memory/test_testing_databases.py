"""memory.testing.databases on the shared PostgreSQL server: every database it makes
carries the run's id, and the databases of a killed process are dropped by the next
process that makes one, while those of a process still alive (its owner lock held,
wherever it runs) are left alone. Each scenario runs in fresh processes: the sweep runs
once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from memory.testing.databases import OWNER_LOCK_SPACE, PG_ADMIN_URL, PREFIX
from tests.waits import scaled

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
RUN = "feedc0de" + "0" * 24  # what pytest-xdist would give its workers

# "die": makes a migrated database (a template and a pooled copy) and an empty one,
# prints their names and exits at once, as a killed process would (no atexit).
# "sweep": makes an empty database (so sweeps first) and exits normally.
CHILD = """
import asyncio, os, sys
from pathlib import Path
from memory.testing.databases import temp_database_url, temp_engine

async def main():
    if sys.argv[1] == "sweep":
        async with temp_database_url("postgres", Path(".")) as url:
            print(url.rsplit("/", 1)[1], flush=True)
        return
    async with temp_engine("postgres", Path(".")) as engine:
        async with temp_database_url("postgres", Path(".")) as url:
            print(engine.url.database, url.rsplit("/", 1)[1], flush=True)
            os._exit(9)

asyncio.run(main())
"""


def _child(mode: str, tmp_path: Path) -> list[str]:
    env = {**os.environ, "PYTEST_XDIST_TESTRUNUID": RUN, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert proc.returncode == (9 if mode == "die" else 0), proc.stderr
    return proc.stdout.split()


@pytest.fixture
def admin() -> Iterator[object]:
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _ours(conn) -> set[str]:  # type: ignore[no-untyped-def]
    rows = conn.execute(
        text("SELECT datname FROM pg_database WHERE datname LIKE :p"),
        {"p": f"{PREFIX}{RUN[:8]}\\_%"},
    )
    return set(rows.scalars())


@pytest.mark.slow  # kills a process: `make test-slow`
def test_names_carry_the_run_and_a_killed_process_is_swept(tmp_path: Path, admin) -> None:  # type: ignore[no-untyped-def]
    pooled, empty = _child("die", tmp_path)
    left = _ours(admin)
    assert {pooled, empty} <= left, left  # the killed process could not drop them
    assert all(name.startswith(f"{PREFIX}{RUN[:8]}_") for name in left)
    assert any("_tpl_" in name for name in left)  # the template it copied from, too
    _child("sweep", tmp_path)  # which also drops its own database as it exits
    assert _ours(admin) == set()


def test_a_live_owner_is_never_swept(tmp_path: Path, admin) -> None:  # type: ignore[no-untyped-def]
    """A database whose owner lock is held (a run on another machine, whose pid means
    nothing here) stays; once the lock is gone it is swept."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    owner = 0x7E57AB1E
    name = f"{PREFIX}{RUN[:8]}_{gone}_{owner:08x}_t_00000001"
    holder = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with holder.connect() as lock:
            lock.execute(
                text("SELECT pg_advisory_lock_shared(:s, :o)"), {"s": OWNER_LOCK_SPACE, "o": owner}
            )
            admin.execute(text(f'CREATE DATABASE "{name}"'))
            _child("sweep", tmp_path)
            assert name in _ours(admin)
        _child("sweep", tmp_path)  # the lock went with its connection
        assert name not in _ours(admin)
    finally:
        holder.dispose()
        admin.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
