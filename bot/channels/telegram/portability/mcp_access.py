"""`/memory mcp` in a private chat: the person's own MCP access (bot/mcp/).

- `/memory mcp on`: a new token (any older one revoked), shown once with the endpoint's
  URL and how to connect; only its digest is kept.
- `/memory mcp off`: every token of theirs revoked at once.
- `/memory mcp`: the live token (its id and expiry, never the token) and the newest
  accesses (when, which tool, the outcome).
In a group there is no such thing (a group's memory belongs to every member); with
`mcp.enabled` off, each says the operator has not turned the endpoint on.
"""

from __future__ import annotations

from bot.config.settings import McpSettings
from bot.mcp.access import AccessStore, public_url

OFF = (
    "The MCP endpoint is off on this bot (the operator turns it on with mcp.enabled); "
    "nothing can reach your memory through it."
)
USAGE = "Usage: /memory mcp on (a new token), /memory mcp off (revoke), /memory mcp (list)"


def is_mcp_command(words: str) -> bool:
    return words.lower().split()[:1] == ["mcp"]


async def mcp_command(
    store: AccessStore | None,
    settings: McpSettings,
    user_id: int,
    agent_id: str,
    channel: str,
    words: str,
) -> str:
    action = words.lower().split()[1:]
    if action not in ([], ["on"], ["off"]):
        return USAGE
    if action == ["off"]:  # always possible: a token outlives turning the endpoint off
        if store is None:
            return OFF
        revoked = await store.revoke(user_id, agent_id)
        return (
            f"Revoked {revoked} MCP token(s): nothing reaches your memory through MCP now."
            if revoked
            else "You had no live MCP token."
        )
    if not settings.enabled or store is None:
        return OFF
    if action == ["on"]:
        issued = await store.issue(user_id, agent_id, channel, settings.token_ttl_s)
        return "\n".join(
            [
                "MCP access to your memory (read-only: search, show, ask) is on.",
                f"URL: {public_url(settings)}",
                f"Token: {issued.token}",
                f"It works until {issued.grant.expires_at:%Y-%m-%d %H:%M} UTC. I show it this "
                "once and keep only its fingerprint: delete this message once your client "
                "has it. /memory mcp off revokes it; /memory mcp on makes a new one (and "
                "revokes this).",
                "Claude Desktop and other clients: a Streamable HTTP server at the URL with "
                "the header Authorization: Bearer <token> (README: Connect an MCP client).",
            ]
        )
    live = await store.live(user_id, agent_id)
    accesses = await store.accesses(user_id)
    lines = [
        f"MCP token {g.token_id}: live until {g.expires_at:%Y-%m-%d %H:%M} UTC, scope {g.scope}"
        for g in live
    ] or ["No live MCP token (/memory mcp on makes one)."]
    if accesses:
        lines.append("Latest accesses:")
        lines += [
            f"• {a.at:%Y-%m-%d %H:%M:%S} UTC {a.tool} ({a.outcome}, token {a.token_id})"
            for a in accesses
        ]
    else:
        lines.append("No access recorded.")
    return "\n".join(lines)
