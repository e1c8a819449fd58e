"""Input ranges: the ``uncertain:`` block of a topology or model file.

A value in a spec file is either a data-sheet value, our own measurement, or an estimate. An estimate (and a
measurement with a spread) declares its range in the file's top-level ``uncertain:`` block, keyed by the dotted
path of the field as written in the same file::

    uncertain:
      scale_out.efficiency: {range: [0.80, 0.95], source: "nccl-tests busbw over line rate, docs/sources.md"}
      collectives.net_overhead_us: {range: [0.5, 2.0], source: "NCCL getNetOverhead; IBGDA vs proxy"}
      embedding.key_dtype: {choices: [int64, int32], source: "TorchRec sends int64, HugeCTR uint32"}

* ``range: [low, high]`` (numbers, ``low < high``) with ``distribution: uniform`` (default) or ``loguniform``
  (``low > 0``; for values uncertain by a factor rather than an offset); the file's value must lie in the range.
* ``choices: [a, b, ...]`` (at least two distinct values, the file's value among them): drawn with equal
  weight unless ``weights: [...]`` (positive numbers, one per choice) says otherwise.
* ``source``: where the range comes from (required, non-empty).

Each end of a range (and each choice) is checked by parsing the file with that value in place, so a range that
leaves the field's own bounds (an efficiency above 1, a negative latency) is refused naming the block's entry.
Sampling and sensitivity analysis live in :mod:`simfuse.uncertainty`; this module only reads and applies.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError, short_repr

#: Most entries one ``uncertain:`` block may hold (a real file needs about ten).
MAX_RANGES = 64
MAX_CHOICES = 16
DISTRIBUTIONS = ("uniform", "loguniform")


@dataclass(frozen=True)
class InputRange:
    """One uncertain input: ``path`` (dotted, as written in its file), a numeric range ``low..high`` drawn
    ``uniform`` or ``loguniform``, or ``choices`` (with ``weights``); ``nominal``: the file's value."""

    path: str
    nominal: Any
    source: str
    low: float | None = None
    high: float | None = None
    distribution: str = "uniform"
    choices: tuple = ()
    weights: tuple[float, ...] = ()

    @property
    def categorical(self) -> bool:
        return bool(self.choices)

    def value_at(self, u: float):
        """The value at quantile ``u`` in [0, 1) of this input's distribution."""
        u = min(max(float(u), 0.0), math.nextafter(1.0, 0.0))
        if self.categorical:
            w = self.weights or (1.0,) * len(self.choices)
            total, acc = sum(w), 0.0
            for c, wi in zip(self.choices, w, strict=True):
                acc += wi / total
                if u < acc:
                    return c
            return self.choices[-1]
        if self.distribution == "loguniform":
            return float(math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low))))
        return float(self.low + u * (self.high - self.low))

    @property
    def extremes(self) -> tuple:
        """The values a one-at-a-time analysis tries: the range's two ends, or every choice but the nominal."""
        if self.categorical:
            return tuple(c for c in self.choices if c != self.nominal)
        return (self.low, self.high)

    def describe(self) -> str:
        if self.categorical:
            return "|".join(str(c) for c in self.choices)
        return f"{self.low:g}..{self.high:g}" + (" (log)" if self.distribution == "loguniform" else "")


@dataclass(frozen=True)
class InputSpace:
    """The uncertain inputs of one spec file, with what is needed to apply a value: the file's mapping as loaded
    (``raw``, without the ``uncertain:`` block) and its parser."""

    source: str
    ranges: tuple[InputRange, ...]
    raw: dict = field(repr=False, compare=False, default_factory=dict)
    parse: Callable | None = field(repr=False, compare=False, default=None)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def parsed(self, values: dict[str, Any]):
        """The spec this file would give with ``values`` (path -> value) written in place of its own."""
        data = copy.deepcopy(self.raw)
        for path, v in values.items():
            _set_path(data, path, v, self.source)
        return self.parse(data, self.source)

    def apply(self, target, values: dict[str, Any]):
        """``target`` (this file's spec, possibly already changed elsewhere, e.g. by command-line settings)
        with the fields that ``values`` change, and nothing else: the difference between the file parsed with
        and without ``values`` is carried over attribute by attribute (nested specs field by field)."""
        if not values:
            return target
        nominal = self.parse(copy.deepcopy(self.raw), self.source)
        return _carry(target, nominal, self.parsed(values))


def _carry(target, nominal, changed):
    """``target`` with every attribute where ``changed`` differs from ``nominal`` set to ``changed``'s
    (recursing into nested dataclasses so that other changes already in ``target`` survive)."""
    updates = {}
    for f in dataclasses.fields(changed):
        if not f.compare:
            continue
        a, b = getattr(nominal, f.name), getattr(changed, f.name)
        if a == b:
            continue
        t = getattr(target, f.name)
        if dataclasses.is_dataclass(b) and dataclasses.is_dataclass(t) and dataclasses.is_dataclass(a):
            updates[f.name] = _carry(t, a, b)
        else:
            updates[f.name] = b
    return dataclasses.replace(target, **updates) if updates else target


def _get_path(data: dict, path: str):
    cur: Any = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None, False
        cur = cur[part]
    return cur, True


def _set_path(data: dict, path: str, value, source: str) -> None:
    parts = path.split(".")
    cur = data
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            raise SpecError(source, f"uncertain.{path}", f"{part!r} is not a mapping in this file")
        cur = nxt
    cur[parts[-1]] = value


