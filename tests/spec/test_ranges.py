"""The ``uncertain:`` block of topology and model files: every bad range is refused naming the file and the
entry; a good one is kept, and applying a value changes that field and nothing else."""

import copy

import pytest
import yaml

from simfuse.errors import SpecError
from simfuse.spec import load_topology, load_workload
from simfuse.spec.topology import topology_from_dict
from simfuse.spec.workload import workload_from_dict


@pytest.fixture(scope="module")
def topo_raw(root):
    return yaml.safe_load((root / "topologies" / "h100_nvl8_ib_ndr.yaml").read_text())


@pytest.fixture(scope="module")
def model_raw(root):
    return yaml.safe_load((root / "models" / "dlrm_dcnv2_mlperf.yaml").read_text())


def _with(raw, block):
    d = copy.deepcopy(raw)
    d["uncertain"] = block
    return d


@pytest.mark.parametrize("block, field, words", [
    ({"scale_out.efficiency": {"range": [0.9, 0.8], "source": "s"}}, "uncertain.scale_out.efficiency.range",
     "low must be below high"),
    ({"scale_out.efficiency": {"range": [0.5, 0.6], "source": "s"}}, "uncertain.scale_out.efficiency.range",
     "outside"),
    ({"scale_out.efficiency": {"range": [0.8, 1.2], "source": "s"}}, "uncertain.scale_out.efficiency",
     "not a valid value"),
    ({"scale_out.efficiency": {"range": [0.8, 0.95]}}, "uncertain.scale_out.efficiency.source", "where the range"),
    ({"scale_out.efficiency": {"range": [0.8, 0.95], "source": "  "}}, "uncertain.scale_out.efficiency.source",
     "where the range"),
    ({"scale_out.bogus_us": {"range": [0.8, 0.95], "source": "s"}}, "uncertain.scale_out.bogus_us", "no value"),
    ({"scale_out.efficiency": {"range": [0.8], "source": "s"}}, "uncertain.scale_out.efficiency.range",
     "two finite numbers"),
    # an integer beyond float's range (YAML reads 1000...0 written out as an int): refused, not an OverflowError
    ({"scale_out.efficiency": {"range": [0.8, 10**400], "source": "s"}}, "uncertain.scale_out.efficiency.range",
     "two finite numbers"),
    ({"scale_out.efficiency": {"range": [0.8, 0.95], "choices": [1, 2], "source": "s"}},
     "uncertain.scale_out.efficiency", "exactly one"),
    ({"collectives.net_overhead_us": {"range": [0.0, 2.0], "distribution": "loguniform", "source": "s"}},
     "uncertain.collectives.net_overhead_us.range", "low > 0"),
    ({"collectives.net_overhead_us": {"range": [0.5, 2.0], "distribution": "normal", "source": "s"}},
     "uncertain.collectives.net_overhead_us.distribution", "unknown distribution"),
    ({"scale_out.fabric": {"choices": ["fat_tree", "torus"], "source": "s"}}, "uncertain.scale_out.fabric.choices",
     "not among"),
    ({"scale_out.fabric": {"choices": ["rail_optimized", "torus"], "source": "s"}}, "uncertain.scale_out.fabric",
     "not a valid value"),
    ({"scale_out.fabric": {"choices": ["rail_optimized", "fat_tree"], "weights": [1], "source": "s"}},
     "uncertain.scale_out.fabric.weights", "positive numbers"),
    ({"scale_out.efficiency": {"range": [0.8, 0.95], "source": "s", "spread": 1}},
     "uncertain.scale_out.efficiency.spread", "unknown field"),
    ({"scale_out": {"range": [0.8, 0.95], "source": "s"}}, "uncertain.scale_out", "no value"),
    ({"scale_out..x": {"range": [0.8, 0.95], "source": "s"}}, "uncertain.scale_out..x", "dotted field path"),
    ([1, 2], "uncertain", "expected a mapping"),
])
def test_bad_ranges_are_refused_naming_the_entry(topo_raw, block, field, words):
    with pytest.raises(SpecError) as exc:
        topology_from_dict(_with(topo_raw, block), source="t.yaml")
    assert exc.value.source == "t.yaml"
    assert exc.value.field == field
    assert words in exc.value.message


