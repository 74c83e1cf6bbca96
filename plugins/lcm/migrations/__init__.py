"""Alembic revisions of the lcm branch (depends on core 0001_core)."""
