"""A person's memory taken out or reached from elsewhere, in a private chat: export
files (/memory export, an export's import) and MCP access (/memory mcp)."""
