"""The facts as the profile's text: compact, deterministic (sorted by key, dates to the
month), so the rendering of a version depends on that version only and a session's
system prompt stays byte-stable between its snapshot's moves."""

from __future__ import annotations

from collections.abc import Sequence

from memory.contract.facts import Fact


def fact_line(fact: Fact) -> str:
    return f"- {fact.key}: {fact.value} (since {fact.valid_from:%Y-%m})"


def render_profile(current: Sequence[Fact], free_text: str) -> str:
    """Current facts, one line each, then the free-text part (what is not a fact)."""
    lines = [fact_line(f) for f in sorted(current, key=lambda f: (f.key, f.id))]
    parts = ["\n".join(lines)] if lines else []
    if free_text.strip():
        parts.append(free_text)
    return "\n\n".join(parts)


def strip_fact_lines(text: str, current: Sequence[Fact]) -> str:
    """`text` without the lines that render a current fact: a caller that read the
    profile and writes it back (the model's profile action, reflect) must not copy the
    facts into the free text."""
    rendered = {fact_line(f) for f in current}
    kept = [line for line in text.splitlines() if line.strip() not in rendered]
    return "\n".join(kept).strip("\n")
