"""Alembic environment: always run from `memory.storage.db.migrate` on a live connection."""

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reachable through the alembic CLI
    raise RuntimeError("run migrations with `mnemo migrate`, not the alembic CLI")

context.configure(
    connection=connection,
    render_as_batch=connection.dialect.name == "sqlite",
    transaction_per_migration=False,
    # Our SQLite engine issues BEGIN itself, so DDL is transactional there too.
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
