"""Hypothesis-driven mutations of valid specs: whatever the mutation (types, signs, NaN/inf, huge values, missing
and extra keys, duplicates, aliases), loading either succeeds or raises SpecError -- never another exception."""

from __future__ import annotations

import copy
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.spec import topology_from_dict, workload_from_dict
from simfuse.spec._fields import parse_yaml_text

from .conftest import model_dict, topo_dict

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.text(max_size=20), st.just("../../etc/passwd"), st.just("1e400"),
    st.integers(min_value=-(10**30), max_value=10**30), st.just(10**400), st.just(-1), st.just(0),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def _paths(d, prefix=()):
    """Every (path) to a value in the nested dict/list."""
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out.append(prefix + (i,))
            out.extend(_paths(v, prefix + (i,)))
    return out


@st.composite
def mutated(draw, base_fn):
    base = base_fn()
    d = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(d)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = d
        for p in path[:-1]:
            parent = parent[p]
        action = draw(st.sampled_from(["replace", "replace", "delete", "extra"]))
        if action == "replace":
            parent[path[-1]] = draw(HOSTILE)
        elif action == "delete":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif isinstance(parent, dict):
            parent[draw(st.one_of(st.text(max_size=8), st.integers()))] = draw(HOSTILE)
    return d


def _load(fn, data):
    try:
        fn(data, "<fuzz>")
    except SpecError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) < 1000


@SETTINGS
@given(mutated(topo_dict))
def test_mutated_topologies_load_or_raise_spec_error(d):
    d.pop("calibration", None)  # keep the profile out: this is about the topology's own fields
    _load(topology_from_dict, d)


@SETTINGS
@given(mutated(model_dict))
def test_mutated_models_load_or_raise_spec_error(d):
    _load(workload_from_dict, d)


def _dump(d) -> str:
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True)


TEXT_EDITS = st.sampled_from([
    "dup", "alias", "bomb", "deep", "nan", "inf", "tag", "tab", "merge", "recursive",
])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(["topo", "model"]), edit=TEXT_EDITS, key_index=st.integers(0, 50))
def test_text_level_mutations_raise_spec_error_or_load(which, edit, key_index):
    d = topo_dict() if which == "topo" else model_dict()
    d.pop("calibration", None)
    keys = list(d)
    key = keys[key_index % len(keys)]
    text = _dump(d)
    if edit == "dup":
        text += f"{key}: {yaml.safe_dump(d[key], default_flow_style=True).strip()}\n"
    elif edit == "alias":
        text = "x_anchor: &x 1\n" + text.replace(f"\n{key}:", f"\n{key}: *x\n{key}_old:", 1)
    elif edit == "bomb":
        text = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(7)) + text
    elif edit == "deep":
        text += "description: " + "[" * 5000 + "]" * 5000 + "\n"
    elif edit == "nan":
        text += "description: [.nan]\n"
    elif edit == "inf":
        text = text.replace(": 8\n", ": .inf\n", 1) if ": 8\n" in text else text + "x: -.inf\n"
    elif edit == "tag":
        text += "evil: !!python/name:os.system ''\n"
    elif edit == "tab":
        text = text.replace("  ", "\t", 1)
    elif edit == "merge":
        text += "base: &b {q: 1}\nmerged:\n  <<: *b\n  q: 2\n"
    elif edit == "recursive":
        text += "r: &r [*r]\n"
    fn = topology_from_dict if which == "topo" else workload_from_dict
    try:
        data = parse_yaml_text(text, "<fuzz>")
        fn(data, "<fuzz>")
    except SpecError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1000
    else:
        raise AssertionError(f"{edit} was accepted")  # every edit here makes the file invalid


def test_duplicate_keys_and_merges():
    import pytest

    with pytest.raises(SpecError, match="duplicate key 'a'"):
        parse_yaml_text("a: 1\nb: 2\na: 3\n", "<t>")
    # a merge key may be overridden explicitly: that is not a duplicate
    assert parse_yaml_text("base: &b {q: 1, r: 2}\nm:\n  <<: *b\n  q: 5\n", "<t>")["m"] == {"q": 5, "r": 2}
    # plain aliases of small values are fine
    assert parse_yaml_text("x: &x [1, 2]\ny: *x\n", "<t>")["y"] == [1, 2]
