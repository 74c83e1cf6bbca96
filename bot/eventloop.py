"""The event loop every `mnemo` command runs on.

uvloop where it is installed (a dependency on Linux and macOS): the bot spends its time in
sockets and callbacks, and uvloop cuts its CPU per update by about a fifth
(bench/RESULTS.md). `MNEMO_EVENT_LOOP=asyncio` keeps the standard loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a new event loop."""
    if os.environ.get("MNEMO_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)
