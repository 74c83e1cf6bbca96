"""Follow-ups the user controls: reminders and check-ins tied to the messages that made
them (memory/followups/store.py), their times in the user's zone (times.py), and how
people and the model read them (replies.py). Delivery is the bot's (bot/followups/)."""
