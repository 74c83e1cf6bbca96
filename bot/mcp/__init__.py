"""The per-user MCP endpoint (a person's own memory for their other AI tools) and the
tokens and record of who reached it."""
