"""Real local HTTP servers standing in for remote services in tests (no mocks of our code)."""
