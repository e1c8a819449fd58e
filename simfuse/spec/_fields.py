"""Small helpers to read validated fields out of ``yaml.safe_load`` output with errors naming file and field."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError


def load_yaml_mapping(path: str | Path) -> dict:
    """Read a YAML file that must contain a mapping at top level."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(p), "", "file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(str(p), "", f"cannot read file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise SpecError(str(p), where, f"not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise SpecError(str(p), "", "expected a YAML mapping at top level")
    return data


class Fields:
    """A view of one YAML mapping; every accessor raises :class:`SpecError` naming ``source`` and the dotted field."""

    def __init__(self, data: Any, source: str, prefix: str = ""):
        if not isinstance(data, dict):
            raise SpecError(source, prefix or "<root>", f"expected a mapping, got {type(data).__name__}")
        self.data = data
        self.source = source
        self.prefix = prefix
        self._used: set[str] = set()

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def _get(self, key: str, default: Any, required: bool) -> Any:
        self._used.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                raise SpecError(self.source, self.name(key), "missing required field")
            return default
        return self.data[key]

    def pick(self, *keys: str) -> str:
        """The one of ``keys`` (spellings of one field, e.g. ``bw_gbyte_per_s`` / ``bw_gbps``) that is given; the
        last when none is (so a missing-field error names the documented key).  Both given: :class:`SpecError`."""
        given = [k for k in keys if self.has(k)]
        if len(given) > 1:
            raise SpecError(self.source, self.name(given[0]), f"give one of {', '.join(given)}, not both")
        for k in keys:
            if k not in given:
                self._used.add(k)
        return given[0] if given else keys[-1]

    def sub(self, key: str, required: bool = True) -> Fields:
        val = self._get(key, {}, required)
        return Fields(val, self.source, self.name(key))

    def number(self, key: str, default: float | None = None, *, required: bool | None = None,
               min_value: float | None = None, positive: bool = False, max_value: float | None = None) -> float:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise SpecError(self.source, self.name(key), f"expected a number, got {val!r}")
        val = float(val)
        if not math.isfinite(val):
            raise SpecError(self.source, self.name(key), f"must be finite, got {val!r}")
        if positive and val <= 0:
            raise SpecError(self.source, self.name(key), f"must be positive, got {val!r}")
        if min_value is not None and val < min_value:
            raise SpecError(self.source, self.name(key), f"must be >= {min_value}, got {val!r}")
        if max_value is not None and val > max_value:
            raise SpecError(self.source, self.name(key), f"must be <= {max_value}, got {val!r}")
        return val

    def integer(self, key: str, default: int | None = None, *, required: bool | None = None,
                min_value: int | None = None) -> int:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if isinstance(val, bool) or not isinstance(val, int):
            if isinstance(val, float) and val.is_integer():
                val = int(val)
            else:
                raise SpecError(self.source, self.name(key), f"expected an integer, got {val!r}")
        if min_value is not None and val < min_value:
            raise SpecError(self.source, self.name(key), f"must be >= {min_value}, got {val!r}")
        return int(val)

    def string(self, key: str, default: str | None = None, *, choices: tuple[str, ...] | None = None,
               required: bool | None = None) -> str:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if not isinstance(val, str):
            raise SpecError(self.source, self.name(key), f"expected a string, got {val!r}")
        if choices is not None and val not in choices:
            raise SpecError(self.source, self.name(key), f"unknown value {val!r}; expected one of {', '.join(choices)}")
        return val

    def boolean(self, key: str, default: bool) -> bool:
        val = self._get(key, default, False)
        if not isinstance(val, bool):
            raise SpecError(self.source, self.name(key), f"expected true or false, got {val!r}")
        return val

    def list(self, key: str, default: list | None = None, required: bool | None = None) -> list:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if not isinstance(val, list):
            raise SpecError(self.source, self.name(key), f"expected a list, got {val!r}")
        return val

    def reject_unknown(self, extra_allowed: tuple[str, ...] = ()) -> None:
        """Unknown keys are errors (catches typos such as ``bw_gpbs``)."""
        unknown = sorted(set(self.data) - self._used - set(extra_allowed))
        if unknown:
            raise SpecError(self.source, self.name(unknown[0]), "unknown field")
