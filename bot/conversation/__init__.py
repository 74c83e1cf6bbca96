"""Conversations, channel-independent: the service every channel calls, one turn at a time
per session, `/new`, compaction, budgets and slash commands."""
