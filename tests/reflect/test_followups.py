"""Reflect proposes a follow-up where the conversation names a clear time: through the
memory tool's followup_add, tagged reflect and proactive, citing the message that said
it; refused when the user turned proposed follow-ups off."""

from __future__ import annotations

import pytest

from memory.contract.capabilities import MessageReader
from memory.contract.tracing import unwrap
from memory.contract.types import Owner
from memory.followups import store
from tests.fakes.openai_server import text, tool_calls
from tests.reflect.test_cycle import ANA, memory_call, talk


async def test_reflect_proposes_a_followup(reflector, provider, fake_llm, engine) -> None:  # type: ignore[no-untyped-def]
    if not isinstance(unwrap(provider), MessageReader):
        pytest.skip("the reference keeps no messages to cite: no followup_add is offered")
    await talk(provider, ANA, "My interview is on 2030-02-05 at 14:00, wish me luck")
    call = memory_call("followup_add", due="2030-02-05T18:00", text="Ask how the interview went")
    fake_llm.push(tool_calls([call]), text("one follow-up"))
    report = await reflector.run_cycle()
    assert report.changes == 1
    [item] = await store.listed(engine, Owner(ANA.user_id, ANA.agent_id))
    assert (item.created_by, item.proactive, item.text) == (
        "reflect",
        True,
        "Ask how the interview went",
    )
    assert len(await store.source_ids(engine, item.id)) == 1  # the user's message

    await store.set_prefs(engine, Owner(ANA.user_id, ANA.agent_id), proactive=False)
    await talk(provider, ANA, "And my dentist is on 2030-02-07 at 9")
    fake_llm.push(tool_calls([memory_call("followup_add", due="2030-02-07T10:00", text="x")]))
    fake_llm.push(text("refused"))
    await reflector.run_cycle()
    assert len(await store.listed(engine, Owner(ANA.user_id, ANA.agent_id))) == 1
    refusal = fake_llm.requests[-1]["messages"][-1]["content"]
    assert "turned follow-ups you propose off" in refusal
