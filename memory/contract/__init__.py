"""The memory contract: what a provider implements and what callers rely on. Imports
nothing else of memory."""
