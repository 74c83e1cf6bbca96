"""The webhook guide's deploy, as far as this machine allows (no Docker): the nginx server
of deploy/nginx/webhook.conf terminates TLS with a self-signed certificate in front of two
`mnemo run` webhook replicas on one PostgreSQL. No secret is configured: both replicas
derive the same one from the token, so Telegram's updates, spread over both by nginx, are
answered whichever replica gets them; a wrong or missing secret gets 403 from either."""

from __future__ import annotations

import shutil
import signal
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import ClientSession, TCPConnector

from bot.channels.telegram.channel import derived_webhook_secret
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.ops.test_replicas_e2e import free_port, mnemo, replica_configs, stop_all, turns_served

REPO = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

pytestmark = [
    pytest.mark.slow,  # two `mnemo run` processes start, migrate and stop
    pytest.mark.postgres,
    pytest.mark.skipif(
        not Path(NGINX).exists(),
        reason="nginx is not installed (`make test` installs it as root: apt-get install nginx-light)",
    ),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
]


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "fullchain.pem", folder / "privkey.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
    )
    return cert, key


def render(conf: str, *, upstreams: list[int], port: int, certs: Path) -> str:
    """deploy/nginx/webhook.conf with this machine's addresses instead of Docker's: each
    replaced string must be there, so the test follows the file it checks."""
    swaps = {
        "server bot:8443;": " ".join(f"server 127.0.0.1:{p};" for p in upstreams),
        "listen 443 ssl;": f"listen 127.0.0.1:{port} ssl;",
        "/etc/nginx/certs/": f"{certs}/",
    }
    for old, new in swaps.items():
        assert old in conf, old
        conf = conf.replace(old, new)
    return conf


@contextmanager
def nginx(tmp: Path, server_conf: str) -> Iterator[None]:
    (tmp / "logs").mkdir()
    (tmp / "webhook.conf").write_text(server_conf, encoding="utf-8")
    (tmp / "nginx.conf").write_text(
        f"""
pid {tmp}/nginx.pid;
error_log {tmp}/logs/error.log;
events {{}}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    include {tmp}/webhook.conf;
}}
""",
        encoding="utf-8",
    )
    argv = [NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-g", "daemon off;"]
    subprocess.run([*argv, "-t"], check=True, capture_output=True)
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful: finishes requests in flight
        proc.wait(60)


async def test_two_replicas_behind_the_tls_proxy_share_the_derived_secret(
    tmp_path: Path,
) -> None:
    cert, _ = self_signed(tmp_path)
    hooks, health, public = [free_port(), free_port()], [free_port(), free_port()], free_port()
    url = f"https://127.0.0.1:{public}/telegram"
    conf = (REPO / "deploy/nginx/webhook.conf").read_text(encoding="utf-8")
    (tmp_path / "nginx").mkdir()
    with nginx(tmp_path / "nginx", render(conf, upstreams=hooks, port=public, certs=tmp_path)):
        async with (
            temp_database_url("postgres", tmp_path) as db_url,
            FakeTelegram(webhook_ca=str(cert)) as tg,
            FakeOpenAI() as llm,
        ):
            # No secret_token: the rule under test is the one for an unset secret.
            configs = replica_configs(
                tmp_path, db_url=db_url, tg=tg, llm=llm, url=url, hooks=hooks, health=health,
                secret=None,
            )  # fmt: skip
            procs = [await mnemo("run", "--config", str(c)) for c in configs]
            try:
                await tg.wait_for(lambda: len(tg.calls_to("setWebhook")) >= 2, within=120)
                # The fake Bot API posts each update over HTTPS to the proxy (trusting the
                # certificate as Telegram trusts a CA's); nginx alternates the replicas.
                for user in range(4):
                    tg.private(7000 + user).send(f"hello {user}")
                for user in range(4):
                    await tg.wait_for_message(
                        7000 + user, contains=f"echo: hello {user}", within=120
                    )
                assert set(tg.webhook["responses"]) == {200}
                secrets = {call.params.get("secret_token") for call in tg.calls_to("setWebhook")}
                assert secrets == {derived_webhook_secret(tg.token)}
                async with ClientSession() as http:
                    served = [await turns_served(http, port) for port in health]
                assert served == [2.0, 2.0], served  # round robin: both replicas answered

                https = ssl.create_default_context(cafile=str(cert))
                forged = {"update_id": 10**6, "message": {
                    "message_id": 1, "date": 0, "text": "forged",
                    "chat": {"id": 66, "type": "private", "first_name": "M"},
                    "from": {"id": 66, "is_bot": False, "first_name": "M"}}}  # fmt: skip
                async with ClientSession(connector=TCPConnector(ssl=https)) as http:
                    for _ in range(2):  # once to each replica
                        for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
                            async with http.post(url, json=forged, headers=headers) as resp:
                                assert resp.status == 403
            finally:
                outputs = await stop_all(procs)
            for proc, (_, err) in zip(procs, outputs, strict=True):
                assert proc.returncode == 0, err.decode()[-3000:]
                assert tg.token not in err.decode()
                assert derived_webhook_secret(tg.token) not in err.decode()
            assert tg.bot_messages(66) == []
