"""Error types.  Input problems raise :class:`SpecError` (CLI exit code 2), never ``assert``.

Errors are picklable (they rebuild from their own fields), so a :class:`SpecError` raised in a process-pool worker
or a Dask task arrives in the parent as the same :class:`SpecError`, with the same message and exit code.
"""

from __future__ import annotations

#: Longest repr of a user value an error message shows (an alias bomb or a 1 MB string must not be printed).
MAX_REPR_CHARS = 80


def short_repr(value: object, limit: int = MAX_REPR_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, without building the full repr of huge containers."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 8:
        kind = type(value).__name__
        return f"<{kind} of {len(value)} items>"
    if isinstance(value, (list, tuple, dict, set)):
        # nested containers can still be huge (aliases): bound the repr of each element
        if isinstance(value, dict):
            inner = ", ".join(f"{short_repr(k, 20)}: {short_repr(v, 20)}" for k, v in value.items())
            text = "{" + inner + "}"
        else:
            inner = ", ".join(short_repr(v, 20) for v in value)
            text = ("[" + inner + "]") if isinstance(value, list) else ("(" + inner + ")")
    elif isinstance(value, str) and len(value) > limit:
        text = repr(value[:limit])
    else:
        text = repr(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).splitlines())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SimfuseError(Exception):
    """Base class of every error simfuse raises on purpose."""


class SpecError(SimfuseError):
    """Invalid user input: names the file and the field (or line) at fault.  The message is one line."""

    def __init__(self, source: str, field: str, message: str):
        self.source = _one_line(str(source), 300)
        self.field = _one_line(str(field), 200)
        self.message = _one_line(str(message))
        # args are the three fields, so ``type(e)(*e.args)`` rebuilds it (simpy re-raises a process's exception
        # that way); the one-line text is __str__
        super().__init__(self.source, self.field, self.message)

    def __str__(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return f"{where}: {self.message}"

    def __reduce__(self):
        # rebuilt from (source, field, message), so it survives pickling across process pools
        return (type(self), (self.source, self.field, self.message))


class TraceError(SpecError):
    """A measured trace or log that cannot be read (corrupt, truncated, foreign format)."""
