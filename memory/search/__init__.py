"""Search over a user's memory: lexical (BM25), semantic (embeddings) and their fusion,
behind one `Searcher`."""
