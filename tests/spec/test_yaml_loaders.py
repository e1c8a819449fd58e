"""The libyaml loader (``StrictCLoader``, what :func:`parse_yaml_text` uses when PyYAML has libyaml) must read
every document exactly as the pure-Python ``StrictLoader`` does and refuse the same ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.spec import _fields
from simfuse.spec._fields import MAX_DEPTH, StrictLoader, parse_yaml_text

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(getattr(_fields, "_FAST_LOADER", None) is None, reason="PyYAML without libyaml")


def _outcome(text: str, loader):
    try:
        return ("ok", yaml.load(text, Loader=loader))  # noqa: S506 - both loaders are SafeLoaders
    except yaml.YAMLError as exc:
        refused = getattr(exc, "problem", "") if isinstance(exc, _fields._Refused) else "yaml error"
        return ("refused", refused)


def _both(text: str):
    return _outcome(text, StrictLoader), _outcome(text, _fields._FAST_LOADER)


def test_parse_yaml_text_uses_the_fast_loader(monkeypatch):
    calls = []
    real = _fields._FAST_LOADER

    class Spy(real):
        def get_single_data(self):
            calls.append(1)
            return super().get_single_data()

    monkeypatch.setattr(_fields, "_FAST_LOADER", Spy)
    assert parse_yaml_text("a: [1, 2]\n", "<t>") == {"a": [1, 2]}
    assert calls == [1]


def test_every_shipped_yaml_file_reads_the_same():
    files = sorted(p for d in ("topologies", "models", "profiles") for p in (ROOT / d).rglob("*.yaml"))
    assert len(files) > 10
    for p in files:
        text = p.read_text(encoding="utf-8")
        slow, fast = _both(text)
        assert slow[0] == "ok", p
        assert fast == slow, p


@pytest.mark.parametrize("text", [
    "a: 1\nb: 2\na: 3\n",  # duplicate key
    "- " * (MAX_DEPTH + 3) + "x\n",  # block nesting beyond the limit
    "x: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",  # flow nesting one beyond
    "x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n",  # exactly at the limit with the top mapping: refused too
    "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n",  # at the limit: read
    "description: " + "[" * 5000 + "]" * 5000 + "\n",  # far beyond (libyaml's own limit is 1,000)
    "r: &r [*r]\n",  # recursive alias
    "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(7)),
    "base: &b {q: 1, r: 2}\nm:\n  <<: *b\n  q: 5\n",  # merge overridden: not a duplicate
    "a: [1, 2\n",  # unterminated
    "evil: !!python/name:os.system ''\n",  # unsafe tag
    "a: .nan\nb: -.inf\n",
    "",
])
def test_edge_documents_agree(text):
    slow, fast = _both(text)
    assert fast[0] == slow[0]
    if slow[0] == "ok":
        assert repr(fast[1]) == repr(slow[1])  # repr: NaN != NaN
    else:
        assert fast[1] == slow[1] or "yaml error" in (fast[1], slow[1])


def test_depth_is_counted_where_the_anchor_is_written():
    """An anchor written near the top and aliased deep inside adds no nesting where it is aliased (the composer
    reuses the node): both loaders accept it, although expanding it there would exceed the limit."""
    sub = "[" * 20 + "]" * 20
    deep = "[" * (MAX_DEPTH - 10) + "*s" + "]" * (MAX_DEPTH - 10)
    text = f"s: &s {sub}\nd: {deep}\n"
    slow, fast = _both(text)
    assert slow[0] == fast[0] == "ok"
    with pytest.raises(SpecError, match="nested deeper"):
        parse_yaml_text(f"d: {deep.replace('*s', sub)}\n", "<t>")


_leaf = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                  st.none(), st.text(max_size=8))
_doc = st.recursive(_leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                    max_leaves=30)


@settings(max_examples=60, deadline=None)
@given(_doc, st.booleans())
def test_random_documents_agree(doc, flow):
    text = yaml.safe_dump({"root": doc}, default_flow_style=flow, allow_unicode=True)
    slow, fast = _both(text)
    assert slow[0] == "ok"
    assert fast == slow


@pytest.mark.parametrize("edit, field", [
    # the cross network's shape given to another interaction was silently ignored
    (lambda t: t.replace("kind: dcn", "kind: dot"), "interaction.layers"),
    (lambda t: t.replace("kind: dcn", "kind: dot").replace("  layers: 3\n", ""), "interaction.low_rank"),
])
def test_interaction_settings_that_would_be_ignored_are_refused(tmp_path, edit, field):
    from pathlib import Path

    from simfuse.errors import SpecError
    from simfuse.spec import load_workload

    root = Path(__file__).resolve().parents[2]
    p = tmp_path / "m.yaml"
    p.write_text(edit((root / "models" / "dlrm_dcnv2_mlperf.yaml").read_text()))
    with pytest.raises(SpecError) as err:
        load_workload(p)
    assert err.value.field == field and str(p) in str(err.value)
