"""The wheel on its own: built from this tree, installed into a fresh virtualenv, run in
an empty directory with no config file, configured by the environment alone."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import clean_env
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]
REFUSAL = "Sorry, this is a private bot and I can't talk with you. Ask its operator for access."


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `mnemo` script of a fresh virtualenv holding the built wheel and its
    dependencies (pip reads the configured package index)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"  # a copy: building in the tree would leave build/ behind
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("bot", "memory", "plugins"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(root), str(src)], check=True)
    [wheel] = root.glob("mnemo-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = [str(venv / "bin" / "python"), *pip[1:], "install", str(wheel)]
    subprocess.run(install, check=True, timeout=scaled(900))
    return venv / "bin" / "mnemo"


def outside_env(**settings: str) -> dict[str, str]:
    """Nothing that configures mnemo, nor points Python at this tree."""
    return {k: v for k, v in clean_env(**settings).items() if not k.startswith("PYTHON")}


@pytest.mark.slow
async def test_the_installed_wheel_runs_on_two_variables_in_an_empty_directory(
    installed: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    # The package comes from the virtualenv, not from this tree.
    where = await asyncio.to_thread(
        subprocess.check_output,
        [str(installed.with_name("python")), "-c", "import bot; print(bot.__file__)"],
        cwd=empty,
        env=outside_env(),
        text=True,
    )
    assert where.startswith(str(installed.parents[1])) and "site-packages" in where
    async with FakeTelegram() as tg, FakeOpenAI() as llm:
        env = outside_env(
            TELEGRAM_BOT_TOKEN=tg.token,
            OPENAI_API_KEY="sk-test-wheel-key",
            # Where the fakes listen (the real servers are the defaults), and who may talk.
            OPENAI_BASE_URL=llm.base_url,
            MNEMO_TELEGRAM__BASE_URL=tg.base_url,
            MNEMO_TELEGRAM__ALLOWED_IDS="42",
        )
        proc = await asyncio.create_subprocess_exec(
            str(installed),
            "run",
            cwd=empty,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            # Polled, not tg.wait_for: a bot that dies makes no API call to wake a waiter.
            for _ in range(1200):
                if tg.calls_to("getUpdates") or proc.returncode is not None:
                    break
                await asyncio.sleep(0.1)
            assert proc.returncode is None, "the bot stopped before polling"
            assert tg.calls_to("getUpdates"), "the bot did not poll within 120 s"
            tg.private(42).send("hello from the wheel")
            await tg.wait_for_message(42, contains="echo: hello from the wheel", within=120)
            tg.private(99).send("let me in")  # not in MNEMO_TELEGRAM__ALLOWED_IDS
            await tg.wait_for(lambda: tg.bot_messages(99), within=120)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), scaled(120))
    log = out.decode() + err.decode()
    assert proc.returncode == 0, log
    assert [m.text for m in tg.bot_messages(99)] == [REFUSAL]
    assert [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"] == [
        "hello from the wheel"
    ]
    assert tg.token.split(":")[1] not in log and "sk-test-wheel-key" not in log
    assert (empty / "data" / "mnemo.db").exists()  # the default database, made here
