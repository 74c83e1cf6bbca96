"""Talking to the model: the OpenAI-compatible client, the tool loop of a turn, the system
prompt, and the budget fitted to the server."""
