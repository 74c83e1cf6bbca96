"""Group members as Telegram knows them: who administers a group (`admins.py`) and
whose words the group's memory keeps (`consent.py`)."""
