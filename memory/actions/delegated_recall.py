"""Delegated recall: a question about the past answered by a bounded sub-call, apart
from the chat turn, with the messages it rests on cited.

The sub-call searches the caller's memory (hybrid), expands the summaries it finds down
to their source messages where the provider can (`Explorer`), reads the messages and
archives it finds (`MessageReader`, `NoteStore`), and gives that material, at most
`Bounds.max_tokens` of it, to a model (`ask`) with the question. The model answers
citing ids in square brackets, asks for another search (`SEARCH: <words>`, while rounds
remain) or says it found nothing (`NOTHING`). Every id it cites that was not in the
material is dropped: the material only ever holds what the provider returned for the
caller's session, so a guessed id (another user's message) can never reach the answer.
An answer left citing nothing is not shown: an unsourced claim about the past is what
this action exists to avoid.

Three outcomes besides a cited answer, each worded apart, because each asks for
something else of the user: the search found nothing (`NOTHING_FOUND`: ask otherwise);
material was read but the model cited none of it (`cited_nothing`: the closest items
are offered, ids, dates and first words, so the user can open them); the time limit
passed (`too_slow`: the model, or the search, was slow, which narrowing the question
does not fix; the items read so far are offered, unchecked).

The model call is the caller's `ask` (the bot's LLM client, usage kind `recall`, so it
is counted like any other call); the whole sub-call stops at `Bounds.timeout_s`. Its
default suits a model on CPU (one recall measured ~240 s there); a fast server answers in
seconds and never waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from memory.actions.citations import cite
from memory.contract.capabilities import Explorer, MessageReader, NoteStore, Provider, Searcher
from memory.contract.errors import ContractError, NotFound
from memory.contract.tracing import capability
from memory.contract.types import SearchMode, SearchQuery, SearchResult, SearchScope, Session
from memory.text.tokens import estimate_tokens

# (system prompt, user prompt) -> the model's answer.
Ask = Callable[[str, str], Awaitable[str]]

HITS_PER_SEARCH = 8
NOTHING = "NOTHING"
SEARCH = "SEARCH:"
NOTHING_FOUND = "I found nothing about that in my memory."
OFFERED = 3  # items offered when the model cited nothing or was too slow
FIRST_WORDS = 12
# Recognisable by the fake model in tests; says what the model may answer.
SYSTEM_PROMPT = (
    "You answer a question about the past from the stored memory of a conversation "
    "(delegated recall). You are given numbered material: messages and summaries, each "
    "starting with its id in square brackets and its date. Answer in two or three "
    "sentences, in the language of the question, using ONLY this material, and cite the "
    "id of every item you rely on in square brackets, e.g. [123]. If the material does "
    f"not answer the question, reply exactly {NOTHING}."
)
_MORE = (
    f" If it does not but another search might, reply {SEARCH} followed by a few "
    "keywords to search for instead."
)


class RecallModelFailed(ContractError):
    """The recall model could not be asked (the front-end's `ask` says why)."""


@dataclass(frozen=True)
class Bounds:
    max_tokens: int = 3000  # of material given to the model, over all rounds
    timeout_s: float = 300.0
    max_rounds: int = 2  # searches (each followed by one model call)


@dataclass(frozen=True)
class Item:
    """One piece of material: a message (its id), or a summary or archive when nothing
    below it could be read."""

    id: str
    kind: str  # message | summary | archive | note
    text: str
    at: datetime | None = None
    role: str = ""

    def line(self) -> str:
        date = f" {self.at:%Y-%m-%d %H:%M}" if self.at else ""
        who = f" {self.role}:" if self.role else f" ({self.kind})"
        return f"[{self.id}]{date}{who} {self.text}"

    def glimpse(self) -> str:
        """One line offering the item: its kind, id, date and first words."""
        date = f" ({self.at:%Y-%m-%d})" if self.at else ""
        words = self.text.split()
        more = "…" if len(words) > FIRST_WORDS else ""
        return f"- {self.kind} {self.id}{date}: {' '.join(words[:FIRST_WORDS])}{more}"


@dataclass
class Answer:
    text: str  # the model's answer, foreign ids dropped; else what happened (module doc)
    cited: list[Item] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    read: int = 0  # items of material given to the model
    offered: list[Item] = field(default_factory=list)  # when nothing is cited

    @property
    def found(self) -> bool:
        return bool(self.cited)

    def render(self) -> str:
        if self.offered:
            return "\n".join([self.text, *(i.glimpse() for i in self.offered)])
        if not self.cited:
            return self.text
        sources = ", ".join(
            f"{i.kind} {i.id}" + (f" ({i.at:%Y-%m-%d})" if i.at else "") for i in self.cited
        )
        return f"{self.text}\nSources: {sources}"


def cited_nothing(read: int) -> str:
    return (
        f"I read {read} item(s) of my memory about that, but the recall model cited none "
        "of them as an answer. The closest ones (/memory show <id> opens a message):"
    )


def too_slow(seconds: float, asking: bool, read: int) -> str:
    slow = (
        f"The recall model was too slow: no answer within {seconds:g} s"
        if asking
        else f"Searching my memory took longer than {seconds:g} s"
    )
    if not read:
        return f"{slow} (recall.timeout_s)."
    return f"{slow} (recall.timeout_s). The closest items I had read, unchecked:"


class Material:
    """What the sub-call has read so far, within its token budget, by id."""

    def __init__(self, max_tokens: int) -> None:
        self.left = max_tokens
        self.items: dict[str, Item] = {}

    @property
    def full(self) -> bool:
        return self.left <= 0

    def add(self, item: Item) -> None:
        if self.full or item.id in self.items:
            return
        cost = estimate_tokens(item.line())
        text = item.text
        if cost > self.left:  # cut the last item to what is left (about 4 chars a token)
            text = text[: max(0, self.left * 4 - 40)] + "…"
            cost = self.left
        self.items[item.id] = Item(item.id, item.kind, text, item.at, item.role)
        self.left -= cost

    def text(self) -> str:
        return "\n".join(i.line() for i in self.items.values())


async def _read_hit(provider: Provider, session: Session, hit: SearchResult, m: Material) -> None:
    """Add what `hit` stands for: the message itself; a summary's source messages (its
    children expanded in turn); an archive or note's content. Only through `session`."""
    if hit.source_type == "message":
        reader = capability(provider, MessageReader)
        if reader is not None:
            try:
                found = await reader.read_message(session, hit.source_id)
            except NotFound:
                return
            msg = found.message
            m.add(Item(hit.source_id, "message", msg.content, msg.created_at, msg.role))
        else:
            m.add(Item(hit.source_id, "message", hit.content, hit.timestamp))
        return
    explorer = capability(provider, Explorer)
    notes = capability(provider, NoteStore)
    if hit.source_type == "summary" and explorer is not None:
        before = len(m.items)
        await _expand(explorer, session, hit.source_id, m, depth=0)
        if len(m.items) > before:
            return
    elif hit.source_type in ("archive", "note") and notes is not None:
        try:
            entry = await notes.note_get(session, hit.source_id)
        except NotFound:
            return
        m.add(Item(hit.source_id, hit.source_type, entry.content, entry.created_at))
        return
    m.add(Item(hit.source_id, hit.source_type, hit.content, hit.timestamp))


async def _expand(
    explorer: Explorer, session: Session, summary_id: str, m: Material, depth: int
) -> None:
    if m.full or depth > 8:  # the DAG is shallow; the cap only guards a malformed one
        return
    try:
        got = await explorer.expand(summary_id, max(1, m.left), session)
    except NotFound:
        return
    for msg in got.messages:
        if msg.role in ("user", "assistant") and msg.content.strip():
            m.add(Item(msg.message_id, "message", msg.content, msg.created_at, msg.role))
    for child in got.children:
        await _expand(explorer, session, child.summary_id, m, depth + 1)


async def _gather(
    provider: Provider, session: Session, words: str, m: Material, in_turn: bool
) -> int:
    searcher = capability(provider, Searcher)
    if searcher is None:  # `recall` is declared on searchers only
        raise ContractError(f"the {provider.name} memory provider cannot search")
    query = SearchQuery(
        words, SearchScope.BOTH, HITS_PER_SEARCH, SearchMode.HYBRID, in_turn=in_turn
    )
    hits = await searcher.search(session, query)
    for hit in hits:
        if m.full:
            break
        await _read_hit(provider, session, hit, m)
    return len(hits)


def _clean(answer: str, material: Material) -> tuple[str, list[Item]]:
    """The answer without the ids it cites that are not in the material, and the items it
    cites, in order of first citation (memory/actions/citations.py)."""
    return cite(answer, material.items)


async def recall(
    provider: Provider,
    session: Session,
    question: str,
    ask: Ask,
    bounds: Bounds,
    *,
    in_turn: bool = False,
) -> Answer:
    """Answer `question` from `session`'s memory scope (module doc); past the time limit,
    an answer saying so (nothing cited: the material was not read to the end). `in_turn`:
    asked while a turn of `session` is answered, which its searches leave out."""
    material = Material(bounds.max_tokens)
    out = Answer(NOTHING_FOUND)
    asking = False

    async def timed_ask(system: str, prompt: str) -> str:
        nonlocal asking
        asking = True  # left set when the limit cancels the call: the model was slow
        reply = await ask(system, prompt)
        asking = False
        return reply

    try:
        async with asyncio.timeout(bounds.timeout_s):
            await _rounds(provider, session, question, timed_ask, bounds, material, out, in_turn)
    except TimeoutError:
        read = len(material.items)
        return Answer(
            too_slow(bounds.timeout_s, asking, read),
            searches=out.searches,
            read=read,
            offered=_closest(material),
        )
    if not out.cited and material.items:
        out.text, out.offered = cited_nothing(len(material.items)), _closest(material)
    return out


def _closest(material: Material) -> list[Item]:
    """The first items read: the search ranks its hits, and material keeps their order."""
    return list(material.items.values())[:OFFERED]


async def _rounds(
    provider: Provider,
    session: Session,
    question: str,
    ask: Ask,
    bounds: Bounds,
    material: Material,
    out: Answer,
    in_turn: bool,
) -> None:
    """Search and ask until the model answers, fills `out` (cited stays empty when the
    model cited nothing it was given)."""
    words = question
    for round_no in range(1, bounds.max_rounds + 1):
        out.searches.append(words)
        await _gather(provider, session, words, material, in_turn)
        if not material.items:  # nothing to read: no model call to pay for
            return
        last = round_no == bounds.max_rounds or material.full
        system = SYSTEM_PROMPT + ("" if last else _MORE)
        prompt = f"Question: {question}\n\nMaterial:\n{material.text()}"
        reply = (await ask(system, prompt)).strip()
        out.read = len(material.items)
        if not last and reply.upper().startswith(SEARCH):
            words = reply[len(SEARCH) :].strip() or question
            continue
        if not reply or reply.upper().startswith(NOTHING):
            return
        text, cited = _clean(reply, material)
        if cited:
            out.text, out.cited = text, cited
        return


@dataclass(frozen=True)
class Recaller:
    """What a front-end gives the `recall` action: the model call and the bounds."""

    ask: Ask
    bounds: Bounds = Bounds()

    async def __call__(
        self, provider: Provider, session: Session, question: str, *, in_turn: bool = False
    ) -> Answer:
        return await recall(provider, session, question, self.ask, self.bounds, in_turn=in_turn)
