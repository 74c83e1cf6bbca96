"""Every memory action, declared once: what the model may call through the memory tool
and what people may ask with `/memory <sub>`, with the handler that does it.

People's words are parsed by each command's `parse` (a bad argument answers with the
usage line); the model's JSON arguments are validated by the action's model (a bad one
answers with a one-line error). People's writes are tagged `user`; the model's carry the
change source its caller set."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import model_validator

from memory.actions import changes, forgetting, provenance
from memory.actions import chat_replies as to_people
from memory.actions import tool_results as to_model
from memory.actions.arguments import (
    CHANGE_SCOPES,
    DEFAULT_TOKEN_CAP,
    SEARCH_SCOPES,
    Alias,
    Arguments,
    Before,
    ConstraintId,
    Content,
    ContentOrEmpty,
    Day,
    Due,
    FactKey,
    FactKeys,
    FactValue,
    FollowupId,
    Limit,
    MessageId,
    MessageIds,
    Mode,
    NewName,
    NoteName,
    Question,
    Scope,
    Since,
    SourceIds,
    SummaryId,
    Text,
    TokenCap,
    Topic,
    Version,
    Zone,
    parse_date,
    refuse,
)
from memory.actions.spec import Action, Audience, Call, Command, Recalled, Registry
from memory.consent import actions as consent
from memory.contract.capabilities import (
    ChangelogReader,
    ChangelogWriter,
    ConstraintStore,
    Explorer,
    Forgetter,
    MessageReader,
    NoteStore,
    ProfileStore,
    Searcher,
    SessionManager,
    VersionedProfileStore,
)
from memory.contract.context import change_source_from_context
from memory.contract.errors import ContractError, InvalidArgument
from memory.contract.facts import MAX_KEY_CHARS, MAX_VALUE_CHARS, Fact, FactOp, FactStore
from memory.contract.types import ChangeSource, Owner, SearchMode, SearchQuery, SearchScope, utcnow
from memory.facts.citing import FactWrite, citable
from memory.followups import replies as followup_replies
from memory.followups import store as followups
from memory.followups import times
from memory.storage import forgetting as forgetting_store

DEFAULT_LIMIT = 10  # search, note_search and profile_history results
PEOPLE_SEARCH_POOL = 200  # hits people's search asks for, to count them; more are "200+"
PEOPLE_EXPAND_CAP = 800  # about 3200 characters: an expansion fits one message
ROLLBACK_SCOPES = {
    "profile": "profile",
    "soul": "soul",
    "constraint": "constraint",
    "constraints": "constraint",
}

ACTIONS = Registry()
declare = ACTIONS.declare


def _one_word(key: str, **extra: Any) -> Any:
    """A command taking exactly one word, as argument `key`."""
    return lambda words: {key: words, **extra} if words and " " not in words else None


def _rest(key: str, **extra: Any) -> Any:
    """A command taking the rest of the line, as argument `key`."""
    return lambda words: {key: words, **extra} if words else None


def _search_words(words: str) -> dict[str, Any] | None:
    """`[since <date>] [before <date>] <text>`, the two in either order (a date that is
    none answers with the usage line; a range that is none, with the search's error)."""
    args: dict[str, Any] = {"limit": PEOPLE_SEARCH_POOL}
    rest = words.strip()
    while True:
        parts = rest.split(maxsplit=2)
        key = parts[0].lower() if parts else ""
        if len(parts) < 3 or key not in ("since", "before") or key in args:
            break
        args[key], rest = parse_date(parts[1]), parts[2]
        if args[key] is None:
            return None
    return {"since": None, "before": None, **args, "text": rest} if rest else None


# --- status and search --------------------------------------------------------------


class NoArgs(Arguments):
    pass


async def _stats(c: Call, args: NoArgs) -> Any:
    return await c.provider.stats(c.session)


declare(
    Action(
        "status",
        NoArgs,
        None,
        "memory statistics of this conversation",
        _stats,
        render=to_model.status,
        command=Command(
            "status",
            "— memory statistics of this conversation and your token usage",
            render=to_people.status,
        ),
    )
)


class SearchArgs(Arguments):
    text: Text
    scope: Scope = SearchScope.BOTH.value
    mode: Mode = SearchMode.HYBRID.value
    limit: Limit = DEFAULT_LIMIT
    since: Since = None
    before: Before = None

    @model_validator(mode="after")
    def _search_scope(self) -> SearchArgs:
        if self.scope not in SEARCH_SCOPES:
            raise refuse(f"search scope must be one of {', '.join(SEARCH_SCOPES)}")
        if self.since and self.before and self.since >= self.before:
            raise refuse("search since must be earlier than before")
        return self


async def _search(c: Call, args: SearchArgs) -> Any:
    query = SearchQuery(
        text=args.text,
        scope=SearchScope(args.scope),
        limit=args.limit,
        mode=SearchMode(args.mode),
        in_turn=c.front.in_turn,
        since=args.since,
        before=args.before,
    )
    return await c.provider_as(Searcher).search(c.session, query)


declare(
    Action(
        "search",
        SearchArgs,
        Searcher,
        "search earlier messages and summaries; ask in plain words (a question or a few "
        "keywords: any of them may match, rarer ones weigh more); each hit has its id, date "
        'and a snippet; since/before keep it to a date range ("last week": since 7d)',
        _search,
        render=to_model.search,
        command=Command(
            "search",
            "<text> — search everything I remember of our conversations; since <date> "
            "and before <date> ahead of the text keep to dates (2026-03-01, or 7d / 2w ago)",
            parse=_search_words,
            render=to_people.search,
            lacks="search",
        ),
    )
)


class RecallArgs(Arguments):
    question: Question


async def _recall(c: Call, args: RecallArgs) -> Recalled:
    if c.front.recaller is None:
        raise ContractError("recall needs a model, and none is configured here")
    return await c.front.recaller(c.provider, c.session, args.question, in_turn=c.front.in_turn)


async def _answer_text(c: Call, args: RecallArgs, answer: Recalled) -> str:
    return answer.render()


declare(
    Action(
        "recall",
        RecallArgs,
        Searcher,
        "ask a question about the past when one search does not settle it (what was "
        "decided, when, why; facts spread over several conversations): a separate model "
        "searches, expands summaries to their messages, reads them and answers briefly, "
        "citing the message ids and dates it rests on, or says nothing was found",
        _recall,
        render=_answer_text,
        needs_model=True,
        command=Command(
            "ask",
            "<question> — answer a question from everything I remember, citing the messages",
            parse=_rest("question"),
            render=_answer_text,
            lacks="search",
            listed_after="search",
        ),
    )
)


async def _why(c: Call, args: NoArgs) -> Any:
    return await provenance.why(c.provider, c.session)


declare(
    Action(
        "why",
        NoArgs,
        SessionManager,
        "what the last answer's memory actions used and returned",
        _why,
        tool=False,
        command=Command(
            "why",
            "— which memory searches, summaries and recalls my last answer used, and what "
            "they returned",
            render=to_people.why,
            lacks="reading back its turns",
            listed_after="ask",
        ),
    )
)


# --- summaries and messages ---------------------------------------------------------


class MessageArgs(Arguments):
    message_id: MessageId


async def _read_message(c: Call, args: MessageArgs) -> Any:
    return await c.provider_as(MessageReader).read_message(c.session, args.message_id)


# People's `show <id>`: a message id (digits) when the provider reads messages.
declare(
    Action(
        "message_get",
        MessageArgs,
        MessageReader,
        "read a message found by search",
        _read_message,
        tool=False,
        command=Command(
            "show",
            parse=lambda w: {"message_id": w} if w.isdigit() else None,
            render=to_people.message,
        ),
    )
)


class SummaryArgs(Arguments):
    summary_id: SummaryId


async def _describe(c: Call, args: SummaryArgs) -> Any:
    return await c.provider_as(Explorer).describe(args.summary_id, c.session)


declare(
    Action(
        "describe",
        SummaryArgs,
        Explorer,
        "show a summary with its parents and children",
        _describe,
        render=to_model.describe,
        command=Command(
            "show",
            "<id> — a message found by search, or a summary and where it sits in the tree",
            parse=_one_word("summary_id"),
            render=to_people.describe,
            lacks="summaries",
        ),
    )
)


class ExpandArgs(Arguments):
    summary_id: SummaryId
    token_cap: TokenCap = DEFAULT_TOKEN_CAP


async def _expand(c: Call, args: ExpandArgs) -> Any:
    return await c.provider_as(Explorer).expand(args.summary_id, args.token_cap, c.session)


declare(
    Action(
        "expand",
        ExpandArgs,
        Explorer,
        "recover what a summary was built from",
        _expand,
        render=to_model.expand,
        command=Command(
            "expand",
            "<summary_id> — what a summary was built from",
            parse=_one_word("summary_id", token_cap=PEOPLE_EXPAND_CAP),
            render=to_people.expand,
            lacks="summaries",
        ),
    )
)


# --- profile and soul ---------------------------------------------------------------


class ContentArgs(Arguments):
    content: ContentOrEmpty  # empty clears it


async def _get_profile(c: Call, args: NoArgs) -> Any:
    return await c.provider_as(ProfileStore).get_profile(*c.owner)


async def _set_profile(c: Call, args: ContentArgs) -> Any:
    return await c.provider_as(ProfileStore).set_profile(
        *c.owner, args.content, options=c.write_options()
    )


async def _get_soul(c: Call, args: NoArgs) -> Any:
    return await c.provider_as(ProfileStore).get_soul(*c.owner)


async def _set_soul(c: Call, args: ContentArgs) -> Any:
    return await c.provider_as(ProfileStore).set_soul(
        *c.owner, args.content, options=c.write_options()
    )


declare(
    Action(
        "profile_get",
        NoArgs,
        ProfileStore,
        "read what you know about the user",
        _get_profile,
        render=to_model.profile,
        command=Command(
            "profile", "— what I know about you", render=to_people.profile, lacks="profiles"
        ),
    )
)
declare(
    Action(
        "profile_update",
        ContentArgs,
        ProfileStore,
        "replace the user profile (its free text: facts with a key are kept with fact_set)",
        _set_profile,
        render=to_model.profile_updated,
        write="profile",
    )
)
declare(
    Action(
        "soul_get",
        NoArgs,
        ProfileStore,
        "read your own persona notes (soul)",
        _get_soul,
        render=to_model.soul,
        command=Command(
            "soul", "— my personality as you have shaped it", render=to_people.soul, lacks="a soul"
        ),
    )
)
declare(
    Action(
        "soul_update",
        ContentArgs,
        ProfileStore,
        "replace your soul",
        _set_soul,
        render=to_model.soul_updated,
        write="soul",
    )
)


# --- facts (memory/contract/facts.py) ----------------------------------------------


class FactSetArgs(Arguments):
    key: FactKey
    value: FactValue
    message_ids: MessageIds = ()
    valid_from: Day | None = None


class FactRetractArgs(Arguments):
    key: FactKey
    message_ids: MessageIds = ()


class FactMergeArgs(Arguments):
    keys: FactKeys
    key: FactKey
    value: FactValue
    message_ids: MessageIds = ()


class FactListArgs(Arguments):
    as_of: Day | None = None
    topic: Topic = ""


async def _write_facts(c: Call, op: FactOp) -> FactWrite:
    cite = await citable(
        c.provider, c.session, op.message_ids, c.front.citable, in_turn=c.front.in_turn
    )
    changes = await c.provider_as(FactStore).apply_facts(
        *c.owner, [replace(op, message_ids=cite.kept)], options=c.write_options()
    )
    return FactWrite(changes, cite.refused)


async def _fact_set(c: Call, args: FactSetArgs) -> FactWrite:
    return await _write_facts(
        c, FactOp("set", args.key, args.value, args.message_ids, args.valid_from)
    )


async def _fact_retract(c: Call, args: FactRetractArgs) -> FactWrite:
    return await _write_facts(c, FactOp("retract", args.key, message_ids=args.message_ids))


async def _fact_merge(c: Call, args: FactMergeArgs) -> FactWrite:
    return await _write_facts(
        c, FactOp("merge", args.key, args.value, args.message_ids, merged_keys=args.keys)
    )


async def _fact_list(c: Call, args: FactListArgs) -> list[Fact]:
    store = c.provider_as(FactStore)
    if args.as_of is not None:
        found = await store.facts_as_of(*c.owner, args.as_of)
    else:
        found = await store.current_facts(*c.owner)
    needle = " ".join(args.topic.split()).casefold()
    return [f for f in found if needle in f.key or needle in f.value.casefold()]


def _facts_words(words: str) -> dict[str, Any] | None:
    """`facts`, `facts <YYYY-MM-DD>` (as of that day), `facts <topic>`; typed here, as
    people's arguments are taken as parsed."""
    if not words:
        return {}
    try:
        day = datetime.strptime(words, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return {"topic": words[:200]}
    return {"as_of": day}


declare(
    Action(
        "fact_list",
        FactListArgs,
        FactStore,
        "the user's facts (each with its dates and source message ids): the current ones, "
        "or those true on a date (as_of, e.g. 'where did I live in March?'); topic narrows",
        _fact_list,
        render=to_model.facts,
        command=Command(
            "facts",
            "[date | topic] — the facts I hold about you, now or as of a date (YYYY-MM-DD)",
            parse=_facts_words,
            render=to_people.facts,
            lacks="facts",
            listed_after="profile",
        ),
    )
)


def _fact_words(words: str) -> dict[str, Any] | None:
    """`<key>: <value>`, as people write a fact."""
    key, colon, value = words.partition(":")
    if not colon or not key.strip() or not value.strip():
        return None
    if len(key.strip()) > MAX_KEY_CHARS or len(value.strip()) > MAX_VALUE_CHARS:
        return None
    return {"key": key.strip(), "value": value.strip()}


def _unfact_words(words: str) -> dict[str, Any] | None:
    key = words.strip()
    return {"key": key} if key and len(key) <= MAX_KEY_CHARS else None


declare(
    Action(
        "fact_set",
        FactSetArgs,
        FactStore,
        "record a durable fact about the user under a short key; a new value on a key "
        "supersedes the old one (never add a second key for the same thing), the same value "
        "adds its source; cite the message ids that say it (default: the user's latest "
        "message)",
        _fact_set,
        render=to_model.fact_written,
        write="fact",
        command=Command(
            "fact",
            "<key>: <value> — record a fact about you (a new value replaces the old one)",
            parse=_fact_words,
            render=to_people.fact_written,
            lacks="facts",
            listed_after="facts",
        ),
    )
)
declare(
    Action(
        "fact_retract",
        FactRetractArgs,
        FactStore,
        "close a fact that is no longer true (e.g. 'not vegetarian any more'), citing the "
        "message that says so",
        _fact_retract,
        render=to_model.fact_written,
        write="fact",
        command=Command(
            "unfact",
            "<key> — a fact about you that is no longer true",
            parse=_unfact_words,
            render=to_people.fact_written,
            lacks="facts",
            listed_after="fact",
            not_found="No current fact under “{key}”; /memory facts lists them.",
        ),
    )
)
declare(
    Action(
        "fact_merge",
        FactMergeArgs,
        FactStore,
        "replace the facts of several keys by one fact (under `key`): the way to make room "
        "when the facts are at their cap",
        _fact_merge,
        render=to_model.fact_written,
        write="fact",
    )
)


# --- history and rollback -----------------------------------------------------------


class HistoryArgs(Arguments):
    scope: Scope = ""  # all
    limit: Limit = DEFAULT_LIMIT

    @model_validator(mode="after")
    def _change_scope(self) -> HistoryArgs:
        if self.scope not in ("", *CHANGE_SCOPES):
            raise refuse(f"profile_history scope must be one of {', '.join(CHANGE_SCOPES)}")
        return self


async def _history(c: Call, args: HistoryArgs) -> Any:
    return await c.provider_as(ChangelogReader).read_changelog(*c.owner, args.scope, args.limit)


declare(
    Action(
        "profile_history",
        HistoryArgs,
        ChangelogReader,
        "recent changes to profile, soul, constraints",
        _history,
        render=to_model.history,
        command=Command(
            "history",
            "— recent changes to profile, soul and rules",
            render=to_people.history,
            lacks="a change history",
            listed_after="unconstrain",
        ),
    )
)


class RollbackArgs(Arguments):
    scope: Scope
    version: Version


async def _rollback(c: Call, args: RollbackArgs) -> Any:
    return await c.provider_as(VersionedProfileStore).rollback(
        *c.owner, args.scope, args.version, options=c.write_options()
    )


def _rollback_words(words: str) -> dict[str, Any] | None:
    parts = words.split()
    if len(parts) != 2 or parts[0].lower() not in ROLLBACK_SCOPES or not parts[1].isdigit():
        return None
    return {"scope": ROLLBACK_SCOPES[parts[0].lower()], "version": int(parts[1])}


# Operator-only for people: it rewrites a whole scope, which in a group every member shares.
declare(
    Action(
        "profile_rollback",
        RollbackArgs,
        VersionedProfileStore,
        "restore a scope as it was at a version",
        _rollback,
        render=to_model.rolled_back,
        write="rollback",
        audience=Audience.OPERATOR,
        command=Command(
            "rollback",
            "<profile|soul|constraint> <version> — restore an earlier version (operator only)",
            parse=_rollback_words,
            render=to_people.rolled_back,
            lacks="versioned memory",
            listed_after="history",
        ),
    )
)


# --- constraints --------------------------------------------------------------------


class ConstraintArgs(Arguments):
    text: Text


class ConstraintIdArgs(Arguments):
    id: ConstraintId


async def _constraints(c: Call, args: NoArgs) -> Any:
    return await c.provider_as(ConstraintStore).get_constraints(*c.owner)


async def _add_constraint(c: Call, args: ConstraintArgs) -> Any:
    return await c.provider_as(ConstraintStore).add_constraint(
        *c.owner, args.text, options=c.write_options()
    )


async def _remove_constraint(c: Call, args: ConstraintIdArgs) -> Any:
    return await c.provider_as(ConstraintStore).remove_constraint(
        *c.owner, args.id.strip(), options=c.write_options()
    )


_RULES = "rules (constraints)"
declare(
    Action(
        "constraint_list",
        NoArgs,
        ConstraintStore,
        "list the user's standing rules",
        _constraints,
        render=to_model.constraint_list,
        command=Command(
            "constraints", "— the rules you gave me", render=to_people.constraint_list, lacks=_RULES
        ),
    )
)
declare(
    Action(
        "constraint_add",
        ConstraintArgs,
        ConstraintStore,
        "add a rule the user stated",
        _add_constraint,
        render=to_model.constraint_added,
        write="constraint",
        command=Command(
            "constrain",
            "<text> — add a rule I must always follow",
            parse=_rest("text"),
            render=to_people.constraint_added,
            lacks=_RULES,
        ),
    )
)
declare(
    Action(
        "constraint_remove",
        ConstraintIdArgs,
        ConstraintStore,
        "remove a rule by id",
        _remove_constraint,
        render=to_model.constraint_removed,
        write="constraint",
        command=Command(
            "unconstrain",
            "<id> — remove a rule",
            parse=_one_word("id"),
            render=to_people.constraint_removed,
            lacks=_RULES,
            not_found="No rule with id {id!r}. See /memory constraints.",
        ),
    )
)


# --- notes --------------------------------------------------------------------------


class NoteArgs(Arguments):
    name: NoteName


class NewNoteArgs(Arguments):
    name: NoteName
    content: Content


class NoteSearchArgs(Arguments):
    text: Text
    limit: Limit = DEFAULT_LIMIT


class RenameArgs(Arguments):
    name: NoteName
    new_name: NewName


class AliasArgs(Arguments):
    name: NoteName
    alias: Alias


def _notes(c: Call) -> NoteStore:
    return c.provider_as(NoteStore)


async def _note_add(c: Call, args: NewNoteArgs) -> Any:
    return await _notes(c).note_add(c.session, args.name.strip(), args.content)


async def _note_get(c: Call, args: NoteArgs) -> Any:
    return await _notes(c).note_get(c.session, args.name.strip())


async def _note_search(c: Call, args: NoteSearchArgs) -> Any:
    return await _notes(c).note_search(c.session, args.text, args.limit)


async def _note_write(c: Call, args: NewNoteArgs) -> Any:
    return await _notes(c).note_write(c.session, args.name.strip(), args.content)


async def _note_rename(c: Call, args: RenameArgs) -> Any:
    return await _notes(c).note_rename(c.session, args.name.strip(), args.new_name.strip())


async def _note_alias(c: Call, args: AliasArgs) -> Any:
    return await _notes(c).note_alias(c.session, args.name.strip(), args.alias.strip())


async def _note_remove(c: Call, args: NoteArgs) -> Any:
    return await _notes(c).note_remove(c.session, args.name.strip())


async def _note_list(c: Call, args: NoArgs) -> Any:
    return await _notes(c).note_list(c.session)


declare(
    Action(
        "note_add",
        NewNoteArgs,
        NoteStore,
        "create a note",
        _note_add,
        render=to_model.note_done("added"),
    )
)
declare(
    Action(
        "note_get",
        NoteArgs,
        NoteStore,
        "read a note by name or alias",
        _note_get,
        render=to_model.note,
        command=Command(
            "notes",
            parse=_rest("name"),
            render=to_people.note,
            lacks="notes",
            # Names may hold spaces: `/memory notes a b` looks for the note "a b".
            not_found="No note or archive is named “{name}”; /memory notes lists them.",
        ),
    )
)
declare(
    Action(
        "note_search",
        NoteSearchArgs,
        NoteStore,
        "search notes and archives",
        _note_search,
        render=to_model.note_hits,
    )
)
declare(
    Action(
        "note_write",
        NewNoteArgs,
        NoteStore,
        "replace a note's content",
        _note_write,
        render=to_model.note_done("rewrote"),
    )
)
declare(
    Action(
        "note_rename",
        RenameArgs,
        NoteStore,
        "rename a note",
        _note_rename,
        render=to_model.note_done("renamed to"),
    )
)
declare(
    Action(
        "note_alias",
        AliasArgs,
        NoteStore,
        "give a note another name",
        _note_alias,
        render=to_model.note_done("aliased:"),
    )
)
declare(
    Action(
        "note_remove",
        NoteArgs,
        NoteStore,
        "delete a note",
        _note_remove,
        render=to_model.note_removed,
    )
)
declare(
    Action(
        "note_list",
        NoArgs,
        NoteStore,
        "list notes and archives",
        _note_list,
        render=to_model.notes,
        command=Command(
            "notes",
            "[name] — list my notes and archives, or show one",
            render=to_people.notes,
            lacks="notes",
        ),
    )
)


# --- forgetting (people only: the model never forgets on its own) ---------------------


class ForgetArgs(Arguments):
    target: Text


class ConfirmArgs(Arguments):
    code: str = ""  # the preview's; without it, nothing is done (memory/actions/forgetting.py)
    notes: bool = False


def _forget_words(words: str) -> dict[str, Any] | None:
    if not words or words.lower().split()[0] in ("confirm", "cancel", "everything", "mine"):
        return None
    return {"target": words}


def _confirm_words(words: str) -> dict[str, Any] | None:
    """`confirm [<code>] [notes]`, the code and `notes` in either order."""
    first, *rest = words.lower().split() or [""]
    if first != "confirm":
        return None
    notes = "notes" in rest
    codes = [w for w in rest if w != "notes"]
    if len(codes) > 1 or rest.count("notes") > 1:
        return None
    return {"code": codes[0] if codes else "", "notes": notes}


_FORGETTING = "forgetting"
declare(
    Action(
        "forget",
        ForgetArgs,
        Forgetter,
        "show what forgetting a message, a summary or a text would remove",
        forgetting.ask,
        audience=Audience.OWNER,
        tool=False,
        command=Command(
            "forget",
            "<message id | summary id | text | everything | mine> — forget it for good "
            "(shows what would go; /memory forget confirm <code> does it, cancel drops it; "
            "in a group, mine is what you said there, yours alone to confirm)",
            parse=_forget_words,
            render=forgetting.preview_text,
            lacks=_FORGETTING,
            not_found="Nothing in your memory has the id {target}.",
        ),
    )
)
declare(
    Action(
        "forget_everything",
        NoArgs,
        Forgetter,
        "show what erasing this whole memory would remove",
        forgetting.ask_everything,
        audience=Audience.OWNER,
        tool=False,
        command=Command(
            "forget",
            parse=lambda words: {} if words.lower() == "everything" else None,
            render=forgetting.everything_text,
            lacks=_FORGETTING,
        ),
    )
)
declare(
    Action(
        "forget_confirm",
        ConfirmArgs,
        Forgetter,
        "forget what a /memory forget preview showed",
        forgetting.confirm,
        audience=Audience.OWNER,
        tool=False,
        write="forget",
        command=Command(
            "forget",
            parse=_confirm_words,
            render=forgetting.confirmed_text,
            lacks=_FORGETTING,
        ),
    )
)
declare(
    Action(
        "forget_cancel",
        NoArgs,
        Forgetter,
        "drop the pending /memory forget request",
        forgetting.cancel,
        audience=Audience.OWNER,
        tool=False,
        command=Command(
            "forget",
            parse=lambda words: {} if words.lower().split() == ["cancel"] else None,
            render=forgetting.cancelled_text,
            lacks=_FORGETTING,
        ),
    )
)


# --- consent in groups (a member's own words; memory/consent/) --------------------------


def _mine_confirm_words(words: str) -> dict[str, Any] | None:
    """`mine confirm [<code>]`."""
    parts = words.lower().split()
    if parts[:2] != ["mine", "confirm"] or len(parts) > 3:
        return None
    return {"code": parts[2] if len(parts) == 3 else "", "notes": False}


declare(
    Action(
        "forget_mine",
        NoArgs,
        Forgetter,
        "show what forgetting everything the member said in this group would remove",
        consent.ask_mine,
        tool=False,
        command=Command(
            "forget",
            parse=lambda words: {} if words.lower().split() == ["mine"] else None,
            render=consent.mine_text,
            lacks=_FORGETTING,
        ),
    )
)
declare(
    Action(
        "forget_mine_confirm",
        ConfirmArgs,
        Forgetter,
        "forget what the member's own /memory forget mine preview showed",
        consent.confirm_mine,
        tool=False,
        write="forget",
        command=Command(
            "forget",
            parse=_mine_confirm_words,
            render=consent.confirmed_mine_text,
            lacks=_FORGETTING,
        ),
    )
)
declare(
    Action(
        "forget_mine_cancel",
        NoArgs,
        Forgetter,
        "drop the member's pending /memory forget mine request",
        consent.cancel_mine,
        tool=False,
        command=Command(
            "forget",
            parse=lambda words: {} if words.lower().split() == ["mine", "cancel"] else None,
            render=consent.cancelled_mine_text,
            lacks=_FORGETTING,
        ),
    )
)
# Opting out is offered where words can be forgotten (the SQL providers): same capability.
declare(
    Action(
        "optout",
        NoArgs,
        Forgetter,
        "keep the member's future messages in this group out of memory",
        consent.optout,
        tool=False,
        command=Command(
            "optout",
            "— in a group: I stop remembering what you write there (answers still come; "
            "/memory optin undoes it)",
            render=consent.optout_text,
            lacks="opting out",
        ),
    )
)
declare(
    Action(
        "optin",
        NoArgs,
        Forgetter,
        "remember the member's messages in this group again",
        consent.optin,
        tool=False,
        command=Command(
            "optin",
            "— in a group: I remember what you write there again",
            render=consent.optin_text,
            lacks="opting out",
        ),
    )
)


# --- follow-ups (memory/followups/) -------------------------------------------------


class FollowupAddArgs(Arguments):
    due: Due
    text: Text
    source_ids: SourceIds = []


class FollowupIdArgs(Arguments):
    followup_id: FollowupId


class SnoozeArgs(Arguments):
    followup_id: FollowupId
    snooze: str = "1h"


class SwitchArgs(Arguments):
    on: bool


class QuietArgs(Arguments):
    quiet: str


class ZoneArgs(Arguments):
    zone: Zone = ""  # empty: show it


def _followup_owner(c: Call) -> Owner:
    return Owner(*c.owner)


async def _followup_add(c: Call, args: FollowupAddArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    owner = _followup_owner(c)
    prefs = await followups.get_prefs(engine, owner)
    try:
        due = times.due_utc(args.due, prefs.timezone, utcnow())
    except times.TimeError as exc:
        raise InvalidArgument(str(exc)) from None
    source = (c.source or change_source_from_context()).value
    if source == ChangeSource.REFLECT.value and not prefs.proactive:
        raise InvalidArgument("the user turned follow-ups you propose off")
    if prefs.paused and source != ChangeSource.REFLECT.value:  # they are back: delivery resumes
        await followups.resume(engine, owner)
    made = await followups.add(
        engine,
        owner,
        c.session.id,
        due_at=due,
        timezone=prefs.timezone or "UTC",
        text=args.text,
        source_ids=args.source_ids,
        created_by=source,
        proactive=source == ChangeSource.REFLECT.value,
        channel=c.session.channel,
    )
    return made, prefs.timezone is not None


async def _followup_added(c: Call, args: Any, result: Any) -> str:
    return followup_replies.for_model(*result)


declare(
    Action(
        "followup_add",
        FollowupAddArgs,
        MessageReader,
        "remember to come back to the user at a time: whenever they ask to be reminded or "
        "followed up, and for a date they mention that calls for it",
        _followup_add,
        render=_followup_added,
    )
)


async def _followup_list(c: Call, args: NoArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    owner = _followup_owner(c)
    await followups.resume(engine, owner)  # they are back: delivery resumes
    prefs = await followups.get_prefs(engine, owner)
    return await followups.listed(engine, owner), prefs


async def _followups_text(c: Call, args: Any, result: Any) -> str:
    items, prefs = result
    return followup_replies.listing(items, proactive=prefs.proactive, zone=prefs.timezone)


async def _followup_switch(c: Call, args: SwitchArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    await followups.set_prefs(engine, _followup_owner(c), proactive=args.on, paused=False)
    return args.on


async def _switched(c: Call, args: Any, on: Any) -> str:
    if on:
        return "Follow-ups I propose myself are on again."
    return (
        "I won't propose follow-ups on my own any more; reminders you ask for still work "
        "(/memory followups on undoes this)."
    )


async def _followup_quiet(c: Call, args: QuietArgs) -> Any:
    try:
        times.quiet_window(args.quiet)
    except times.TimeError as exc:
        raise InvalidArgument(str(exc)) from None
    engine = forgetting_store.engine_of(c.provider)
    await followups.set_prefs(engine, _followup_owner(c), quiet=args.quiet)
    return args.quiet


async def _followup_dismiss(c: Call, args: FollowupIdArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    return await followups.act(engine, _followup_owner(c), args.followup_id, followups.DISMISS)


async def _followup_undo(c: Call, args: FollowupIdArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    return await followups.act(engine, _followup_owner(c), args.followup_id, followups.UNDO)


async def _followup_snooze(c: Call, args: SnoozeArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    owner = _followup_owner(c)
    found = await followups.get(engine, args.followup_id)
    tz = found.timezone if found is not None else None
    try:
        due = times.snoozed(args.snooze, tz, utcnow())
    except times.TimeError as exc:
        raise InvalidArgument(str(exc)) from None
    return await followups.act(engine, owner, args.followup_id, "snooze", due_at=due)


def _followup_words(verb: str) -> Any:
    def parse(words: str) -> dict[str, Any] | None:
        parts = words.split()
        if len(parts) == 2 and parts[0].lower() == verb and parts[1].isdigit():
            return {"followup_id": int(parts[1])}
        return None

    return parse


def _snooze_words(words: str) -> dict[str, Any] | None:
    parts = words.split()
    if (
        len(parts) == 3
        and parts[0].lower() == "snooze"
        and parts[1].isdigit()
        and parts[2].lower() in times.SNOOZES
    ):
        return {"followup_id": int(parts[1]), "snooze": parts[2].lower()}
    return None


async def _dismissed(c: Call, args: Any, item: Any) -> str:
    return f"Dismissed follow-up {item.id}: {item.text}"


async def _undone(c: Call, args: Any, item: Any) -> str:
    return f"Undone: I won't follow up on “{item.text}”."


async def _snoozed(c: Call, args: Any, item: Any) -> str:
    return f"Snoozed until {times.local_text(item.due_at, item.timezone)}: {item.text}"


_FOLLOWUPS = "follow-ups"
_NO_FOLLOWUP = "No pending follow-up {followup_id} of yours; /memory followups lists them."
declare(
    Action(
        "followup_list",
        NoArgs,
        MessageReader,
        "the user's pending follow-ups, with their ids",
        _followup_list,
        render=_followups_text,
        command=Command(
            "followups",
            "[off|on|quiet HH:MM-HH:MM|dismiss <id>|snooze <id> 1h|tomorrow|week] — what "
            "I'll follow up on, with buttons; off stops the ones I'd propose myself",
            render=_followups_text,
            lacks=_FOLLOWUPS,
        ),
    )
)
declare(
    Action(
        "followup_dismiss",
        FollowupIdArgs,
        MessageReader,
        "drop a pending follow-up the user no longer wants",
        _followup_dismiss,
        render=_dismissed,
        command=Command(
            "followups",
            parse=_followup_words("dismiss"),
            render=_dismissed,
            lacks=_FOLLOWUPS,
            not_found=_NO_FOLLOWUP,
        ),
    )
)
declare(
    Action(
        "followup_undo",
        FollowupIdArgs,
        MessageReader,
        "take back a follow-up just made",
        _followup_undo,
        tool=False,
        command=Command(
            "followups",
            parse=_followup_words("undo"),
            render=_undone,
            lacks=_FOLLOWUPS,
            not_found=_NO_FOLLOWUP,
        ),
    )
)
declare(
    Action(
        "followup_snooze",
        SnoozeArgs,
        MessageReader,
        "put a pending follow-up off",
        _followup_snooze,
        tool=False,
        command=Command(
            "followups",
            parse=_snooze_words,
            render=_snoozed,
            lacks=_FOLLOWUPS,
            not_found=_NO_FOLLOWUP,
        ),
    )
)
declare(
    Action(
        "followups_switch",
        SwitchArgs,
        MessageReader,
        "turn the follow-ups the bot proposes itself on or off",
        _followup_switch,
        tool=False,
        command=Command(
            "followups",
            parse=lambda w: {"on": w.lower() == "on"} if w.lower() in ("on", "off") else None,
            render=_switched,
            lacks=_FOLLOWUPS,
        ),
    )
)
declare(
    Action(
        "followups_quiet",
        QuietArgs,
        MessageReader,
        "set the user's quiet hours",
        _followup_quiet,
        tool=False,
        command=Command(
            "followups",
            parse=lambda w: (
                {"quiet": w.split()[1]}
                if len(w.split()) == 2 and w.split()[0].lower() == "quiet"
                else None
            ),
            render=lambda c, a, q: _said(f"Quiet hours: {q} in your time zone."),
            lacks=_FOLLOWUPS,
        ),
    )
)


async def _said(text: str) -> str:
    return text


async def _timezone(c: Call, args: ZoneArgs) -> Any:
    engine = forgetting_store.engine_of(c.provider)
    owner = _followup_owner(c)
    if not args.zone.strip():
        return (await followups.get_prefs(engine, owner)).timezone, False
    try:
        times.zone(args.zone)
    except times.TimeError as exc:
        raise InvalidArgument(str(exc)) from None
    await followups.set_prefs(engine, owner, timezone=args.zone.strip())
    return args.zone.strip(), True


async def _zone_text(c: Call, args: Any, result: Any) -> str:
    zone, changed = result
    if changed:
        return f"Time zone set: {zone}. New follow-ups use it."
    return (
        f"Time zone: {zone}." if zone else "Time zone: not set (UTC). " + followup_replies.NO_ZONE
    )


declare(
    Action(
        "timezone_set",
        ZoneArgs,
        MessageReader,
        "set the user's time zone when they tell you where they are",
        _timezone,
        render=_zone_text,
        command=Command(
            "timezone",
            "[Area/City] — your time zone for follow-ups (IANA name, like Europe/Berlin)",
            parse=lambda w: {"zone": w},
            render=_zone_text,
            lacks=_FOLLOWUPS,
        ),
    )
)


# --- what changed: the facts' timeline, the review of reflect's changes -------------
# (memory/actions/changes.py; people only: the model has fact_list and its own writes)


class TopicArgs(Arguments):
    topic: str = ""


class ChangeIdArgs(Arguments):
    change_id: Version


class DigestArgs(Arguments):
    digest: str = changes.ON


def _review_words(verb: str) -> Any:
    def parse(words: str) -> dict[str, Any] | None:
        parts = words.lower().split()
        if len(parts) == 2 and parts[0] == verb and parts[1].lstrip("#").isdigit():
            return {"change_id": int(parts[1].lstrip("#"))}
        return None

    return parse


_CHANGES = "reviewing reflect's changes"
_NO_CHANGE = "No change #{change_id} of reflect to review; /memory review lists them."
declare(
    Action(
        "timeline",
        TopicArgs,
        FactStore,
        "every fact about the user in any state, by date, with its sources",
        changes.timeline,
        tool=False,
        command=Command(
            "timeline",
            "[topic] — how the facts I hold about you changed, by date, with their sources",
            parse=lambda words: {"topic": words},
            render=changes.timeline_text,
            lacks="facts",
            listed_after="profile",
        ),
    )
)
declare(
    Action(
        "review",
        NoArgs,
        ChangelogReader,
        "reflect's changes the user has not kept or reverted yet",
        changes.review,
        audience=Audience.OWNER,
        tool=False,
        command=Command(
            "review",
            "[off | on] — reflect's changes to your facts, profile, soul and rules, to keep "
            "or revert (off / on: the digest after reflect changes something)",
            render=changes.review_text,
            lacks=_CHANGES,
            listed_after="history",
        ),
    )
)
declare(
    Action(
        "review_keep",
        ChangeIdArgs,
        ChangelogWriter,
        "keep one of reflect's changes",
        changes.keep,
        audience=Audience.OWNER,
        tool=False,
        command=Command(
            "review", parse=_review_words(changes.KEEP), lacks=_CHANGES, not_found=_NO_CHANGE
        ),
    )
)
declare(
    Action(
        "review_revert",
        ChangeIdArgs,
        ChangelogWriter,
        "revert one of reflect's changes",
        changes.revert,
        audience=Audience.OWNER,
        tool=False,
        write="rollback",
        command=Command(
            "review",
            parse=_review_words(changes.REVERT),
            lacks=_CHANGES,
            not_found=_NO_CHANGE,
        ),
    )
)
declare(
    Action(
        "review_digest",
        DigestArgs,
        ChangelogWriter,
        "turn the digest of reflect's changes off or on",
        changes.switch,
        audience=Audience.OWNER,
        tool=False,
        command=Command(
            "review",
            parse=lambda w: (
                {"digest": w.lower()} if w.lower() in (changes.OFF, changes.ON) else None
            ),
            lacks=_CHANGES,
        ),
    )
)
