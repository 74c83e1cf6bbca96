"""What every export format yields, in file order: a `SourceChat`, then its
`SourceMessage`s, then the next chat. A format reads its file as a stream (ijson's
events, within `limits.Limits`), one item at a time, validated by a pydantic model; the
first problem stops it with `ImportRefused`, one line naming the file, where in it, and
what is wrong."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO, Protocol

from pydantic import ValidationError

from bot.chat_import.limits import Limits
from bot.chat_import.refused import ImportRefused

# Text of one imported message, at most (the bot refuses longer turns too): a longer one
# is cut, saying so, rather than refusing a whole export for one pasted log.
MAX_MESSAGE_CHARS = 65_536
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")


@dataclass(frozen=True)
class SourceChat:
    """One conversation of the export. `key` identifies it across exports of the same
    account ("telegram:<chat id>", "chatgpt:<conversation id>"), so a second import of
    it continues where the first stopped instead of copying it again."""

    index: int
    key: str
    title: str


@dataclass(frozen=True)
class SourceMessage:
    """One message to store. `seq` orders a chat's messages and never changes between
    exports (Telegram's message id; the position on ChatGPT's current branch), `key`
    names it (the id as text; ChatGPT's node id): an import resumes after the last
    (`seq`, `key`) it stored."""

    chat: int
    seq: int
    key: str
    at: datetime
    role: str
    text: str


SourceItem = SourceChat | SourceMessage


class ExportFormat(Protocol):
    name: str
    file_name: str  # what the export calls the file
    # Whether a message's seq names it in every later export (Telegram's ids do; a
    # position on ChatGPT's branch moves when an earlier message is edited).
    stable_seq: bool

    def read(self, stream: BinaryIO, name: str, limits: Limits) -> Iterator[SourceItem]:
        """The items of `stream`, read within `limits` (`bot.chat_import.limits`);
        refusals name the file `name`."""
        ...


def clipped(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[:MAX_MESSAGE_CHARS] + " [… cut by the import]"


def plain_id(value: str) -> str:
    """An id from the file as it is when it is a plain one (what exports hold), else a
    digest of it: ids go into session ids and the ledger, which take no odd length or
    character from a hand-made file."""
    if _PLAIN_ID.fullmatch(value):
        return value
    return "h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def timestamp(seconds: float, where: str) -> datetime:
    """A Unix time as an aware UTC datetime; ImportRefused naming `where` when it is
    no date at all."""
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise ImportRefused(f"{where}: {seconds} is not a time") from None


def first_error(exc: ValidationError) -> str:
    """A pydantic error as `field.path: what is wrong`, the first one only."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
