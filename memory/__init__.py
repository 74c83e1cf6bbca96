"""mnemo's memory contract: what a provider plugin implements and what the bot calls.

The public names are re-exported here lazily (PEP 562): `import memory.contract.types` or
`from memory import Session` loads only the module that defines the name, so plugins and
the CLI pay for what they use, and no submodule import can become circular through here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, tuple[str, ...]] = {
    "memory.contract.types": (
        "Action",
        "ChangeEntry",
        "ChangeSource",
        "CompactionMode",
        "CompactionResult",
        "ConstraintEntry",
        "DescribeResult",
        "ExpandChild",
        "ExpandMessage",
        "ExpandResult",
        "ListOptions",
        "Message",
        "NoteEntry",
        "NoteHit",
        "NoteKind",
        "Role",
        "Scope",
        "SearchMode",
        "SearchQuery",
        "SearchResult",
        "SearchScope",
        "Session",
        "SessionInfo",
        "SessionSnapshot",
        "SessionStats",
        "SummarizeOptions",
        "ToolCall",
        "utcnow",
    ),
    "memory.contract.capabilities": (
        "CAPABILITIES",
        "AnswerOrigins",
        "ChangelogReader",
        "ChangelogWriter",
        "Compactor",
        "ConstraintStore",
        "Explorer",
        "MessageReader",
        "NoteStore",
        "ProfileStore",
        "Provider",
        "ProviderContext",
        "Reviewer",
        "SessionManager",
        "SessionSnapshotStore",
        "Searcher",
        "Summarizer",
        "VersionedConstraintStore",
        "VersionedProfileStore",
        "capabilities_of",
    ),
    "memory.contract.options": ("AppendOptions", "WriteOptions", "append_messages"),
    "memory.contract.append_hook": ("AppendHook",),
    "memory.contract.errors": (
        "Conflict",
        "InvalidArgument",
        "ContractError",
        "NotFound",
        "SessionArchived",
        "StoreCorrupt",
        "Unsupported",
    ),
    "memory.contract.context": (
        "agent_id_from_context",
        "change_source_from_context",
        "session_id_from_context",
        "user_id_from_context",
        "with_agent_id",
        "with_change_source",
        "with_session_id",
        "with_user_id",
    ),
    "memory.text.tokens": ("estimate_tokens", "message_tokens", "messages_tokens"),
    "memory.compaction.summarizer": (
        "LLMSummarizer",
        "StaticSummarizer",
        "SummarizerError",
        "TruncatingSummarizer",
        "build_prompt",
        "condensed_target",
        "leaf_target",
        "truncate_to_tokens",
    ),
    "memory.actions.tool": ("build_tool", "run_tool", "tool_actions"),
    "memory.contract.tracing": ("TraceEvent", "unwrap", "with_tracing"),
    "memory.contract.registry": (
        "ProviderEntry",
        "ProviderLoadError",
        "ProviderNotFound",
        "create_provider",
        "create_provider_async",
        "get_factory",
        "list_providers",
        "provider_names",
    ),
}

_WHERE: dict[str, str] = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static re-exports for type checkers and IDEs
    from memory.actions.tool import build_tool, run_tool, tool_actions  # noqa: F401
    from memory.compaction.summarizer import (  # noqa: F401
        LLMSummarizer,
        StaticSummarizer,
        SummarizerError,
        TruncatingSummarizer,
        build_prompt,
        condensed_target,
        leaf_target,
        truncate_to_tokens,
    )
    from memory.contract.append_hook import AppendHook  # noqa: F401
    from memory.contract.capabilities import (  # noqa: F401
        CAPABILITIES,
        AnswerOrigins,
        ChangelogReader,
        ChangelogWriter,
        Compactor,
        ConstraintStore,
        Explorer,
        MessageReader,
        NoteStore,
        ProfileStore,
        Provider,
        ProviderContext,
        Reviewer,
        Searcher,
        SessionManager,
        SessionSnapshotStore,
        Summarizer,
        VersionedConstraintStore,
        VersionedProfileStore,
        capabilities_of,
    )
    from memory.contract.context import (  # noqa: F401
        agent_id_from_context,
        change_source_from_context,
        session_id_from_context,
        user_id_from_context,
        with_agent_id,
        with_change_source,
        with_session_id,
        with_user_id,
    )
    from memory.contract.errors import (  # noqa: F401
        Conflict,
        ContractError,
        InvalidArgument,
        NotFound,
        SessionArchived,
        StoreCorrupt,
        Unsupported,
    )
    from memory.contract.options import AppendOptions, WriteOptions, append_messages  # noqa: F401
    from memory.contract.registry import (  # noqa: F401
        ProviderEntry,
        ProviderLoadError,
        ProviderNotFound,
        create_provider,
        create_provider_async,
        get_factory,
        list_providers,
        provider_names,
    )
    from memory.contract.tracing import TraceEvent, unwrap, with_tracing  # noqa: F401
    from memory.contract.types import (  # noqa: F401
        Action,
        ChangeEntry,
        ChangeSource,
        CompactionMode,
        CompactionResult,
        ConstraintEntry,
        DescribeResult,
        ExpandChild,
        ExpandMessage,
        ExpandResult,
        ListOptions,
        Message,
        NoteEntry,
        NoteHit,
        NoteKind,
        Role,
        Scope,
        SearchMode,
        SearchQuery,
        SearchResult,
        SearchScope,
        Session,
        SessionInfo,
        SessionSnapshot,
        SessionStats,
        SummarizeOptions,
        ToolCall,
        utcnow,
    )
    from memory.text.tokens import estimate_tokens, message_tokens, messages_tokens  # noqa: F401
