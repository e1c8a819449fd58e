"""uncertainty=inputs: Latin hypercube draws are stratified and reproducible, the sensitivity ranks the inputs
of a known function correctly, and a run reports its band, its drivers and its tables, the same for any number
of workers."""

import copy

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.fused.knobs import parse_execution
from simfuse.spec.ranges import InputRange
from simfuse.spec.topology import topology_from_dict
from simfuse.spec.workload import workload_from_dict
from simfuse.system import System
from simfuse.uncertainty import Input, InputAnalysis, latin_hypercube, lhs_design, oat_design
from simfuse.workloads.run import simulate_workload, summary_rows, write_run_outputs


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_lhs_one_point_per_stratum(n, d, seed):
    u = latin_hypercube(n, d, np.random.default_rng(seed))
    assert u.shape == (n, d)
    assert ((u >= 0) & (u < 1)).all()
    for j in range(d):
        assert sorted(np.floor(u[:, j] * n).astype(int)) == list(range(n))


def _inputs(k):
    return [Input("model", InputRange(f"x{i}", 0.5, "synthetic", 0.0, 1.0)) for i in range(k)]


def test_sampling_identical_under_one_seed():
    inp = _inputs(4) + [Input("topology", InputRange("c", "a", "s", choices=("a", "b", "c")))]
    a = lhs_design(inp, 16, np.random.default_rng(7))
    b = lhs_design(inp, 16, np.random.default_rng(7))
    c = lhs_design(inp, 16, np.random.default_rng(8))
    assert a == b and a != c
    assert {d["topology:c"] for d in a} == {"a", "b", "c"}


def test_sensitivity_ranks_a_known_function():
    """y = 1 + 4 x0 - 2 x1 + 0.5 x2 + 0 x3 (+ a small x0 x1 interaction): the ranking is x0, x1, x2, x3, the
    swings are the closed-form ones and the rank correlations carry the signs."""
    inp = _inputs(4)
    w = [4.0, -2.0, 0.5, 0.0]

    def f(v):
        x = [v.get(f"model:x{i}", 0.5) for i in range(4)]
        return 1 + sum(wi * xi for wi, xi in zip(w, x, strict=True)) + 0.1 * x[0] * x[1]

    def times(y):  # the analysed metric is the speedup baseline / fused: fused 1 s, baseline y s
        return {"baseline": y, "fused": 1.0}

    draws = [{"values": v, "times": times(f(v))} for v in lhs_design(inp, 64, np.random.default_rng(0))]
    oat = [{"input": n, "value": v, "times": times(f({n: v}))} for n, v in oat_design(inp)]
    an = InputAnalysis(inp, draws, oat, times(f({})))
    rows = an.sensitivity_rows()
    assert [r["input"] for r in rows] == ["model:x0", "model:x1", "model:x2", "model:x3"]
    assert rows[0]["swing"] == pytest.approx(4.0 + 0.1 * 0.5)
    assert rows[1]["swing"] == pytest.approx(2.0 - 0.1 * 0.5)
    assert rows[3]["swing"] == pytest.approx(0.0)
    # rank correlations: about 0.88, -0.44, 0.11, 0 in theory (weights over their root sum of squares)
    assert rows[0]["spearman"] > 0.7 and rows[1]["spearman"] < -0.15 and abs(rows[3]["spearman"]) < 0.3
    assert rows[1]["value_at_min"] == 1.0 and rows[1]["value_at_max"] == 0.0  # x1 hurts


@pytest.fixture(scope="module")
def ranged(root):
    t = yaml.safe_load((root / "topologies" / "h100_nvl8_ib_ndr.yaml").read_text())
    t.pop("uncertain", None)
    t["uncertain"] = {"scale_out.efficiency": {"range": [0.6, 0.96], "source": "test"},
                      "gpu_initiated.occupancy_loss": {"range": [0.0, 0.25], "source": "test"}}
    m = yaml.safe_load((root / "models" / "dlrm_synthetic.yaml").read_text())
    m.pop("uncertain", None)
    m.setdefault("embedding", {})["key_dtype"] = "int64"
    m["uncertain"] = {"embedding.key_dtype": {"choices": ["int64", "int32"], "source": "test"}}
    return workload_from_dict(m, "m.yaml"), System.from_topology(topology_from_dict(t, "t.yaml"))


