"""Who may use the console: operators from config, signed session cookies, CSRF tokens.

Tokens are never stored: the config holds each operator's SHA-256 (`mnemo web
hash-token`), a login hashes what was typed and compares digests in constant time. A
login gives a cookie `name|role|expiry|nonce|key` signed with HMAC-SHA256
(`web.session_secret`, or a random key per start); `key` ties it to the operator's
current token digest, so changing a token in config (or removing the operator) ends
their sessions at once. No server-side table: the cookie is the session.

CSRF: every form carries `HMAC(secret, "csrf" | nonce)` of the session (before login, of
a short-lived `pre` cookie), and every POST must send it back; with SameSite=Strict
cookies that is two locks on one door.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.config.settings import WebOperator, WebSettings

SESSION_COOKIE = "mnemo_session"
PRE_COOKIE = "mnemo_pre"  # the CSRF nonce of the login form


def hash_token(token: str) -> str:
    return hashlib.sha256(token.strip().encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Login:
    name: str
    role: str
    nonce: str

    @property
    def can_write(self) -> bool:
        return self.role == "operator"


class Gate:
    """Checks tokens, issues and reads session cookies, makes and checks CSRF tokens."""

    def __init__(self, settings: WebSettings) -> None:
        self.settings = settings
        configured = settings.session_secret.get_secret_value()
        self._key = configured.encode() if configured else secrets.token_bytes(32)

    # -- tokens ---------------------------------------------------------------------

    def operator_for(self, token: str) -> WebOperator | None:
        digest = hash_token(token)
        found = None
        for op in self.settings.operators:  # every one compared: no early exit to time
            if hmac.compare_digest(op.token_sha256, digest):
                found = op
        return found

    # -- session cookies ------------------------------------------------------------

    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._key, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def _token_key(self, op: WebOperator) -> str:
        return self._sign("token|" + op.token_sha256)[:16]

    def session_cookie(self, op: WebOperator) -> str:
        expiry = int(time.time() + self.settings.session_ttl_s)
        payload = "|".join(
            (op.name, op.role, str(expiry), secrets.token_hex(16), self._token_key(op))
        )
        return f"{payload}|{self._sign(payload)}"

    def read_session(self, cookie: str | None) -> Login | None:
        if not cookie or cookie.count("|") != 5:
            return None
        payload, _, signature = cookie.rpartition("|")
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        name, role, expiry, nonce, key = payload.split("|")
        if not expiry.isdigit() or int(expiry) < time.time():
            return None
        op = next((o for o in self.settings.operators if o.name == name), None)
        if op is None or op.role != role or not hmac.compare_digest(key, self._token_key(op)):
            return None
        return Login(name, role, nonce)

    # -- CSRF -----------------------------------------------------------------------

    def csrf_token(self, nonce: str) -> str:
        return self._sign("csrf|" + nonce)

    def csrf_ok(self, nonce: str | None, sent: object) -> bool:
        if not nonce or not isinstance(sent, str) or not sent:
            return False
        return hmac.compare_digest(sent, self.csrf_token(nonce))


# What the guard (bot/web/console.py) leaves on a request for its handler: who is logged
# in, and a POST's form once its CSRF token was checked.
LOGIN: web.RequestKey[Login | None] = web.RequestKey("login")
FORM: web.RequestKey[Any] = web.RequestKey("form")