def test_bad_model_range_is_refused(model_raw):
    with pytest.raises(SpecError) as exc:
        workload_from_dict(_with(model_raw, {"dense_dtype": {"choices": ["bf16", "int3"], "source": "s"}}), "m.yaml")
    assert exc.value.field == "uncertain.dense_dtype" and "not a valid value" in exc.value.message


def test_good_ranges_are_kept_and_applied(topo_raw, model_raw):
    t = topology_from_dict(_with(topo_raw, {
        "scale_out.efficiency": {"range": [0.8, 0.96], "source": "public nccl-tests"},
        "collectives.net_overhead_us": {"range": [0.5, 2.0], "distribution": "loguniform", "source": "NCCL"}}),
        "t.yaml")
    assert [r.path for r in t.inputs.ranges] == ["scale_out.efficiency", "collectives.net_overhead_us"]
    r = t.inputs.ranges[1]
    assert (r.low, r.high, r.distribution, r.nominal) == (0.5, 2.0, "loguniform", 1.0)
    # a value changes its field (in the engine's units) and nothing else, and survives other changes to the spec
    other = t.replace(name="changed-elsewhere")
    t2 = t.inputs.apply(other, {"collectives.net_overhead_us": 2.0})
    assert t2.collectives.net_overhead_s == pytest.approx(2e-6)
    assert t2.name == "changed-elsewhere"
    assert t2.scale_out == t.scale_out and t2.device == t.device
    assert t2.collectives.launch_s == t.collectives.launch_s
    # the ranges do not take part in the spec's identity
    assert topology_from_dict(copy.deepcopy(topo_raw), "t.yaml") == t

    m = workload_from_dict(_with(model_raw, {"embedding.dtype": {"choices": ["fp32", "fp16"], "source": "s"}}),
                           "m.yaml")
    m2 = m.inputs.apply(m, {"embedding.dtype": "fp16"})
    assert m2.embedding_dtype == "fp16" and m2.tables == m.tables and m2.global_batch == m.global_batch


def test_value_at_covers_the_distribution(topo_raw):
    t = topology_from_dict(_with(topo_raw, {
        "scale_out.efficiency": {"range": [0.8, 0.96], "source": "s"},
        "collectives.net_overhead_us": {"range": [0.5, 2.0], "distribution": "loguniform", "source": "s"},
        "scale_out.fabric": {"choices": ["rail_optimized", "fat_tree"], "weights": [3, 1], "source": "s"}}),
        "t.yaml")
    eff, ovh, fab = t.inputs.ranges
    assert eff.value_at(0.0) == 0.8 and eff.value_at(0.5) == pytest.approx(0.88)
    assert ovh.value_at(0.5) == pytest.approx((0.5 * 2.0) ** 0.5)  # geometric midpoint
    assert fab.value_at(0.74) == "rail_optimized" and fab.value_at(0.76) == "fat_tree"
    assert eff.extremes == (0.8, 0.96) and fab.extremes == ("fat_tree",)


def test_shipped_files_ranges_parse(root):
    """Every shipped topology and model file loads with its ranges (each end checked by the parser)."""
    n = 0
    for p in sorted((root / "topologies").glob("*.yaml")):
        n += len(load_topology(p).inputs.ranges)
    for p in sorted((root / "models").glob("*.yaml")):
        n += len(load_workload(p).inputs.ranges)
    assert n > 0


def test_misspelt_keys_are_named():
    """A misspelt required key is named beside the missing one, and an unknown key gets the known one it is
    closest to (a typo hint, not a guess: nothing is suggested for a key unlike every known one)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    m = yaml.safe_load((root / "models" / "dlrm_synthetic.yaml").read_text())
    m["dense_featurez"] = m.pop("dense_features")
    with pytest.raises(SpecError, match=r"dense_features: missing required field \(is 'dense_featurez'"):
        workload_from_dict(m, "m.yaml")
    m = yaml.safe_load((root / "models" / "dlrm_synthetic.yaml").read_text())
    m["embedding"]["dimm"] = 3
    with pytest.raises(SpecError, match=r"embedding.dimm: unknown field; did you mean 'dim'\?"):
        workload_from_dict(m, "m.yaml")
    m["embedding"].pop("dimm")
    m["embedding"]["zzzzqqq"] = 3
    with pytest.raises(SpecError, match=r"zzzzqqq: unknown field$"):
        workload_from_dict(m, "m.yaml")
