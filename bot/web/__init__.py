"""The operator web console (`web.enabled`): sessions, a conversation's context and
history, the summary graph, search, profile/soul/constraints with versions and
rollback, and the changelog. Served by the same aiohttp server as `/healthz`
(bot/web/serve.py); pages in bot/web/console.py, access in bot/web/auth.py."""
