"""Memory actions, declared once and rendered for the model (memory/tool.py) and for
people (`/memory`, memory/actions/commands.py). See memory/actions/spec.py."""
