"""Compaction shared by providers: the summarizers and when an automatic compaction is
worth running."""
