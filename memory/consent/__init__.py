"""Consent in a memory several people share (a group's): a member forgets what they said
there (`/memory forget mine`), or keeps their future messages out of it (`/memory
optout`, undone by `/memory optin`). The decisions are written down in docs/CHAT.md
"Groups: your words" and docs/OPERATIONS.md "Consent in groups"."""
