"""A message's two vectors: alone (source `message`) and with the message after it
(source `message_next`, keyed by the first message's id; memory/search/semantic/sources.py).

Why two: on LoCoMo the reply says what a message was about ("yes, the red one" names
what the question asked), and a question finds the message through it. One vector of
the pair alone was worse than two averaged (bench/HISTORY.md, "What each message's
vector is made of, by leaving one conversation out": leave-one-out hybrid R@10 0.747 /
0.743 against 0.735 / 0.735 with the message alone). So hybrid search asks the nearest
over both sources and gives each message the mean of its two cosines (its own alone
when it has no pair: the last message of a conversation, a pair not embedded yet).

`asked`: the items whose similarity a vector search adds to its nearest (the exact
index and the on-disk one alike). Numpy-free: forgetting imports the names.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from memory.contract.embedding import VectorHit

MESSAGE = "message"  # MessagesSource.name
MESSAGE_NEXT = "message_next"  # MessageNextSource.name
# For every hit of one, the similarity of the other is asked too (VectorIndex.search).
PARTNERS = {MESSAGE: MESSAGE_NEXT, MESSAGE_NEXT: MESSAGE}


def merged(hits: list[VectorHit], unpaired: Collection[str] = ()) -> list[VectorHit]:
    """`hits` with each message's `message` and `message_next` hits made one `message`
    hit, scored by the mean of both cosines (one alone when the other is missing),
    nearest when either was; the pairs of `unpaired` keys do not count (the message
    before the turn in progress: its pair quotes the question, memory/search/turn.py).
    Other sources' hits pass unchanged; the order is of each item's first hit."""
    own: dict[str, VectorHit] = {}
    pair: dict[str, VectorHit] = {}
    order: dict[tuple[str, str], None] = {}  # each item once, in order of its first hit
    others: dict[tuple[str, str], VectorHit] = {}
    for hit in hits:
        if hit.source == MESSAGE_NEXT and hit.key in unpaired:
            continue
        item = (MESSAGE, hit.key) if hit.source in PARTNERS else (hit.source, hit.key)
        order.setdefault(item)
        if hit.source == MESSAGE:
            own[hit.key] = hit
        elif hit.source == MESSAGE_NEXT:
            pair[hit.key] = hit
        else:
            others[item] = hit
    out = []
    for source, key in order:
        if source != MESSAGE:
            out.append(others[(source, key)])
            continue
        both = [h for h in (own.get(key), pair.get(key)) if h is not None]
        score = sum(h.score for h in both) / len(both)
        out.append(VectorHit(MESSAGE, key, score, nearest=any(h.nearest for h in both)))
    return out


def asked(
    hits: list[VectorHit],
    also: Collection[tuple[str, str]],
    sources: set[str] | None,
    partners: Mapping[str, str] | None,
) -> list[tuple[str, str]]:
    """The items whose similarity a search adds to its nearest `hits` (each once, none
    of `hits`): `also`'s, then the partner of each of `also` and `hits`, of `sources`
    only when given."""
    found = {(h.source, h.key) for h in hits}
    partners = partners or {}
    partnered = [(partners[s], k) for s, k in (*also, *found) if s in partners]
    wanted = dict.fromkeys(
        i for i in (*also, *partnered) if i not in found and (sources is None or i[0] in sources)
    )
    return list(wanted)
