"""The image's entrypoint and health check (deploy/entrypoint.py, deploy/healthcheck.py),
run as the image runs them: `mnemo run` without a token waits, unhealthy and saying why,
instead of exiting into Docker's restart loop; any other exit is passed on; docker stop's
SIGTERM reaches the bot."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.ops.test_replicas_e2e import free_port
from tests.waits import scaled

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = [sys.executable, str(ROOT / "deploy/entrypoint.py")]
HEALTHCHECK = [sys.executable, str(ROOT / "deploy/healthcheck.py")]
MNEMO = str(Path(sys.executable).parent / "mnemo")  # the console script, as in the image


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "OPENAI_"))}
    return clean | {"MNEMO_HOLD_FILE": str(tmp_path / "held"), "MNEMO_CONFIG": ""}


def until(predicate: Callable[[], bool], what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.fixture()
def no_token_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path}/m.db'}}\n"
        f"data_dir: {tmp_path}/data\nllm: {{api_key: test-key}}\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture()
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:  # whatever a failed assertion left running
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_missing_token_waits_unhealthy_instead_of_restarting(
    env: dict[str, str], no_token_config: Path, started: list[subprocess.Popen[str]]
) -> None:
    held = Path(env["MNEMO_HOLD_FILE"])
    held.write_text("left by an earlier run\n", encoding="utf-8")  # a restart starts afresh
    proc = subprocess.Popen(
        [*ENTRYPOINT, MNEMO, "run", "--config", str(no_token_config)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(proc)
    until(lambda: "earlier" not in held.read_text(encoding="utf-8") if held.exists() else False,
          "the entrypoint never held")  # fmt: skip
    assert proc.poll() is None  # still up: the restart policy has nothing to restart
    reason = held.read_text(encoding="utf-8")
    assert "no Telegram bot token: set TELEGRAM_BOT_TOKEN" in reason
    check = subprocess.run(HEALTHCHECK, env=env, capture_output=True, text=True)
    assert check.returncode == 1
    assert "configuration error: mnemo: no Telegram bot token" in check.stdout
    proc.send_signal(signal.SIGTERM)  # docker stop
    _, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 0
    assert err.count("no Telegram bot token") == 1  # said once, not once per restart
    assert "waiting instead of restarting" in err


def test_other_exits_and_one_off_commands_pass_through(
    env: dict[str, str], no_token_config: Path
) -> None:
    held = Path(env["MNEMO_HOLD_FILE"])
    # A one-off command's configuration error exits at once, with mnemo's code.
    done = subprocess.run(
        [*ENTRYPOINT, MNEMO, "memory", "sessions", "--config", str(no_token_config) + ".none"],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 2 and "mnemo: " in done.stderr
    # A crash (any code but 2) exits too: the restart policy restarts the bot.
    crash = subprocess.run(
        [*ENTRYPOINT, "sh", "-c", "echo boom >&2; exit 3"], env=env, capture_output=True, text=True
    )
    assert (crash.returncode, crash.stderr) == (3, "boom\n")
    assert not held.exists()


def test_docker_stop_reaches_the_command(
    env: dict[str, str], started: list[subprocess.Popen[str]]
) -> None:
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        "print('ready', file=sys.stderr, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [*ENTRYPOINT, sys.executable, "-c", child], env=env, stderr=subprocess.PIPE, text=True
    )
    started.append(proc)
    assert proc.stderr is not None and proc.stderr.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=scaled(60)) == 7


async def test_the_health_check_probes_healthz(env: dict[str, str]) -> None:
    async def check(port: int) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            *HEALTHCHECK, str(port), env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode()

    port = free_port()
    code, out = await check(port)
    assert code == 1 and f"/healthz on port {port}" in out

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        code, out = await check(port)
        assert code == 0 and '"ok"' in out
    finally:
        await runner.cleanup()
