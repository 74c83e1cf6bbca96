"""Reflect's changes reviewed in the chat: Keep / Revert buttons under `/memory review`
and the digest sent after a reflect cycle (memory/actions/changes.py decides)."""
