"""lcm: message search moves to core's shared index

Core revision 0004_search_index indexes every provider's messages; lcm's own message
indexes (lcm_0001's FTS5 tables and pg_trgm index, lcm_0002/0003's tsvector side table)
only cost writes now and are dropped. lcm keeps its summary indexes. Their document
length on PostgreSQL becomes the number of tokens, stop words included (as FTS5 and
core's index count them), so summaries and messages are ranked on one scale.

Downgrade rebuilds lcm's message indexes from the messages table.

Revision ID: lcm_0004
Revises: lcm_0003
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "lcm_0004"
down_revision: str | None = "lcm_0003"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = ("0004_search_index",)

_TSV = "to_tsvector('english'::regconfig, {})"


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for fts in ("lcm_messages_fts", "lcm_messages_trgm"):
            for suffix in ("ai", "ad", "au"):
                op.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
            op.execute(f"DROP TABLE IF EXISTS {fts}")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS lcm_messages_tsv_sync ON messages")
        op.execute("DROP FUNCTION IF EXISTS lcm_messages_tsv_sync()")
        op.execute("DROP TABLE IF EXISTS lcm_messages_tsv")
        op.execute("DROP INDEX IF EXISTS ix_lcm_messages_trgm")
        _summary_lengths("mnemo_tsv_len(to_tsvector('simple'::regconfig, {}))")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _sqlite_restore("lcm_messages_fts", "porter unicode61 remove_diacritics 2")
        _sqlite_restore("lcm_messages_trgm", "trigram")
    elif dialect == "postgresql":
        _summary_lengths(f"lcm_doclen({_TSV})")
        op.execute(
            "CREATE TABLE lcm_messages_tsv ("
            "message_id BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, "
            "conversation_id BIGINT NOT NULL, tsv tsvector NOT NULL, doclen integer NOT NULL)"
        )
        op.execute(
            "CREATE FUNCTION lcm_messages_tsv_sync() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"DECLARE v tsvector := {_TSV.format('NEW.content')}; BEGIN "
            "INSERT INTO lcm_messages_tsv (message_id, conversation_id, tsv, doclen) "
            "VALUES (NEW.id, NEW.conversation_id, v, lcm_doclen(v)) ON CONFLICT (message_id) "
            "DO UPDATE SET conversation_id = EXCLUDED.conversation_id, tsv = EXCLUDED.tsv, "
            "doclen = EXCLUDED.doclen; RETURN NEW; END $$"
        )
        op.execute(
            "CREATE TRIGGER lcm_messages_tsv_sync AFTER INSERT OR UPDATE OF content, "
            "conversation_id ON messages FOR EACH ROW EXECUTE FUNCTION lcm_messages_tsv_sync()"
        )
        op.execute(
            "INSERT INTO lcm_messages_tsv (message_id, conversation_id, tsv, doclen) "
            f"SELECT id, conversation_id, {_TSV.format('content')}, "
            f"lcm_doclen({_TSV.format('content')}) FROM messages"
        )
        op.execute(
            "CREATE INDEX ix_lcm_messages_tsv_conv ON lcm_messages_tsv (conversation_id) "
            "INCLUDE (doclen)"
        )
        op.execute("CREATE INDEX ix_lcm_messages_tsv_gin ON lcm_messages_tsv USING gin (tsv)")
        op.execute("CREATE INDEX ix_lcm_messages_trgm ON messages USING gin (content gin_trgm_ops)")


def _summary_lengths(length: str) -> None:
    """Summaries' document lengths computed as `length` (of the content), from now on
    and for the rows there are."""
    op.execute(
        "CREATE OR REPLACE FUNCTION lcm_summaries_tsv_sync() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ DECLARE v tsvector := {_TSV.format('NEW.content')}; BEGIN "
        "INSERT INTO lcm_summaries_tsv (summary_pk, conversation_id, tsv, doclen) "
        f"VALUES (NEW.pk, NEW.conversation_id, v, {length.format('NEW.content')}) "
        "ON CONFLICT (summary_pk) DO UPDATE SET conversation_id = EXCLUDED.conversation_id, "
        "tsv = EXCLUDED.tsv, doclen = EXCLUDED.doclen; RETURN NEW; END $$"
    )
    op.execute(
        f"UPDATE lcm_summaries_tsv t SET doclen = {length.format('s.content')} "
        "FROM summaries s WHERE s.pk = t.summary_pk"
    )


def _sqlite_restore(fts: str, tokenizer: str) -> None:
    scope_new = "'<c' || new.conversation_id || '>'"
    scope_old = "'<c' || old.conversation_id || '>'"
    op.execute(
        f"CREATE VIRTUAL TABLE {fts} USING fts5(scope, content, content='', tokenize='{tokenizer}')"
    )
    insert = f"INSERT INTO {fts}(rowid, scope, content) VALUES (new.id, {scope_new}, new.content);"
    delete = (
        f"INSERT INTO {fts}({fts}, rowid, scope, content) "
        f"VALUES ('delete', old.id, {scope_old}, old.content);"
    )
    op.execute(f"CREATE TRIGGER {fts}_ai AFTER INSERT ON messages BEGIN {insert} END")
    op.execute(f"CREATE TRIGGER {fts}_ad AFTER DELETE ON messages BEGIN {delete} END")
    op.execute(
        f"CREATE TRIGGER {fts}_au AFTER UPDATE OF content, conversation_id ON messages "
        f"BEGIN {delete} {insert} END"
    )
    op.execute(
        f"INSERT INTO {fts}(rowid, scope, content) "
        "SELECT id, '<c' || conversation_id || '>', content FROM messages"
    )
