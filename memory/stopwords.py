"""English stop words: left out of every ranked query.

The list is PostgreSQL's `english` text-search dictionary's (Snowball's English list), so a
query means the same words on SQLite, whose FTS5 tokenizer keeps every word, as on
PostgreSQL, whose `to_tsvector('english', ...)` drops these.
"""

STOP_WORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what
    which who whom this that these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for
    with about against between into through during before after above below to from up
    down in out on off over under again further then once here there when where why how
    all any both each few more most other some such no nor not only own same so than too
    very s t can will just don should now
    """.split()
)
