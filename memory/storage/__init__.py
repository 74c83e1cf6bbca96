"""The shared SQL implementation every provider builds on: engine, history, stores,
snapshots, forgetting, usage, locks."""
