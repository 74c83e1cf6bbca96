"""Serving the console (`web.*` with `health.*`), its config and its token commands."""

from __future__ import annotations

import io
import socket
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.app.root import Root
from bot.cli import main
from bot.config.settings import ConfigError, Settings, WebSettings, load_settings
from bot.web.auth import Gate, hash_token
from bot.web.serve import start_http
from memory.contract.types import Session
from memory.testing.reference import ReferenceProvider
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def status(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(url, allow_redirects=False) as r:
        return r.status


@pytest.mark.parametrize("same_port", [True, False], ids=["one-port", "two-ports"])
async def test_console_and_health_on_one_port_or_two(engine: AsyncEngine, same_port: bool) -> None:
    health_port = free_port()
    web_port = health_port if same_port else free_port()
    settings = Settings.model_validate(
        {
            "health": {"enabled": True, "port": health_port},
            "web": {"enabled": True, "port": web_port},
        }
    )
    servers = await start_http(settings, engine, ReferenceProvider(engine))
    assert servers is not None
    try:
        assert len(servers.servers) == (1 if same_port else 2)
        assert await status(f"http://127.0.0.1:{health_port}/healthz") == 200
        assert await status(f"http://127.0.0.1:{web_port}/login") == 200
        assert await status(f"http://127.0.0.1:{web_port}/sessions") == 303  # to the login
        if not same_port:  # the console is not on the health port, nor health on its
            assert await status(f"http://127.0.0.1:{health_port}/login") == 404
            assert await status(f"http://127.0.0.1:{web_port}/healthz") == 404
    finally:
        await servers.stop()


async def test_nothing_served_when_both_are_off(engine: AsyncEngine) -> None:
    assert await start_http(Settings(), engine, ReferenceProvider(engine)) is None


def test_token_commands(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    assert main(["web", "token", "--name", "ann", "--role", "operator"]) == 0
    out = capsys.readouterr().out
    token = out.split("not stored): ", 1)[1].split()[0]
    line = out.splitlines()[-1]
    assert f"token_sha256: {hash_token(token)}" in line and "role: operator" in line
    monkeypatch.setattr("sys.stdin", io.StringIO(token + "\n"))
    assert main(["web", "hash-token"]) == 0
    assert capsys.readouterr().out.strip() == hash_token(token)
    # The line is valid config, and that token logs in.
    (tmp_path / "config.yaml").write_text("web:\n  operators:\n  " + line + "\n")
    web = load_settings(tmp_path / "config.yaml").web
    assert Gate(web).operator_for(token).name == "ann"  # type: ignore[union-attr]
    assert Gate(web).operator_for(token + "x") is None


@pytest.mark.parametrize(
    ("operators", "says"),
    [
        ([{"name": "a", "token_sha256": "abc"}], "64 hex digits"),
        ([{"name": "a", "role": "admin", "token_sha256": "0" * 64}], "role"),
        (
            [{"name": "a", "token_sha256": "0" * 64}, {"name": "a", "token_sha256": "1" * 64}],
            "each operator name once",
        ),
        (
            [{"name": "a", "token_sha256": "0" * 64}, {"name": "b", "token_sha256": "0" * 64}],
            "different token",
        ),
    ],
)
def test_bad_operators_are_config_errors(tmp_path: Path, operators: list, says: str) -> None:
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"web": {"operators": operators}}))
    with pytest.raises(ConfigError, match=says):
        load_settings(path)


def test_cookies_end_with_the_token_or_the_operator() -> None:
    ann = {"name": "ann", "role": "operator", "token_sha256": hash_token("t1")}
    gate = Gate(WebSettings.model_validate({"operators": [ann], "session_secret": "k" * 32}))
    cookie = gate.session_cookie(gate.settings.operators[0])
    assert gate.read_session(cookie).name == "ann"  # type: ignore[union-attr]
    rotated = Gate(
        WebSettings.model_validate(
            {"operators": [{**ann, "token_sha256": hash_token("t2")}], "session_secret": "k" * 32}
        )
    )
    assert rotated.read_session(cookie) is None
    demoted = Gate(
        WebSettings.model_validate(
            {"operators": [{**ann, "role": "viewer"}], "session_secret": "k" * 32}
        )
    )
    assert demoted.read_session(cookie) is None
    other_key = Gate(WebSettings.model_validate({"operators": [ann], "session_secret": "j" * 32}))
    assert other_key.read_session(cookie) is None
    assert gate.read_session(cookie.replace("operator", "operatox")) is None


def test_one_port_cannot_listen_on_two_addresses(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("health: {enabled: true, listen: 0.0.0.0}\nweb: {enabled: true}\n")
    with pytest.raises(ConfigError, match=r"web.listen \(127.0.0.1\) differs from health.listen"):
        load_settings(path)
    path.write_text("health: {enabled: true, listen: 0.0.0.0}\nweb: {enabled: true, port: 9465}\n")
    assert load_settings(path).web.port == 9465


async def test_the_running_bot_serves_the_console_of_its_own_turns(
    llm_server: FakeOpenAI, tmp_path: Path
) -> None:
    """`mnemo run`'s root with `web.enabled`: a turn through the pool, then the console
    on the health server's port lists the session and shows the turn in its context."""
    port = free_port()
    settings = make_settings(
        llm_server,
        tmp_path / "data",
        memory={"provider": "lcm"},
        database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
        health={"enabled": True, "port": port},
        web={
            "enabled": True,
            "port": port,
            "operators": [{"name": "ann", "role": "viewer", "token_sha256": hash_token("tok-ann")}],
        },
    )
    root = Root(settings, reflect=False)
    async with root.started() as services:
        llm_server.push(text("Cellos are lovely."))
        session = await services.conversations.current_session(
            Session("fake:7", "default", 7, "fake")
        )
        assert not (await services.conversations.chat(session, "I play the cello")).error
        base = f"http://127.0.0.1:{port}"
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            form = await (await http.get(f"{base}/login")).text()
            csrf = form.split('name="csrf" value="')[1].split('"')[0]
            await http.post(f"{base}/login", data={"token": "tok-ann", "csrf": csrf})
            listing = await (await http.get(f"{base}/sessions")).text()
            assert session.id in listing
            page = await (await http.get(f"{base}/sessions/{quote(session.id, safe='')}")).text()
            context = page.split('id="context"')[1].split('id="history"')[0]
            assert "I play the cello" in context and "Cellos are lovely." in context
            assert (await http.get(f"{base}/healthz")).status == 200
