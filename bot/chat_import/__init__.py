"""Chat imports: a Telegram Desktop export (`result.json`) or a ChatGPT data export
(`conversations.json`) read into one user's memory (`mnemo memory import-chat`, or the
file sent to the bot in a private chat).

- `sources`: what every format yields (chats, messages) and the one-line refusal.
- `telegram_export`, `chatgpt_export`: the two formats, parsed as a stream with a
  pydantic model per item, so memory stays flat whatever the file's size.
- `ledger`: the `chat_imports` table, how far each source conversation was imported.
- `importer`: the plan (the dry run's summary) and the import itself.
"""
