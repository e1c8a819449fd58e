"""Small helpers to read validated fields out of YAML with errors naming file and field.

YAML is read with :class:`StrictLoader`, a ``yaml.SafeLoader`` that also rejects duplicate keys (YAML would keep
the last one silently), nesting deeper than :data:`MAX_DEPTH`, documents whose aliases expand to more than
:data:`MAX_EXPANDED_NODES` nodes (an alias "bomb") and recursive aliases; every number in the document must be
finite (``.nan`` / ``.inf`` are rejected wherever they appear).  Error messages show user values through
:func:`~simfuse.errors.short_repr`, never in full.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ..errors import SpecError, short_repr

#: Deepest nesting of mappings/sequences a spec may have (real specs need < 10).
MAX_DEPTH = 64
#: Most nodes a document may have once every alias is expanded.
MAX_EXPANDED_NODES = 1_000_000
#: Largest spec file read (bytes).
MAX_FILE_BYTES = 64 * 2**20
#: Default upper bounds of :meth:`Fields.number` and :meth:`Fields.integer` (fields set tighter ones).
MAX_NUMBER = 1e21
MAX_INTEGER = 2**53


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark=None):
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _StrictConstructor:
    """Mapping construction that refuses duplicate keys (mixed into both loaders)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                except TypeError:  # unhashable key: the base constructor reports it
                    continue
                if dup:
                    raise _Refused(f"duplicate key {short_repr(key)}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


class StrictLoader(_StrictConstructor, yaml.SafeLoader):
    """``yaml.SafeLoader`` with duplicate-key, depth and alias-expansion limits (see the module docstring)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        _check_expanded_size(node)
        return node


if getattr(yaml, "__with_libyaml__", False):

    class StrictCLoader(_StrictConstructor, yaml.CSafeLoader):
        """The same limits over libyaml's parser and composer (about 10x faster on the 100 KB calibration
        profile).  libyaml composes the whole node graph itself (it refuses nesting beyond 1,000 levels), so depth
        and alias expansion are checked on that graph before any object is constructed."""

        def get_single_data(self):
            node = self.get_single_node()
            if node is None:
                return None
            _check_depth(node)
            _check_expanded_size(node)
            return self.construct_document(node)

    _FAST_LOADER: type | None = StrictCLoader
else:  # pragma: no cover - PyYAML wheels ship libyaml
    _FAST_LOADER = None


def _check_depth(root) -> None:
    """Refuse a node graph nested deeper than :data:`MAX_DEPTH`, counted as written (as :class:`StrictLoader`
    counts it): a pre-order walk in document order meets a shared node first where its anchor is written, and
    walks it only there."""
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", node.start_mark)
        if id(node) in seen or isinstance(node, ScalarNode):
            continue
        seen.add(id(node))
        children = node.value if isinstance(node, SequenceNode) else [n for kv in node.value for n in kv]
        stack.extend((c, depth + 1) for c in reversed(children))


def _check_expanded_size(root) -> None:
    """Count the nodes of the document with aliases expanded (memoized per node), refusing cycles and bombs."""
    if root is None:
        return
    sizes: dict[int, int] = {}
    active: set[int] = set()
    # iterative post-order walk over the node graph (no recursion: depth is bounded anyway, cycles are not)
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            active.discard(nid)
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [n for kv in node.value for n in kv]
            else:
                children = []
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > MAX_EXPANDED_NODES:
                raise _Refused(f"aliases expand to more than {MAX_EXPANDED_NODES:,} nodes", node.start_mark)
            sizes[nid] = total
            continue
        if nid in sizes:
            continue
        if nid in active:
            raise _Refused("recursive alias", node.start_mark)
        if isinstance(node, ScalarNode):
            sizes[nid] = 1
            continue
        active.add(nid)
        stack.append((node, True))
        children = node.value if isinstance(node, SequenceNode) else [n for kv in node.value for n in kv]
        for c in children:
            cid = id(c)
            if cid in active:
                raise _Refused("recursive alias", c.start_mark)
            if cid not in sizes:
                stack.append((c, False))


def check_finite(data: Any, source: str, prefix: str = "") -> None:
    """Raise :class:`SpecError` naming the field of the first NaN or infinite number anywhere in ``data``."""
    stack: list[tuple[Any, str]] = [(data, prefix)]
    while stack:
        val, where = stack.pop()
        if isinstance(val, float):
            if not math.isfinite(val):
                raise SpecError(source, where or "<root>", f"must be a finite number, got {val!r}")
        elif isinstance(val, dict):
            for k, v in val.items():
                stack.append((v, f"{where}.{k}" if where else str(k)))
        elif isinstance(val, list):
            for i, v in enumerate(val):
                stack.append((v, f"{where}[{i}]"))


def parse_yaml_text(text: str, source: str) -> Any:
    """Parse YAML with :class:`StrictLoader`; errors become one-line :class:`SpecError` naming ``source``."""
    try:
        data = yaml.load(text, Loader=_FAST_LOADER or StrictLoader)  # noqa: S506 - both are SafeLoaders
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise SpecError(source, where, f"not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    except RecursionError:
        raise SpecError(source, "", f"nested deeper than {MAX_DEPTH} levels") from None
    check_finite(data, source)
    return data


def load_yaml_mapping(path: str | Path) -> dict:
    """Read a YAML file that must contain a mapping at top level."""
    from ..io_limits import read_text

    p = Path(path)
    if p.is_dir():
        raise SpecError(str(p), "", "is a directory, not a YAML file")
    # regular files only (not a FIFO or /dev/zero), at most MAX_FILE_BYTES (gzip accepted, its ratio capped)
    text = read_text(p, "yaml", what="YAML file")
    data = parse_yaml_text(text, str(p))
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
        key = key if isinstance(key, str) else short_repr(key, 40)
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        """Whether ``key`` holds a value (an empty one, ``key:`` in YAML, counts as absent, as for every optional
        field); the key is known either way, so :meth:`reject_unknown` does not call it unknown."""
        self._used.add(key)
        return key in self.data and self.data[key] is not None

    def _get(self, key: str, default: Any, required: bool) -> Any:
        self._used.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                typo = _close(key, [k for k in self.data if k not in self._used])
                raise SpecError(self.source, self.name(key), "missing required field"
                                + (f" (is {typo!r} a misspelling of it?)" if typo else ""))
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
               min_value: float | None = None, positive: bool = False, max_value: float | None = MAX_NUMBER) -> float:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise SpecError(self.source, self.name(key), f"expected a number, got {short_repr(val)}"
                            + _exponent_hint(val))
        try:
            val = float(val)
        except OverflowError:  # an integer beyond float range
            raise SpecError(self.source, self.name(key), f"must be <= {max_value}, got {short_repr(val)}") from None
        if not math.isfinite(val):
            raise SpecError(self.source, self.name(key), f"must be finite, got {val!r}")
        if positive and val <= 0:
            raise SpecError(self.source, self.name(key), f"must be positive, got {val!r}")
        if min_value is not None and val < min_value:
            raise SpecError(self.source, self.name(key), f"must be >= {min_value}, got {val!r}")
        if max_value is not None and val > max_value:
            raise SpecError(self.source, self.name(key), f"must be <= {max_value:g}, got {val!r}")
        return val

    def integer(self, key: str, default: int | None = None, *, required: bool | None = None,
                min_value: int | None = None, max_value: int | None = MAX_INTEGER) -> int:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if isinstance(val, bool) or not isinstance(val, int):
            if isinstance(val, float) and math.isfinite(val) and val.is_integer():
                if max_value is not None and val > max_value:
                    raise SpecError(self.source, self.name(key), f"must be <= {max_value}, got {short_repr(val)}")
                val = int(val)
            else:
                raise SpecError(self.source, self.name(key), f"expected an integer, got {short_repr(val)}"
                                + _exponent_hint(val))
        if min_value is not None and val < min_value:
            raise SpecError(self.source, self.name(key), f"must be >= {min_value}, got {short_repr(val)}")
        if max_value is not None and val > max_value:
            raise SpecError(self.source, self.name(key), f"must be <= {max_value}, got {short_repr(val)}")
        return int(val)

    def string(self, key: str, default: str | None = None, *, choices: tuple[str, ...] | None = None,
               required: bool | None = None) -> str:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if not isinstance(val, str):
            raise SpecError(self.source, self.name(key), f"expected a string, got {short_repr(val)}")
        if choices is not None and val not in choices:
            raise SpecError(self.source, self.name(key),
                            f"unknown value {short_repr(val)}; expected one of {', '.join(choices)}")
        return val

    def label(self, key: str, default: str | None = None, *, max_chars: int = 128) -> str:
        """A name shown in tables and file contents (never used as a path): printable, no path separators,
        not ``.``/``..``, at most ``max_chars`` characters."""
        val = self.string(key, default)
        if not val.strip() or len(val) > max_chars or not val.isprintable() or any(c in val for c in "/\\\0") \
                or val.strip() in (".", ".."):
            raise SpecError(self.source, self.name(key), f"must be a short printable name without '/' or '\\' "
                            f"(at most {max_chars} characters), got {short_repr(val)}")
        return val

    def boolean(self, key: str, default: bool) -> bool:
        val = self._get(key, default, False)
        if not isinstance(val, bool):
            raise SpecError(self.source, self.name(key), f"expected true or false, got {short_repr(val)}")
        return val

    def list(self, key: str, default: list | None = None, required: bool | None = None,
             max_items: int | None = 1_000_000) -> list:
        req = default is None if required is None else required
        val = self._get(key, default, req)
        if not isinstance(val, list):
            raise SpecError(self.source, self.name(key), f"expected a list, got {short_repr(val)}")
        if max_items is not None and len(val) > max_items:
            raise SpecError(self.source, self.name(key), f"at most {max_items} entries, got {len(val)}")
        return val

    def reject_unknown(self, extra_allowed: tuple[str, ...] = ()) -> None:
        """Unknown keys are errors (catches typos such as ``bw_gpbs``)."""
        unknown = sorted(set(self.data) - self._used - set(extra_allowed), key=lambda k: (str(type(k)), str(k)))
        if unknown:
            near = _close(unknown[0], sorted(self._used | set(extra_allowed)))
            raise SpecError(self.source, self.name(unknown[0]),
                            "unknown field" + (f"; did you mean {near!r}?" if near else ""))


#: a number in exponent notation that YAML 1.1 (PyYAML) reads as text: ``1e6``, ``5e-3``, ``1.0e6`` (it needs a dot
#: and a signed exponent: ``1.0e+6``)
_TEXT_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _exponent_hint(val) -> str:
    """How to write ``val`` so YAML reads it as a number, where it is exponent notation YAML kept as text."""
    if not isinstance(val, str) or not _TEXT_EXPONENT.fullmatch(val.strip()):
        return ""
    f = float(val)
    if not math.isfinite(f):  # 1e999: a number too large either way
        return ""
    mantissa, exponent = f"{f:.15e}".split("e")
    mantissa = mantissa.rstrip("0") + ("0" if mantissa.rstrip("0").endswith(".") else "")
    plain = str(int(f)) if f.is_integer() and abs(f) < 1e15 else (repr(f) if "e" not in repr(f) else "")
    return f" (YAML reads {val.strip()} as text: write {plain + ' or ' if plain else ''}{mantissa}e{exponent})"


def _close(key, candidates) -> str | None:
    """The candidate ``key`` most likely misspells (difflib's ratio >= 0.8), or None."""
    import difflib

    hit = difflib.get_close_matches(str(key), [str(c) for c in candidates], n=1, cutoff=0.8)
    return hit[0] if hit else None
