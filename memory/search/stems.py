"""Words as both databases index them: one stemmer, one way of splitting.

PostgreSQL indexes `to_tsvector('english', text)`: its parser splits the text, stop words
are dropped and every other word becomes its Snowball English stem. SQLite's FTS5 indexes
`index_text(text)` instead of the text (the SQL function `mnemo_stems`, registered on
every SQLite connection by memory/storage/db.py and called by the index triggers), with
FTS5's `ascii` tokenizer, which only splits at the spaces between: so the tokens are
decided here, by the same Snowball English stemmer (PyStemmer, pinned to the Snowball
release PostgreSQL's `english_stem` carries), and a query term is stemmed by the same
function (`query_tokens`). FTS5's own porter stemmer is an older algorithm: "octopuses"
was `octopus` on PostgreSQL and `octopus`/`octopu` apart on SQLite.

Splitting follows PostgreSQL's parser for words: a token is a run of letters and digits
(apostrophes, hyphens, underscores and every other mark split: "don't" is `don` and
`t`, "well-known" is `well` and `known`); a token holding a digit is kept as written
(PostgreSQL's `numword`/`int` go to its `simple` dictionary: "3rd", "2024"); every
other token is lowercased and stemmed, except past 1,000 bytes (PostgreSQL leaves those
unstemmed too, and words past 2,047 bytes out). A stop word (PostgreSQL's list, memory/search/stopwords.py) becomes
STOP, a token no query term can be: it still counts in the row's length, as FTS5 and
PostgreSQL's doclen (core revision 0004) count it, and matches nothing, as PostgreSQL
drops it. Diacritics are kept, as PostgreSQL keeps them ("café" is not "cafe").

Where PostgreSQL's parser keeps more: a hyphenated compound is also indexed whole there
(`well-known` beside `well` and `known`), and a host, e-mail address, URL, file path,
version or decimal number is one token (`example.com`, `v1.2.3`, `3.14`) where this
splits it into its words. A query's terms are words (memory/search/text.py), so a
compound never matches on either side; the others are the one place the two disagree
(SQLite finds "example" in "example.com", PostgreSQL does not). tests/memory/search/
test_stems.py checks the agreement on a word list against the PostgreSQL it runs on.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import Stemmer

from memory.search.stopwords import STOP_WORDS
from memory.search.text import fts5_string

# A private-use character: a token of its own to FTS5, never a word character to the
# query's `\w+` (memory/search/text.py), so no query term is ever this.
STOP = "\ue000"
# PostgreSQL's snowball dictionary passes longer words through unstemmed (dict_snowball.c).
MAX_STEMMED_BYTES = 1000
# PostgreSQL's parser leaves longer words out ("word is too long to be indexed").
MAX_WORD_BYTES = 2047
SQL_FUNCTION = "mnemo_stems"
# SQLite's postings of the message index (core revision 0011): a row's tokens as FTS5
# counts them, and its length.
POSTINGS_FUNCTION, DOCLEN_FUNCTION = "mnemo_postings", "mnemo_doclen"

_WORD = re.compile(r"[^\W_]+")  # letters and digits: `\w` without the underscore
_DIGIT = re.compile(r"\d")
# FTS5's `ascii` tokenizer: a token is a run of ASCII letters and digits and of any
# non-ASCII character (fts5_tokenize.c), ASCII folded to lower case.
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9\u0080-\U0010ffff]+")
_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# A Stemmer object is not safe across threads (searches may run on worker threads).
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def _words(text: str) -> list[str]:
    """Runs of letters and digits, lowercased as PostgreSQL lowercases (one character
    for one: Python's "İ".lower() adds a combining dot, PostgreSQL's gives "i")."""
    return _WORD.findall(text.lower().replace("i\u0307", "i"))


def tokens(text: str) -> list[str]:
    """The tokens `text` is indexed as (module doc)."""
    stem = _stemmer().stemWord
    out = []
    for word in _words(text):
        if word in STOP_WORDS:
            out.append(STOP)
        elif len(word) > MAX_STEMMED_BYTES // 4 and len(word.encode()) > MAX_STEMMED_BYTES:
            if len(word.encode()) <= MAX_WORD_BYTES:
                out.append(word)
        elif _DIGIT.search(word):
            out.append(word)
        else:
            out.append(stem(word))
    return out


def index_text(text: str | None) -> str | None:
    """What FTS5 indexes for `text` (the SQL function `mnemo_stems`): its tokens, spaced."""
    return None if text is None else " ".join(tokens(text))


def register(conn: Any) -> None:
    """`mnemo_stems` on a SQLite connection (sqlite3's, or SQLAlchemy's adapter of one):
    the index triggers call it, so a connection that writes messages or summaries fails
    without it ("no such function: mnemo_stems")."""
    conn.create_function(SQL_FUNCTION, 1, index_text, deterministic=True)
    conn.create_function(POSTINGS_FUNCTION, 3, postings, deterministic=True)
    conn.create_function(DOCLEN_FUNCTION, 3, doclen, deterministic=True)


def fts5_tokens(value: str | None) -> list[str]:
    """What FTS5's `ascii` tokenizer makes of a stored column value (`index_text`'s
    spaced tokens, or a `<c12>` scope)."""
    return _ASCII_TOKEN.findall(value.translate(_ASCII_FOLD)) if value else []


def doclen(*columns: str | None) -> int:
    """A row's length as FTS5's bm25() counts it: the tokens of all its columns."""
    return sum(len(fts5_tokens(c)) for c in columns)


def postings(scope: str | None, content: str | None, context: str | None) -> str:
    """The SQL function `mnemo_postings`: of a `messages_fts` row, each token a query
    can match (STOP left out) with its count in the content and in the context, and the
    row's length, as a JSON array of [token, content count, context count, length]."""
    length = doclen(scope, content, context)
    counts: dict[str, list[int]] = {}
    for column, value in ((0, content), (1, context)):
        for token in fts5_tokens(value):
            counts.setdefault(token, [0, 0])[column] += 1
    counts.pop(STOP, None)
    return json.dumps([[t, a, b, length] for t, (a, b) in counts.items()], ensure_ascii=False)


def query_tokens(term: str) -> list[str]:
    """The tokens a query term looks for: its own, stop words left out."""
    return [t for t in tokens(term) if t != STOP]


def fts5_terms(terms: list[str]) -> str:
    """`terms` as the OR of FTS5 strings of their tokens (a term of several tokens, such
    as "snake_case", is a phrase of them; one of none, an empty phrase, matches nothing)."""
    return " OR ".join(fts5_string(" ".join(query_tokens(t))) for t in terms)
