"""Search over a user's memory: lexical (BM25), semantic (embeddings) and their fusion,
behind one `Searcher`."""

MAX_LIMIT = 200  # results of one search at most (here, light: `mnemo --help` shows it)
