"""Ways people reach the bot: the `Channel` protocol (`base`), the terminal, Telegram."""
