"""A model server's URL as an operator writes it, made into what the openai client sends.

A proxy in front of a local server (nginx with basic auth before llama-server) is
written `http://user:password@host/v1`. aiohttp refuses a URL with credentials when an
Authorization header is also set, and the openai client always sets one (the bearer
key), so every call failed. The credentials are taken out of the URL and sent as HTTP
Basic auth instead: a request carries one Authorization header, so the key is then not
sent (the caller warns when one was configured).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit


@dataclass(frozen=True)
class ServerURL:
    """What to give `openai.AsyncOpenAI`: the URL without credentials, and the headers
    replacing the bearer key (empty without credentials)."""

    base_url: str | None
    headers: dict[str, str]
    secrets: tuple[str, ...]  # the header's value, to mask wherever secrets are masked

    @property
    def basic_auth(self) -> bool:
        return bool(self.headers)


def server_url(url: str | None) -> ServerURL:
    """`url` split into the URL the client calls and the Basic auth its credentials make."""
    if not url:
        return ServerURL(url or None, {}, ())
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return ServerURL(url, {}, ())
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    plain = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    value = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return ServerURL(plain, {"Authorization": value}, (value, value.split(" ", 1)[1]))
