"""Alembic revisions of the reflect branch (depends on core 0001_core)."""
