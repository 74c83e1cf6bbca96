"""Alembic revisions of the bot's own branch `bot` (depends on core 0002_history)."""
