"""Follow-ups delivered: the root's job that sends the due ones exactly once
(delivery.py) and Telegram's thin part, its sender and buttons (telegram.py). The store
and the actions are memory's (memory/followups/)."""
