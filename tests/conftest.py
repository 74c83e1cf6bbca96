"""Shared fixtures: every storage test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.testing.databases import temp_database_url, temp_engine
from tests.waits import factor


def _clear_setting_variables() -> None:
    """A developer's shell may configure mnemo (TELEGRAM_BOT_TOKEN, MNEMO_LLM__MODEL...),
    and the environment overrides config files: the tests' bots are set up by the tests."""
    from bot.config.env import setting_variables
    from bot.config.settings import Settings

    for name in setting_variables(Settings, os.environ):
        del os.environ[name]


_clear_setting_variables()

DB_KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limit (pyproject's `timeout`, `--timeout` or a test's own mark) is
    a hang guard like every other wait: scaled to the machine's load (tests/waits.py)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    scale = factor()
    default = config.getoption("timeout", None) or config.getini("timeout") or 0
    for item in items:
        mark = item.get_closest_marker("timeout")
        kwargs = dict(mark.kwargs) if mark else {}
        base = float(mark.args[0] if mark and mark.args else kwargs.pop("timeout", default))
        kwargs.pop("timeout", None)
        if base > 0:  # 0: no limit
            item.add_marker(pytest.mark.timeout(base * scale, **kwargs), append=False)


@pytest.fixture(autouse=True)
def _quiet_loggers() -> None:
    for name in ("alembic", "httpx", "httpx2", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


@pytest.fixture(params=DB_KINDS)
def db_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def db_url(db_kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """An empty, unmigrated database URL."""
    async with temp_database_url(db_kind, tmp_path) as url:
        yield url


@pytest.fixture
async def engine(db_kind: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated engine on a throwaway database (SQLite and PostgreSQL)."""
    async with temp_engine(db_kind, tmp_path) as eng:
        yield eng
