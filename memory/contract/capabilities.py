"""The provider contract: `Provider` plus optional capabilities.

Capabilities are discovered with `isinstance(unwrap(provider), Compactor)`; all are
`runtime_checkable`, so a third-party plugin needs no base class, only the methods.

Duties a caller passes explicitly (memory/contract/options.py), which a provider must honour:

- `append(session, *msgs, options: AppendOptions | None = None)`:
  - `options.live_only`: if the session is archived (`SessionManager.save_info` with
    `archived=True`), raise `memory.contract.errors.SessionArchived` and store nothing. Without
    it, an archived session is appended to like any other.
  - `options.hook`: call `await options.hook.run(conn)` once, with the
    `AsyncConnection` of the transaction that stores the messages, before it commits.
    If the hook raises, the append is rolled back (nothing stored) and the exception
    propagates. A provider whose history is not in that database still runs it in a
    transaction of its own and stores the messages only if the hook succeeded.
  - `None` means neither.
- store writes (`set_profile`, `set_soul`, `add_constraint`, `remove_constraint`,
  `rollback`) take `options: WriteOptions | None = None`: the changelog row of the write
  records `options.source` and `options.session_id`. With `None` it records
  `WriteOptions.from_context()` (what callers that tag their context instead, e.g. the
  memory tool, set; the shared stores of memory/storage/stores.py do this).
- `ChangelogWriter.write_changelog(entry)` records `entry.source` and `entry.session_id`
  (empty: from the context likewise).

Every provider takes `options` (the shims for ones that did not are gone:
docs/PROVIDERS.md, "Changes to the contract").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.embedding import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_DISK_MIN_ROWS,
    EmbeddingSource,
    QueryEmbedder,
    VectorHit,
)
from memory.contract.facts import DEFAULT_MAX_FACTS, FactStore
from memory.contract.graph import SummaryGraphReader
from memory.contract.maintenance import Exporter, IntegrityChecker, OverlaySchema
from memory.contract.options import AppendOptions, WriteOptions
from memory.contract.types import (
    AnsweredTurn,
    ChangeEntry,
    CompactionMode,
    CompactionResult,
    ConstraintEntry,
    Dependents,
    DescribeResult,
    ErasureReport,
    ExpandResult,
    ForgetReport,
    FoundMessage,
    ListOptions,
    Message,
    NoteEntry,
    NoteHit,
    NoteKind,
    Origin,
    Owner,
    SearchQuery,
    SearchResult,
    SearchScope,
    Session,
    SessionCounts,
    SessionInfo,
    SessionSnapshot,
    SessionStats,
    SummarizeOptions,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


@runtime_checkable
class Summarizer(Protocol):
    async def summarize(self, text: str, opts: SummarizeOptions) -> str: ...


@dataclass
class ProviderContext:
    """What a provider factory receives. `config` is the provider's own section of
    `memory.<name>` as a plain dict, plus `keep_tail` from `compaction.keep_tail` and
    `target_tokens` (`compaction.max_tokens` x `compaction.target_fraction`, 0 when
    automatic compaction is off);
    `settings` is the same validated with the settings model the plugin exports
    (memory/contract/settings.py), None for a plugin that exports none.
    `embedder` is set when `embeddings.model` is (memory/search/semantic/): a provider keeps it
    to search by meaning beside its lexical search."""

    engine: AsyncEngine
    summarizer: Summarizer
    agent_id: str = "default"
    data_dir: Path = Path("data")
    config: dict[str, Any] = field(default_factory=dict)
    settings: Any = None
    embedder: QueryEmbedder | None = None
    vector_cache_bytes: int = DEFAULT_CACHE_BYTES
    # Scopes of this many vectors are searched through an on-disk index under
    # `data_dir`/vectors (0: none is; memory/search/semantic/disk.py).
    vector_disk_min_rows: int = DEFAULT_DISK_MIN_ROWS
    # Each message embedded with the next one too (`embeddings.with_next`;
    # memory/search/pairs.py says why).
    embeddings_with_next: bool = True
    # The cap on current facts per (user, agent): `memory.max_facts` (memory/contract/facts.py).
    max_facts: int = DEFAULT_MAX_FACTS


@runtime_checkable
class Provider(Protocol):
    name: str

    async def bootstrap(self, session: Session) -> None: ...

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None:
        """Store `msgs` at the end of the session's history, in one transaction, honouring
        `options` (see the module docstring)."""
        ...

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]: ...

    async def stats(self, session: Session) -> SessionStats: ...

    async def close(self) -> None: ...


@runtime_checkable
class Compactor(Protocol):
    async def needs_compaction(self, session: Session, threshold: int) -> bool:
        """True when the session's assembled context exceeds `threshold` tokens and a
        compaction can shrink it (with a `target_tokens` setting: the hysteresis of
        memory/compaction/goal.py; never when it would only churn the kept tail)."""
        ...

    async def compact(self, session: Session, mode: CompactionMode) -> CompactionResult:
        """`incremental` (automatic): down to the provider's `target_tokens` when it has
        one; `full` (/compact): everything outside the kept tail. A compaction that
        changed the context also moves the session's snapshot, in its transaction
        (`SharedStores.record_compaction`)."""
        ...


@runtime_checkable
class CompactionEstimator(Protocol):
    """Optional beside Compactor: about how many summarizer calls a full compaction of
    `session` would make now, so an operator's progress counts the real work. Without
    it, a session counts as one step."""

    async def compaction_calls(self, session: Session) -> int: ...


@runtime_checkable
class Searcher(Protocol):
    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]: ...


@runtime_checkable
class MessageReader(Protocol):
    """One message by the id a search hit gave, within `session`'s memory scope (its
    user and agent); `NotFound` otherwise."""

    async def read_message(self, session: Session, message_id: str) -> FoundMessage: ...


@runtime_checkable
class AnswerOrigins(Protocol):
    """Where a channel sent a stored answer (memory/actions/origins.py), so a cited answer of
    the bot links to it as a user's message does. The channel knows the message it
    answered (the user message's origin), not the stored answer's id: `answered_turn`
    reads that turn back, within `session`'s conversation; `add_origin` records where
    its answer went out (the first Telegram message of it), once."""

    async def answered_turn(self, session: Session, asked: Origin) -> AnsweredTurn | None: ...

    async def add_origin(self, session: Session, message_id: str, origin: Origin) -> bool: ...


@runtime_checkable
class SessionCounter(Protocol):
    """A provider that counts every listed session's messages and summaries in a fixed
    number of queries (`HistoryStore.list_counts`); the counts equal its `stats`. Not a
    capability plugins must offer: a listing falls back to `stats` per session."""

    async def list_counts(self, opts: ListOptions) -> list[SessionCounts]: ...


@runtime_checkable
class SessionSpans(Protocol):
    """A provider that dates many sessions at once: each one's first and last stored
    message times (None when it has none), by index, in one query (search results
    grouped by conversation name each one's span). Not a capability plugins must
    offer: the grouping falls back to `stats` per session."""

    async def spans(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[datetime | None, datetime | None]]: ...


@runtime_checkable
class ExtraSource(Protocol):
    """A provider's searchable memory outside the indexed tables (simple's notes), which
    `memory.search.recall.Recall` searches beside them."""

    async def search_extra(
        self, session: Session, text: str, terms: list[str], scope: SearchScope, limit: int
    ) -> list[SearchResult]:
        """Hits for `terms` ranked by a BM25 score (or, with `terms` empty, for `text`
        literally, newest first), within `scope`; at most `limit`."""
        ...

    async def resolve_extra(
        self, session: Session, hits: list[VectorHit], needles: list[str]
    ) -> list[SearchResult]:
        """Its own items among semantic `hits` as results (score: the hit's), in order;
        others, and items gone since they were embedded, left out."""
        ...


@runtime_checkable
class Explorer(Protocol):
    """`session` scopes the lookup: a summary of another user's conversation is
    `NotFound`. The operator CLI passes `session=None` to see everything."""

    async def describe(self, summary_id: str, session: Session | None) -> DescribeResult: ...

    async def expand(
        self, summary_id: str, token_cap: int, session: Session | None
    ) -> ExpandResult: ...


@runtime_checkable
class ProfileStore(Protocol):
    async def get_profile(self, user_id: int, agent_id: str) -> str: ...

    async def set_profile(
        self, user_id: int, agent_id: str, content: str, options: WriteOptions | None = None
    ) -> int:
        """Replace the profile; returns the new version."""
        ...

    async def get_soul(self, user_id: int, agent_id: str) -> str: ...

    async def set_soul(
        self, user_id: int, agent_id: str, content: str, options: WriteOptions | None = None
    ) -> int: ...


@runtime_checkable
class ConstraintStore(Protocol):
    async def get_constraints(self, user_id: int, agent_id: str) -> list[ConstraintEntry]: ...

    async def add_constraint(
        self, user_id: int, agent_id: str, text: str, options: WriteOptions | None = None
    ) -> list[ConstraintEntry]: ...

    async def remove_constraint(
        self,
        user_id: int,
        agent_id: str,
        constraint_id: str,
        options: WriteOptions | None = None,
    ) -> list[ConstraintEntry]:
        """Raises NotFound for an unknown id."""
        ...


@runtime_checkable
class VersionedProfileStore(Protocol):
    async def memory_version(self, user_id: int, agent_id: str) -> int: ...

    async def get_profile_at(self, user_id: int, agent_id: str, version: int) -> str: ...

    async def get_soul_at(self, user_id: int, agent_id: str, version: int) -> str: ...

    async def rollback(
        self,
        user_id: int,
        agent_id: str,
        scope: str,
        version: int,
        options: WriteOptions | None = None,
    ) -> int:
        """Write the `scope` text as it was at `version` as a new version; returns it."""
        ...


@runtime_checkable
class VersionedConstraintStore(Protocol):
    async def get_constraints_at(
        self, user_id: int, agent_id: str, version: int
    ) -> list[ConstraintEntry]: ...


@runtime_checkable
class ChangelogReader(Protocol):
    async def read_changelog(
        self, user_id: int, agent_id: str, scope: str = "", limit: int = 20
    ) -> list[ChangeEntry]:
        """Newest first; empty scope = all scopes."""
        ...


@runtime_checkable
class ChangelogWriter(Protocol):
    async def write_changelog(self, entry: ChangeEntry) -> None: ...


@runtime_checkable
class SessionSnapshotStore(Protocol):
    async def get_or_create_snapshot(
        self, session_id: str, user_id: int, agent_id: str
    ) -> SessionSnapshot: ...

    async def advance_snapshot(self, session_id: str, user_id: int, agent_id: str) -> None: ...


@runtime_checkable
class SessionManager(Protocol):
    async def save_info(self, info: SessionInfo) -> None: ...

    async def load_info(self, session_id: str) -> SessionInfo:
        """Raises NotFound."""
        ...

    async def list_info(self, opts: ListOptions) -> list[SessionInfo]: ...

    async def load_history(self, session_id: str) -> list[Message]: ...


@runtime_checkable
class Reviewer(Protocol):
    async def build_review_context(self, session: Session, since: datetime | None) -> str:
        """Prior summaries as background plus content after `since` ("" if none), each
        message headed by its id as `memory.text.transcript.render_reviewed` writes it,
        so reflect's facts can cite it."""
        ...


@runtime_checkable
class NoteStore(Protocol):
    """The simple provider's single-file notes/archives memory, scoped per session user."""

    async def note_add(
        self, session: Session, name: str, content: str, kind: NoteKind = NoteKind.NOTE
    ) -> NoteEntry: ...

    async def note_rename(self, session: Session, name: str, new_name: str) -> NoteEntry: ...

    async def note_alias(self, session: Session, name: str, alias: str) -> NoteEntry: ...

    async def note_write(self, session: Session, name: str, content: str) -> NoteEntry: ...

    async def note_remove(self, session: Session, name: str) -> None: ...

    async def note_get(self, session: Session, name: str) -> NoteEntry:
        """By name or alias; raises NotFound."""
        ...

    async def note_list(self, session: Session) -> list[NoteEntry]: ...

    async def note_search(self, session: Session, text: str, limit: int = 10) -> list[NoteHit]: ...


@runtime_checkable
class EmbeddingSources(Protocol):
    """Optional: what of this provider's memory is embedded for semantic search. Each
    source lists its items lacking a vector of a model (memory/search/semantic/sources.py); the
    background worker and `mnemo memory embed` embed and store them."""

    def embedding_sources(self) -> list[EmbeddingSource]: ...


@runtime_checkable
class Forgetter(Protocol):
    """Forgetting on request (memory/storage/forgetting.py has the shared part and the rules).

    Every method acts within `owner` (user and agent) only: ids of anyone else's
    messages or summaries are `NotFound` or left out, never touched."""

    async def summary_sources(self, owner: Owner, summary_id: str) -> list[int]:
        """The ids of the messages summary `summary_id` stands for; NotFound otherwise
        (a provider without summaries: always)."""
        ...

    async def forget_dependents(
        self, owner: Owner, message_ids: Sequence[int], needles: Sequence[str] = ()
    ) -> Dependents:
        """What forgetting `message_ids` would rebuild, and the notes quoting them (or
        holding one of `needles`), without changing anything."""
        ...

    async def forget_messages(
        self, owner: Owner, message_ids: Sequence[int], needles: Sequence[str] = ()
    ) -> ForgetReport:
        """Delete the messages and rebuild everything derived from them (summaries
        re-summarised from what remains, up the DAG; one left with no source removed),
        index entries and vectors included, in one transaction per conversation: a crash
        leaves the conversation as it was or as it is after. The summarizer runs before
        that transaction; its failure changes nothing."""
        ...

    async def erase_owner(self, owner: Owner, by: str) -> ErasureReport:
        """Delete all of `owner`'s memory: every session with its messages and what was
        derived from them, profile, soul, constraints and their versions, the changelog
        (replaced by one content-free row saying an erasure happened, `by` whom, when and
        how much), snapshots, notes files, vectors."""
        ...


CAPABILITIES: dict[str, type] = {
    "Compactor": Compactor,
    "Searcher": Searcher,
    "Explorer": Explorer,
    "MessageReader": MessageReader,
    "AnswerOrigins": AnswerOrigins,
    "ProfileStore": ProfileStore,
    "ConstraintStore": ConstraintStore,
    "VersionedProfileStore": VersionedProfileStore,
    "VersionedConstraintStore": VersionedConstraintStore,
    "ChangelogReader": ChangelogReader,
    "ChangelogWriter": ChangelogWriter,
    "SessionSnapshotStore": SessionSnapshotStore,
    "SessionManager": SessionManager,
    "Reviewer": Reviewer,
    "NoteStore": NoteStore,
    "EmbeddingSources": EmbeddingSources,
    "Forgetter": Forgetter,
    "FactStore": FactStore,
}


def capabilities_of(provider: object) -> list[str]:
    """Names of the capabilities `provider` (already unwrapped) implements."""
    return [name for name, proto in CAPABILITIES.items() if isinstance(provider, proto)]


# Optional protocols beside CAPABILITIES: what progress counts, listings, search, the
# operator commands and the console use when a provider offers it. The tracing wrapper
# exposes only CAPABILITIES, so callers reach these through `unwrap`.
OPTIONAL_PROTOCOLS: dict[str, type] = {
    "CompactionEstimator": CompactionEstimator,
    "SessionCounter": SessionCounter,
    "SessionSpans": SessionSpans,
    "ExtraSource": ExtraSource,
    "Exporter": Exporter,
    "OverlaySchema": OverlaySchema,
    "IntegrityChecker": IntegrityChecker,
    "SummaryGraphReader": SummaryGraphReader,
}


def protocols_of(provider: object) -> list[str]:
    """Names of every protocol `provider` (already unwrapped) implements: the
    capabilities, then the optional protocols (what `mnemo providers` lists)."""
    every = {**CAPABILITIES, **OPTIONAL_PROTOCOLS}
    return [name for name, proto in every.items() if isinstance(provider, proto)]
