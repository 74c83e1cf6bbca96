"""Each conversation's context size as this process last saw it, so the pool's check
after every turn ("does this session need compaction?") usually costs no query.

An entry holds (tokens, last_seq): the context's token total and the conversation's last
message seq, measured together in one statement (`measured`), then carried forward by
this process's own appends (`appended`) only while they continue that exact seq, so an
append made anywhere else (another replica, the CLI) breaks the chain and drops the
entry. Compactions and adoptions lower or rewrite the total: they drop it (`forget`), as
does any doubt (updates arriving out of commit order break the chain too). What stays is
therefore never below the real total as of this process's last append.

`take` hands out a total only once, and only one carried forward by an append since the
last `take`: the pool's check right after its turn's append. Any other caller measures.
A total over the threshold is measured again before anyone compacts on its word, so an
entry can only ever spare a query, never cause a compaction.

A compaction that found nothing to compact (the messages outside the protected tail too
few for a leaf chunk) leaves a *wait*: the seq the conversation must reach before one can
form (`nothing_until`). Until then the check says no without reading, where it would
otherwise measure and read the items again after every turn only to find nothing. Seqs
only grow and every new message pushes one out of the tail, so the wait never hides a
compaction that could happen; compactions and adoptions drop it (`forget`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_CAPACITY = 10_000


@dataclass
class _Entry:
    tokens: int
    last_seq: int
    fresh: bool = False  # carried forward by an append since the last take


class ContextTotals:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._waits: OrderedDict[int, int] = OrderedDict()  # conv id -> seq to reach

    def measured(self, conv_id: int, tokens: int, last_seq: int) -> None:
        """The total and last seq read together, in one statement."""
        self._entries[conv_id] = _Entry(tokens, last_seq)
        self._entries.move_to_end(conv_id)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def appended(self, conv_id: int, first_seq: int, last_seq: int, tokens: int) -> None:
        """This process committed messages first_seq..last_seq adding `tokens` items."""
        entry = self._entries.get(conv_id)
        if entry is None:
            return
        if first_seq != entry.last_seq + 1:  # someone else appended in between
            del self._entries[conv_id]
            return
        entry.tokens += tokens
        entry.last_seq = last_seq
        entry.fresh = True
        self._entries.move_to_end(conv_id)

    def forget(self, conv_id: int) -> None:
        self._entries.pop(conv_id, None)
        self._waits.pop(conv_id, None)

    def last_seq(self, conv_id: int) -> int | None:
        entry = self._entries.get(conv_id)
        return entry.last_seq if entry is not None else None

    def nothing_until(self, conv_id: int, seq: int) -> None:
        """Nothing can be compacted before the conversation's last seq reaches `seq`."""
        self._waits[conv_id] = seq
        self._waits.move_to_end(conv_id)
        while len(self._waits) > self.capacity:
            self._waits.popitem(last=False)

    def waiting(self, conv_id: int, last_seq: int) -> bool:
        """True while a compaction at `last_seq` would certainly find nothing."""
        until = self._waits.get(conv_id)
        if until is None:
            return False
        if last_seq >= until:
            del self._waits[conv_id]
            return False
        return True

    def take(self, conv_id: int) -> int | None:
        """The total carried forward by this process's latest append, once; else None."""
        entry = self._entries.get(conv_id)
        if entry is None or not entry.fresh:
            return None
        entry.fresh = False
        return entry.tokens
