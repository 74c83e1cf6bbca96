"""Alembic revisions of the simple branch (depends on core 0001_core)."""