def _number(v) -> bool:
    """A finite number a float holds (an integer beyond float's range, 1e400 written out, is not one)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def parse_uncertain(data: dict, source: str, parse: Callable) -> tuple[dict, InputSpace]:
    """Split a spec mapping into (the mapping without ``uncertain:``, its :class:`InputSpace`), validating
    every entry (see the module docstring). ``parse(mapping, source)`` is the file's own parser."""
    body = {k: v for k, v in data.items() if k != "uncertain"}
    block = data.get("uncertain")
    if block is None:
        return body, InputSpace(source, (), body, parse)
    if not isinstance(block, dict):
        raise SpecError(source, "uncertain", f"expected a mapping of field paths to ranges, got "
                                             f"{short_repr(block)}")
    if len(block) > MAX_RANGES:
        raise SpecError(source, "uncertain", f"at most {MAX_RANGES} entries, got {len(block)}")
    ranges = []
    for path, entry in block.items():
        where = f"uncertain.{short_repr(path, 60) if not isinstance(path, str) else path}"
        if not isinstance(path, str) or not path or len(path) > 200 or \
                not all(p.isidentifier() for p in path.split(".")):
            raise SpecError(source, where, "expected a dotted field path such as scale_out.efficiency")
        ranges.append(_one_range(path, entry, body, source, where, parse))
    return body, InputSpace(source, tuple(ranges), body, parse)


def _one_range(path: str, entry, body: dict, source: str, where: str, parse: Callable) -> InputRange:
    if not isinstance(entry, dict):
        raise SpecError(source, where, f"expected a mapping with range or choices, and source; got "
                                       f"{short_repr(entry)}")
    unknown = sorted(set(map(str, entry)) - {"range", "choices", "weights", "distribution", "source"})
    if unknown:
        raise SpecError(source, f"{where}.{unknown[0]}", "unknown field (expected range, choices, weights, "
                                                         "distribution, source)")
    src = entry.get("source")
    if not isinstance(src, str) or not src.strip():
        raise SpecError(source, f"{where}.source", "must say where the range comes from (a non-empty string)")
    nominal, present = _get_path(body, path)
    if not present or isinstance(nominal, (dict, list)) or nominal is None:
        raise SpecError(source, where, f"names no value in this file: give {path} a value of its own beside "
                                       "its range")
    has_range, has_choices = "range" in entry, "choices" in entry
    if has_range == has_choices:
        raise SpecError(source, where, "give exactly one of range: [low, high] or choices: [...]")
    if has_range:
        r = _numeric(path, entry, nominal, source, where)
    else:
        r = _categorical(path, entry, nominal, source, where)
    # every end (every choice) must be a value the field itself accepts
    for v in (r.choices if r.categorical else (r.low, r.high)):
        data = copy.deepcopy(body)
        _set_path(data, path, v, source)
        try:
            parse(data, source)
        except SpecError as exc:
            raise SpecError(source, where, f"{short_repr(v)} is not a valid value for {path}: "
                                           f"{exc.message}") from None
    return r


def _numeric(path, entry, nominal, source, where) -> InputRange:
    rng = entry["range"]
    if not isinstance(rng, list) or len(rng) != 2 or not all(_number(v) for v in rng):
        raise SpecError(source, f"{where}.range", f"expected [low, high] (two finite numbers), got {short_repr(rng)}")
    low, high = float(rng[0]), float(rng[1])
    if not low < high:
        raise SpecError(source, f"{where}.range", f"low must be below high, got [{low:g}, {high:g}]")
    if "choices" in entry or "weights" in entry:
        raise SpecError(source, f"{where}.weights", "weights go with choices, not with a range")
    dist = entry.get("distribution", "uniform")
    if dist not in DISTRIBUTIONS:
        raise SpecError(source, f"{where}.distribution", f"unknown distribution {short_repr(dist)}; expected one "
                                                         f"of {', '.join(DISTRIBUTIONS)}")
    if dist == "loguniform" and low <= 0:
        raise SpecError(source, f"{where}.range", f"a loguniform range needs low > 0, got {low:g}")
    if not _number(nominal):
        raise SpecError(source, where, f"a numeric range needs a numeric value; {path} is {short_repr(nominal)}")
    if not low <= float(nominal) <= high:
        raise SpecError(source, f"{where}.range", f"the file's value {nominal:g} lies outside [{low:g}, {high:g}]")
    return InputRange(path, nominal, entry["source"].strip(), low, high, dist)


def _categorical(path, entry, nominal, source, where) -> InputRange:
    ch = entry["choices"]
    if not isinstance(ch, list) or not 2 <= len(ch) <= MAX_CHOICES or \
            not all(isinstance(c, (str, int, float, bool)) for c in ch):
        raise SpecError(source, f"{where}.choices", f"expected a list of 2..{MAX_CHOICES} plain values, got "
                                                    f"{short_repr(ch)}")
    if len({(type(c), c) for c in ch}) != len(ch):
        raise SpecError(source, f"{where}.choices", "choices must be distinct")
    if nominal not in ch:
        raise SpecError(source, f"{where}.choices", f"the file's value {short_repr(nominal)} is not among the "
                                                    "choices")
    if "distribution" in entry:
        raise SpecError(source, f"{where}.distribution", "a distribution goes with a range; choices take weights")
    w = entry.get("weights")
    weights: tuple[float, ...] = ()
    if w is not None:
        if not isinstance(w, list) or len(w) != len(ch) or not all(_number(x) and x > 0 for x in w):
            raise SpecError(source, f"{where}.weights", f"expected {len(ch)} positive numbers, got {short_repr(w)}")
        weights = tuple(float(x) for x in w)
    return InputRange(path, nominal, entry["source"].strip(), choices=tuple(ch), weights=weights)
