"""The lcm provider's export/import of its DAG and the doctor's DAG checks, through the
operator commands (the provider is found through the registry, as `mnemo` finds it)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import sqlalchemy as sa

from bot.ops import doctor, transfer
from memory.storage.db import create_engine
from memory.storage.history import conversations, messages
from plugins.lcm.models import context_items, summaries, summary_messages
from tests.ops.conftest import ALICE, GROUP, make_settings, populate


async def _export(settings, session_id: str, fmt: str = "json") -> str:
    out = io.StringIO()
    assert await transfer.export(settings, session_id, fmt, out=out) == 0
    return out.getvalue()


async def _doctor(settings) -> tuple[int, str]:
    out = io.StringIO()
    # The data only: these settings name no model server (its probe: test_doctor_models.py).
    return await doctor.doctor(settings, out=out, offline=True), out.getvalue()


async def test_dag_round_trip_is_exact(db_url: str, other_db_url: str, tmp_path: Path) -> None:
    source, target = (
        make_settings(db_url, tmp_path, "lcm"),
        make_settings(other_db_url, tmp_path, "lcm"),
    )
    await populate(source, tmp_path)
    exported = await _export(source, ALICE.id)
    data = json.loads(exported)["provider"]
    assert data["name"] == "lcm"
    kinds = {s["kind"] for s in data["data"]["summaries"]}
    assert kinds == {"leaf", "condensed"}, "the fixture must build a real DAG"
    assert any(i["summary_id"] for i in data["data"]["context_items"])
    path = tmp_path / "alice.json"
    path.write_text(exported, encoding="utf-8")
    assert await transfer.import_(target, str(path)) == 0
    assert await _export(target, ALICE.id) == exported
    code, out = await _doctor(target)
    assert code == 0, out
    md = await _export(target, ALICE.id, "markdown")
    assert (
        "## Provider data (lcm)" in md
        and "### Context window" in md
        and "· condensed · depth 1" in md
    )


async def test_lcm_data_is_refused_by_another_provider(
    db_url: str, other_db_url: str, tmp_path: Path, capsys
) -> None:
    source = make_settings(db_url, tmp_path, "lcm")
    await populate(source, tmp_path)
    path = tmp_path / "alice.json"
    path.write_text(await _export(source, ALICE.id), encoding="utf-8")
    assert await transfer.import_(make_settings(other_db_url, tmp_path, "simple"), str(path)) == 1
    assert "set memory.provider: lcm to import it" in capsys.readouterr().err


async def test_doctor_names_each_injected_dag_fault(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, "lcm")
    await populate(settings, tmp_path)
    assert (await _doctor(settings))[0] == 0
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            alice = await conn.scalar(
                sa.select(conversations.c.id).where(conversations.c.session_id == ALICE.id)
            )
            group = await conn.scalar(
                sa.select(conversations.c.id).where(conversations.c.session_id == GROUP.id)
            )
            item = (
                (
                    await conn.execute(
                        sa.select(context_items)
                        .where(
                            context_items.c.conversation_id == alice,
                            context_items.c.summary_id.is_not(None),
                        )
                        .order_by(context_items.c.ordinal)
                        .limit(1)
                    )
                )
                .mappings()
                .one()
            )
            link = (
                (
                    await conn.execute(
                        sa.select(summary_messages)
                        .join(summaries, summaries.c.id == summary_messages.c.summary_id)
                        .where(summaries.c.conversation_id == alice)
                        .limit(1)
                    )
                )
                .mappings()
                .one()
            )
            foreign = await conn.scalar(
                sa.select(messages.c.id).where(messages.c.conversation_id == group).limit(1)
            )
            leaf = link["summary_id"]
            last = await conn.scalar(
                sa.select(sa.func.max(context_items.c.ordinal)).where(
                    context_items.c.conversation_id == alice
                )
            )

        async def damaged(fault: str, damage: sa.Executable, repair: sa.Executable) -> None:
            async with engine.begin() as conn:
                await conn.execute(damage)
            code, out = await _doctor(settings)
            assert code == 1 and f"FAULT {fault}: session {ALICE.id}" in out, out
            async with engine.begin() as conn:
                await conn.execute(repair)
            code, out = await _doctor(settings)
            assert code == 0, out

        ci, sm = context_items.c, summary_messages.c
        await damaged(
            "message_unreachable",
            sa.delete(context_items).where(
                ci.conversation_id == alice, ci.ordinal == item["ordinal"]
            ),
            sa.insert(context_items).values(**item),
        )
        await damaged(
            "summary_link_foreign",
            sa.update(summary_messages)
            .where(sm.summary_id == leaf, sm.ordinal == link["ordinal"])
            .values(message_id=foreign),
            sa.update(summary_messages)
            .where(sm.summary_id == leaf, sm.ordinal == link["ordinal"])
            .values(message_id=link["message_id"]),
        )
        await damaged(
            "summary_depth_mismatch",
            sa.update(summaries).where(summaries.c.id == leaf).values(depth=1),
            sa.update(summaries).where(summaries.c.id == leaf).values(depth=0),
        )
        await damaged(
            "context_order",
            sa.update(context_items)
            .where(ci.conversation_id == alice, ci.ordinal == item["ordinal"])
            .values(ordinal=last + 1),
            sa.update(context_items)
            .where(ci.conversation_id == alice, ci.ordinal == last + 1)
            .values(ordinal=item["ordinal"]),
        )
    finally:
        await engine.dispose()
