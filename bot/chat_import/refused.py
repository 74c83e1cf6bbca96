"""The one way an import says no: `ImportRefused`, its message one line naming the file,
where in it and what is wrong. Its own module so that every part of the import (the
formats, the streaming limits, the sandbox) raises it without importing the others."""


class ImportRefused(Exception):
    """The export cannot be imported; the message is one line saying why."""
