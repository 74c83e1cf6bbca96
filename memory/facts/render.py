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


def describe_change(before_text: str, after_text: str) -> str:
    """A fact changelog row in a line: "home city: Berlin (was London)", "diet:
    vegetarian retracted"; a forget's content-free row says so."""
    from memory.facts.revert import changelog_lists

    before, after = changelog_lists(before_text, after_text)
    if not before and not after:
        return "facts a forgotten message alone supported were removed"
    was = {str(f["id"]): f for f in before}
    keys = {str(f["id"]): str(f["key"]) for f in after}
    out = []
    for f in after:
        fid, key, value, state = str(f["id"]), f["key"], f["value"], f["state"]
        prior = was.get(fid)
        if prior is None:
            if state == "reverted":
                out.append(f"{key}: {value} (reverted)")
                continue
            replaced = [str(b["value"]) for b in before if b.get("key") == key and fid != b["id"]]
            merged = [
                str(b["key"])
                for b in after
                if b.get("replaced_by") == fid and b.get("key") != key and str(b["id"]) in was
            ]
            note = f" (was {', '.join(replaced)})" if replaced else ""
            note += f" (merging {', '.join(merged)})" if merged else ""
            out.append(f"{key}: {value}{note}")
        elif state == "retracted" and prior.get("state") == "current":
            out.append(f"{key}: {value} retracted")
        elif state == "reverted" and prior.get("state") != "reverted":
            out.append(f"{key}: {value} reverted")
        elif state == prior.get("state") == "current":
            out.append(f"{key}: {value} (restated)")
        elif (
            state == "superseded"
            and prior.get("state") == "current"
            and str(f.get("replaced_by")) not in keys
        ):
            out.append(f"{key}: {value} superseded")
    return "; ".join(out) or "facts unchanged"
