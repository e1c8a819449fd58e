"""TorchRec sharding plans in their Python ``repr`` form, read without ``eval`` or torchrec.

Older TorchRec releases (and the tutorials written with them) print a ``ShardingPlan`` as the ``repr`` of its
nested dict::

    {'<module>': {'<param>': ParameterSharding(sharding_type='table_wise', compute_kernel='fused', ranks=[0],
     sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_sizes=[R, D],
     placement=rank:0/cuda:0)])), ...}}

optionally wrapped in ``ShardingPlan(plan={...})``, a module's plan alone (``{'<param>': ParameterSharding(...)}``)
or with ``sharding_spec=None``.  The text is tokenized and parsed by a small recursive-descent parser (linear in
the text, nesting bounded by :data:`MAX_DEPTH`): calls become their keyword arguments, a bare placement such as
``rank:3/cuda:3`` a string.  The entries then go through the same checks as the other forms
(:func:`simfuse.workloads.torchrec_plan.to_rows`).
"""

from __future__ import annotations

import re

from ..errors import SpecError
from .torchrec_entry import Entry, Shard, _int_list, _placement_rank

#: Deepest nesting of brackets and calls accepted (a plan nests 6 levels).
MAX_DEPTH = 32
_TOKEN = re.compile(r"""\s*(?:
    (?P<placement>rank:[0-9]{1,9}/[A-Za-z0-9_:]+)
  | (?P<string>'(?:[^'\\\n]|\\.){0,4096}'|"(?:[^"\\\n]|\\.){0,4096}")
  | (?P<number>-?[0-9]{1,30}(?:\.[0-9]{1,30})?(?:[eE][-+]?[0-9]{1,4})?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]{0,255})
  | (?P<punct>[{}()\[\],:=])
)""", re.VERBOSE)


class _Call(dict):
    """A ``Name(key=value, ...)`` call: its keyword arguments, and its name in ``.name``."""

    def __init__(self, name: str, kwargs: dict):
        super().__init__(kwargs)
        self.name = name


class _Parser:
    def __init__(self, text: str, src: str):
        self.text, self.src, self.pos, self.depth = text, src, 0, 0

    def fail(self, what: str) -> SpecError:
        line = self.text.count("\n", 0, self.pos) + 1
        near = self.text[self.pos:self.pos + 30].strip()
        return SpecError(self.src, f"line {line}", f"cannot read the printed plan: {what} (near {near[:30]!r})")

    def peek(self):
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            if self.text[self.pos:].strip() == "":
                return None, None, self.pos
            raise self.fail("unexpected character")
        kind = m.lastgroup
        return kind, m.group(kind), m.end()

    def take(self, want: str | None = None):
        kind, tok, end = self.peek()
        if kind is None:
            raise self.fail("the text ends early")
        if want is not None and tok != want:
            raise self.fail(f"expected {want!r}, got {tok!r}")
        self.pos = end
        return kind, tok

    def value(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        try:
            kind, tok = self.take()
            if kind == "string":
                return tok[1:-1].encode("utf-8", "backslashreplace").decode("unicode_escape", "replace")
            if kind == "number":
                return float(tok) if any(c in tok for c in ".eE") else int(tok)
            if kind == "placement":
                return tok
            if kind == "name":
                if self.peek()[1] == "(":
                    return self.call(tok)
                return {"None": None, "True": True, "False": False}.get(tok, tok)
            if tok == "{":
                return self.seq("}", pairs=True)
            if tok in "[(":
                return self.seq("]" if tok == "[" else ")", pairs=False)
            raise self.fail(f"unexpected {tok!r}")
        finally:
            self.depth -= 1

    def seq(self, close: str, pairs: bool):
        out: dict | list = {} if pairs else []
        while self.peek()[1] != close:
            v = self.value()
            if pairs:
                self.take(":")
                if not isinstance(v, (str, int)):
                    raise self.fail("a key must be a string")
                out[v] = self.value()  # type: ignore[index]
            else:
                out.append(v)  # type: ignore[union-attr]
            if self.peek()[1] != close:
                self.take(",")
        self.take(close)
        return out

    def call(self, name: str) -> _Call:
        self.take("(")
        kwargs = {}
        while self.peek()[1] != ")":
            kind, key = self.take()
            if kind != "name":
                raise self.fail(f"expected a keyword argument of {name}")
            self.take("=")
            kwargs[key] = self.value()
            if self.peek()[1] != ")":
                self.take(",")
        self.take(")")
        return _Call(name, kwargs)


def _strip_prefix(text: str) -> str:
    """The text from the plan's first ``{`` or ``ShardingPlan(`` on (log text before it is ignored)."""
    starts = [i for i in (text.find("ShardingPlan("), text.find("{")) if i >= 0]
    return text[min(starts):] if starts else text


def read_repr(path):
    """The entries of a plan printed as its Python repr (see the module docstring)."""
    from ..io_limits import read_text

    src = str(path)
    text = _strip_prefix(read_text(path, "plan", what="plan file", errors="replace"))
    p = _Parser(text, src)
    top = p.value()
    if isinstance(top, _Call) and "plan" in top:
        top = top["plan"]
    if not isinstance(top, dict) or not top:
        raise SpecError(src, "", "expected a dict of modules (or of parameters) of ParameterSharding(...)")
    modules = {"": top} if any(isinstance(v, _Call) for v in top.values()) else top
    entries = []
    for module, params in modules.items():
        if not isinstance(params, dict):
            raise SpecError(src, str(module)[:60], "expected a dict of parameters of ParameterSharding(...)")
        for param, ps in params.items():
            fld = f"{module}/{param}" if module else str(param)
            if not isinstance(ps, _Call) or ps.name.rsplit(".", 1)[-1] != "ParameterSharding":
                raise SpecError(src, fld, "expected ParameterSharding(...)")
            st = ps.get("sharding_type")
            st = st.rsplit(".", 1)[-1].lower() if isinstance(st, str) else st  # ShardingType.TABLE_WISE too
            if not isinstance(st, str):
                raise SpecError(src, f"{fld}.sharding_type", f"expected a string, got {str(st)[:40]!r}")
            ranks = ps.get("ranks")
            ranks = None if ranks is None else _int_list(ranks, src, f"{fld}.ranks")
            spec = ps.get("sharding_spec")
            shards = None
            if isinstance(spec, dict) and spec.get("shards") is not None:
                if not isinstance(spec["shards"], list):
                    raise SpecError(src, f"{fld}.sharding_spec", "expected a list of ShardMetadata(...)")
                shards = []
                for i, sm in enumerate(spec["shards"]):
                    f = f"{fld}.shards[{i}]"
                    if not isinstance(sm, dict):
                        raise SpecError(src, f, "expected ShardMetadata(...)")
                    o = _int_list(sm.get("shard_offsets"), src, f + ".shard_offsets", 2)
                    z = _int_list(sm.get("shard_sizes"), src, f + ".shard_sizes", 2)
                    shards.append(Shard((o[0], o[1]), (z[0], z[1]), _placement_rank(sm.get("placement"), src,
                                                                                   f + ".placement")))
            elif spec is not None and not isinstance(spec, dict):
                raise SpecError(src, f"{fld}.sharding_spec", "expected EnumerableShardingSpec(...) or None")
            entries.append(Entry(str(module), str(param), st, ranks, shards, fld))
    if not entries:
        raise SpecError(src, "", "the plan lists no tables")
    return entries


__all__ = ["MAX_DEPTH", "read_repr"]
