"""The compatibility check against a real llama.cpp server (bench/llama_compat.py): the
bot's conversation with `llama-server` running Gemma 3's strict template, /compact, a
failed turn and its recovery, /memory ask, embeddings and hybrid search. Skipped where
no llama-server binary or GGUF model is at hand (MNEMO_LLAMA_SERVER, MNEMO_LLAMA_MODEL,
or the default paths in the script); docs/OPERATIONS.md says how to build one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.llama_compat import STEPS, default_model, default_server

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # two real model servers on the CPU: minutes
def test_conversation_on_a_real_llama_server_passes_every_step() -> None:
    server, model = default_server(), default_model()
    if not server or not Path(server).exists():
        pytest.skip("no llama-server binary (set MNEMO_LLAMA_SERVER; docs/OPERATIONS.md)")
    if not model or not Path(model).exists():
        pytest.skip("no GGUF model (set MNEMO_LLAMA_MODEL; docs/OPERATIONS.md)")
    done = subprocess.run(
        [sys.executable, "-m", "bench.llama_compat", "--server", server, "--model", model],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3 * 3600,  # a ceiling for a stuck server, not a timing: turns take minutes
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for name in STEPS:
        assert f"[ok] {name}:" in done.stdout, done.stdout
    assert "RESULT: all steps passed" in done.stdout
