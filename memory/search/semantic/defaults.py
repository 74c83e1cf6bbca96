"""Defaults of semantic search that the bot's settings name too (`embeddings.min_similarity`,
`embeddings.prefixes`)."""

# The cosine below which an item found by meaning alone (no word of the question in it) is
# no match: without a floor the nearest list is always full, so a question nothing
# answers (a word just forgotten) still listed dozens of unrelated "matches". Word hits
# are never dropped, and a dropped item still counts in the meaning scale, so every other
# item's fused score is unchanged (memory/search/recall.py). 0.2 is low for the models people use:
# unrelated texts score about 0 to 0.2 with all-MiniLM-L6-v2 (bench/recall.py's model)
# and OpenAI's text-embedding-3 models, related ones 0.3 and up. Models whose cosines
# all sit high (ada-002, some GGUF models) need more: `embeddings.min_similarity`.
DEFAULT_MIN_SIMILARITY = 0.2

# What model families expect before a query and before a stored text
# (`embeddings.prefixes`; memory/search/semantic/client.py applies them): e5 (their model
# cards: without them quality drops), nomic-embed-text, and bge's English v1.5 models,
# whose query instruction is optional and whose passages take none.
PREFIX_PRESETS: dict[str, tuple[str, str]] = {
    "e5": ("query: ", "passage: "),
    "nomic": ("search_query: ", "search_document: "),
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
}
