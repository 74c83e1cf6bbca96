"""Exactly-once delivery for Telegram: updates held until durable (inbox, inflight,
handled), answers owed and re-sent (outbox, resume), polling and pacing."""
