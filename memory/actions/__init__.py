"""Memory actions, declared once (memory/actions/declarations.py) and rendered for the
model (memory/actions/tool.py) and for people (`/memory`, memory/actions/commands.py).

A new action is one `ACTIONS.declare(Action(...))` with its handler: the memory tool's
schema, the `/memory` dispatch, its usage lines and docs/CHAT.md's command table follow."""

from memory.actions.arguments import Arguments
from memory.actions.declarations import ACTIONS
from memory.actions.spec import Action, Audience, Call, Command

__all__ = ["ACTIONS", "Action", "Arguments", "Audience", "Call", "Command"]
