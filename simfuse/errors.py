"""Error types.  Input problems raise :class:`SpecError` (CLI exit code 2), never ``assert``."""

from __future__ import annotations


class SimfuseError(Exception):
    """Base class of every error simfuse raises on purpose."""


class SpecError(SimfuseError):
    """Invalid user input: names the file and the field (or line) at fault."""

    def __init__(self, source: str, field: str, message: str):
        self.source = str(source)
        self.field = field
        self.message = message
        where = f"{self.source}: {field}" if field else self.source
        super().__init__(f"{where}: {message}")


class TraceError(SpecError):
    """A measured trace or log that cannot be read (corrupt, truncated, foreign format)."""
