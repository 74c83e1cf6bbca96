"""`memory` re-exports the public contract lazily, without pulling in bot or plugins."""

from __future__ import annotations

import subprocess
import sys

import memory
from tests.waits import scaled


def test_every_public_name_resolves() -> None:
    for name in memory.__all__:
        assert getattr(memory, name) is not None, name
    from memory import Session, build_tool, estimate_tokens, run_tool, unwrap, with_tracing

    assert estimate_tokens("abcde") == 2
    assert callable(build_tool) and callable(run_tool) and callable(with_tracing)
    assert unwrap(Session("x")) == Session("x")


def test_import_is_light() -> None:
    code = (
        "import sys, memory; from memory import Session; "
        "print(sorted(m.split('.')[0] for m in sys.modules "
        "if m.split('.')[0] in ('bot', 'plugins', 'sqlalchemy', 'openai', 'telegram')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=scaled(60)
    ).stdout
    assert out.strip() == "[]"
