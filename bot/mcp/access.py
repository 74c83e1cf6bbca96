"""Who may reach a memory through the MCP endpoint: tokens, their checks, the record of
every access, the rate limit.

- A token is 32 random bytes (`mnemo_mcp_` + URL-safe base64), shown once by `/memory mcp
  on`; the database keeps its SHA-256 only (a token this random needs no slow hash: the
  digest of a leaked table reveals no token and cannot be guessed back). It reads one
  memory, its issuer's own (user, agent, channel: the private chat's), with one scope
  (`SCOPE`, read-only), until it expires (`mcp.token_ttl`) or is revoked (`/memory mcp
  off`; a new `on` revokes the older ones: one live token per person).
- Every request is recorded (token, user, tool, outcome, when) in its own transaction,
  refused ones included; the rate limit counts those rows, so it holds across replicas
  and restarts: at most `mcp.requests_per_minute` per token.
- An erasure of the person (`/memory forget everything`, `mnemo memory erase`) deletes
  their tokens and their record with the memory (`register`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.types import utcnow

if TYPE_CHECKING:
    from bot.config.settings import McpSettings
from memory.storage import forgetting as fg
from memory.storage.db import write_transaction
from memory.storage.forgetting import Owner

PATH = "/mcp"  # where the endpoint answers
SCOPE = "memory:read"  # the one scope a token has: read its issuer's own memory
TOKEN_PREFIX = "mnemo_mcp_"
LISTED = 10  # accesses `/memory mcp` shows

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_meta = sa.MetaData()
mcp_tokens = sa.Table(
    "mcp_tokens",
    _meta,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("agent_id", sa.String(64), nullable=False),
    sa.Column("channel", sa.String(32), nullable=False),
    sa.Column("scope", sa.String(32), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
)
mcp_accesses = sa.Table(
    "mcp_accesses",
    _meta,
    sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
    sa.Column("token_id", sa.String(16), nullable=False),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("tool", sa.String(32), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Grant:
    """What a valid token lets its bearer read."""

    token_id: str
    user_id: int
    agent_id: str
    channel: str
    scope: str
    expires_at: datetime


@dataclass(frozen=True)
class Issued:
    token: str  # shown once, never stored
    grant: Grant


@dataclass(frozen=True)
class Access:
    at: datetime
    tool: str
    outcome: str
    token_id: str


class AccessStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def issue(self, user_id: int, agent_id: str, channel: str, ttl_s: float) -> Issued:
        """A new token for the user's own memory; the user's older tokens are revoked."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = utcnow()
        grant = Grant(
            "t_" + secrets.token_hex(6),
            user_id,
            agent_id,
            channel,
            SCOPE,
            now + timedelta(seconds=ttl_s),
        )
        async with write_transaction(self.engine) as conn:
            await _revoke(conn, user_id, agent_id, now)
            await conn.execute(
                mcp_tokens.insert().values(
                    id=grant.token_id,
                    token_sha256=digest(token),
                    user_id=user_id,
                    agent_id=agent_id,
                    channel=channel,
                    scope=SCOPE,
                    created_at=now,
                    expires_at=grant.expires_at,
                    revoked_at=None,
                )
            )
        return Issued(token, grant)

    async def revoke(self, user_id: int, agent_id: str) -> int:
        """Revoke every live token of the user; how many there were."""
        async with write_transaction(self.engine) as conn:
            return await _revoke(conn, user_id, agent_id, utcnow())

    async def verify(self, token: str) -> Grant | None:
        """The grant of a live token (known, not revoked, not expired), else None. The
        lookup is by digest; the stored digest is compared again in constant time."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        wanted = digest(token)
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(sa.select(mcp_tokens).where(mcp_tokens.c.token_sha256 == wanted))
            ).first()
        if row is None or not hmac.compare_digest(row.token_sha256, wanted):
            return None
        grant = Grant(
            row.id, row.user_id, row.agent_id, row.channel, row.scope, _aware(row.expires_at)
        )
        ended = "revoked" if row.revoked_at is not None else ""
        ended = ended or ("expired" if grant.expires_at <= utcnow() else "")
        if ended:  # its owner sees the attempt in /memory mcp
            await self.record(grant, "-", ended)
            return None
        return grant

    async def admit(self, grant: Grant, tool: str, per_minute: int) -> bool:
        """Record one request with `grant` for `tool`: True when it is within the rate
        limit (recorded `ok`, or `limited` when refused). One transaction, so two
        replicas counting at once still see each other's rows."""
        now = utcnow()
        async with write_transaction(self.engine) as conn:
            recent = await conn.scalar(
                sa.select(sa.func.count()).where(
                    mcp_accesses.c.token_id == grant.token_id,
                    mcp_accesses.c.outcome == "ok",
                    mcp_accesses.c.at > now - timedelta(minutes=1),
                )
            )
            allowed = int(recent or 0) < per_minute
            await conn.execute(
                mcp_accesses.insert().values(
                    token_id=grant.token_id,
                    user_id=grant.user_id,
                    tool=tool[:32],
                    outcome="ok" if allowed else "limited",
                    at=now,
                )
            )
        return allowed

    async def record(self, grant: Grant, tool: str, outcome: str) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                mcp_accesses.insert().values(
                    token_id=grant.token_id,
                    user_id=grant.user_id,
                    tool=tool[:32],
                    outcome=outcome[:16],
                    at=utcnow(),
                )
            )

    async def live(self, user_id: int, agent_id: str) -> list[Grant]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(mcp_tokens)
                    .where(
                        mcp_tokens.c.user_id == user_id,
                        mcp_tokens.c.agent_id == agent_id,
                        mcp_tokens.c.revoked_at.is_(None),
                        mcp_tokens.c.expires_at > utcnow(),
                    )
                    .order_by(mcp_tokens.c.created_at)
                )
            ).all()
        return [
            Grant(r.id, r.user_id, r.agent_id, r.channel, r.scope, _aware(r.expires_at))
            for r in rows
        ]

    async def accesses(self, user_id: int, limit: int = LISTED) -> list[Access]:
        """The user's newest accesses, newest first."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(mcp_accesses)
                    .where(mcp_accesses.c.user_id == user_id)
                    .order_by(mcp_accesses.c.id.desc())
                    .limit(limit)
                )
            ).all()
        return [Access(_aware(r.at), r.tool, r.outcome, r.token_id) for r in rows]


async def _revoke(conn: AsyncConnection, user_id: int, agent_id: str, now: datetime) -> int:
    result = await conn.execute(
        mcp_tokens.update()
        .where(
            mcp_tokens.c.user_id == user_id,
            mcp_tokens.c.agent_id == agent_id,
            mcp_tokens.c.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )
    return int(result.rowcount or 0)


def _aware(value: datetime) -> datetime:
    """SQLite gives back naive datetimes of what was written in UTC."""
    from datetime import UTC

    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


async def erase_access(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    tokens = await conn.execute(
        mcp_tokens.delete().where(
            mcp_tokens.c.user_id == owner.user_id, mcp_tokens.c.agent_id == owner.agent_id
        )
    )
    accesses = await conn.execute(
        mcp_accesses.delete().where(mcp_accesses.c.user_id == owner.user_id)
    )
    return {
        "MCP token(s)": int(tokens.rowcount or 0),
        "MCP access record(s)": int(accesses.rowcount or 0),
    }


def register() -> None:
    fg.on_erase("mcp_access", erase_access)


def public_url(settings: McpSettings) -> str:
    """What people are told to connect to: `mcp.public_url`, else the listen address."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = "localhost" if settings.listen in ("0.0.0.0", "::") else settings.listen
    return f"http://{host}:{settings.port}{PATH}"