def test_run_reports_band_drivers_and_tables(ranged, tmp_path):
    spec, system = ranged
    ex = parse_execution({"uncertainty": "inputs", "uncertainty_draws": 6})
    res = simulate_workload(spec, system, 2, execution=ex, workers=1)
    again = simulate_workload(spec, system, 2, execution=ex, workers=2)
    for m in res:
        assert res[m].interval == again[m].interval
        iv = res[m].interval
        assert iv["p10"] <= iv["p50"] <= iv["p90"]
    an = res["fused"].input_analysis
    assert len(an.draws) == 6 and len(an.oat) == 2 + 2 + 1
    # the nominal inputs are the point estimate: each one-at-a-time run at the nominal value would equal it
    sens = an.sensitivity_rows()
    assert {r["input"] for r in sens} == {"model:embedding.key_dtype", "topology:scale_out.efficiency",
                                         "topology:gpu_initiated.occupancy_loss"}
    for r in sens:
        assert r["metric_min"] <= r["metric_nominal"] <= r["metric_max"]
    # a slower network can only lengthen the bulk baseline's step
    eff = [o for o in an.oat if o["input"] == "topology:scale_out.efficiency"]
    lo, hi = sorted(eff, key=lambda o: o["value"])
    assert lo["times"]["baseline"] >= hi["times"]["baseline"]
    rows = summary_rows(spec.name, system.name, 2, 16, res, ex)
    fused = rows[1]
    assert fused["uncertainty"] == "inputs" and fused["driver1"] == sens[0]["input"]
    written = write_run_outputs(tmp_path, res, rows, False)
    names = {p.name for p in written}
    assert {"sensitivity.csv", "uncertainty_draws.csv", "tornado.png"} <= names
    table = pd.read_csv(tmp_path / "sensitivity.csv")
    assert list(table["input"]) == [r["input"] for r in sens]
    draws = pd.read_csv(tmp_path / "uncertainty_draws.csv")
    assert len(draws) == 6 and "topology:scale_out.efficiency" in draws


def test_no_ranges_no_residuals_says_why(root):
    m = yaml.safe_load((root / "models" / "dlrm_synthetic.yaml").read_text())
    m.pop("uncertain", None)
    t = yaml.safe_load((root / "topologies" / "h100_nvl8_ib_ndr.yaml").read_text())
    t.pop("uncertain", None)
    system = System.from_topology(topology_from_dict(t, "t.yaml"))
    res = simulate_workload(workload_from_dict(copy.deepcopy(m), "m.yaml"), system, 1,
                            execution=parse_execution({"uncertainty": "inputs"}))
    r = res["fused"]
    assert r.uncertainty == "none" and "no input ranges" in r.uncertainty_note
    res = simulate_workload(workload_from_dict(m, "m.yaml"), system, 1, execution=parse_execution({}))
    assert "no calibration profile" in res["fused"].uncertainty_note


def test_rank_mode_reads_swings_off_the_draws():
    """Without one-at-a-time runs the swing is the mean metric of each input's low and high quarter of draws:
    on a known additive function it ranks the inputs as the weights do and gives the signs of their effects."""
    inp = _inputs(4)
    w = [4.0, -2.0, 0.5, 0.0]

    def y(v):
        return 1 + sum(wi * v.get(f"model:x{i}", 0.5) for i, wi in enumerate(w))

    draws = [{"values": v, "times": {"baseline": y(v), "fused": 1.0}}
             for v in lhs_design(inp, 64, np.random.default_rng(3))]
    rows = InputAnalysis(inp, draws, [], {"baseline": y({}), "fused": 1.0}).sensitivity_rows()
    assert [r["input"] for r in rows][:2] == ["model:x0", "model:x1"]
    assert {r["method"] for r in rows} == {"conditional"}
    # the quarter means of a uniform x differ by 3/4 of its range: swing ~ 0.75 |w| (other inputs average out)
    assert rows[0]["swing"] == pytest.approx(0.75 * 4.0, rel=0.15)
    assert rows[1]["value_at_min"] > 0.5 > rows[1]["value_at_max"]  # x1 hurts: its high quarter is the minimum
    for r in rows:  # the swing is the gap between the quarters' means (the nominal point need not lie between)
        assert r["swing"] == pytest.approx(r["metric_max"] - r["metric_min"]) and r["swing"] >= 0
    assert rows[-1]["input"] == "model:x3" or rows[-1]["swing"] < 0.2 * rows[0]["swing"]  # x3 does nothing
    # too few draws for quarters: the rank correlation alone orders the inputs, and no swing is claimed
    few = InputAnalysis(inp, draws[:8], [], {"baseline": y({}), "fused": 1.0}).sensitivity_rows()
    assert {r["method"] for r in few} == {"rank"} and all(r["swing"] == 0 for r in few)
    assert {r["input"] for r in few[:2]} == {"model:x0", "model:x1"}  # the two strong ones, by |rank corr.|
