"""Prediction intervals on projections: they collapse without residuals (roofline, a perfect fit), widen when
the residuals do, are ordered, reproducible with a seed, and reach the run table and the CLI."""

import dataclasses

import pytest

from simfuse.fused.knobs import parse_execution
from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads.run import simulate_workload, summary_rows


@pytest.fixture(scope="module")
def h200(root):
    return System.load(root / "topologies" / "h200_nvl8_ib_ndr.yaml")


@pytest.fixture(scope="module")
def model(root):
    return load_workload(root / "models" / "transformer_tp_decode.yaml")


def _scaled_residuals(system: System, factor: float) -> System:
    inner = system.cost.inner
    waves = {k: dataclasses.replace(w, residual_logs=tuple(factor * x for x in w.residual_logs))
             for k, w in inner.wave_fits.items()}
    return system._with_inner(inner._with_waves(waves))


def _width(res, mode="fused"):
    iv = res[mode].interval
    return iv["p90"] - iv["p10"]


def test_collapses_without_residuals(h200, model):
    roof = System.from_topology(h200.nominal, calibrated=False)
    assert not roof.has_residuals
    res = simulate_workload(model, roof, 1)
    for r in res.values():
        assert r.uncertainty == "none"
        assert r.interval["p10"] == r.interval["p50"] == r.interval["p90"] == r.iteration_time_s
    perfect = _scaled_residuals(h200, 0.0)  # residuals all zero: a perfect fit
    res = simulate_workload(model, perfect, 1)
    assert _width(res) == pytest.approx(0.0, abs=1e-15)
    assert res["fused"].interval["p50"] == pytest.approx(res["fused"].iteration_time_s)


def test_ordered_and_widen_with_residuals(h200, model):
    assert h200.has_residuals
    base = simulate_workload(model, h200, 1)
    wide = simulate_workload(model, _scaled_residuals(h200, 2.0), 1)
    for res in (base, wide):
        for r in res.values():
            assert r.interval["p10"] <= r.interval["p50"] <= r.interval["p90"]
        s = res["fused"].speedup_interval
        assert s["p10"] <= s["p50"] <= s["p90"]
        # the bound spans the point estimate's model (every factor 1): the point lies inside, times and speedup
        point = res["baseline"].iteration_time_s / res["fused"].iteration_time_s
        assert s["p10"] <= point <= s["p90"]
        for r in res.values():
            assert r.interval["p10"] <= r.iteration_time_s <= r.interval["p90"]
    assert _width(wide) > _width(base) > 0


def test_monte_carlo_is_seeded(h200, model):
    ex = parse_execution({"uncertainty": "mc", "uncertainty_draws": 4, "seed": 3})
    a = simulate_workload(model, h200, 1, execution=ex)
    b = simulate_workload(model, h200, 1, execution=ex)
    assert a["fused"].interval == b["fused"].interval
    assert a["fused"].uncertainty == "mc"


def test_rows_carry_the_interval(h200, model):
    res = simulate_workload(model, h200, 1)
    rows = {r["mode"]: r for r in summary_rows("m", "t", 1, 8, res)}
    assert rows["fused"]["iteration_time_p10_s"] <= rows["fused"]["iteration_time_p90_s"]
    assert "speedup_p90" in rows["fused"] and rows["fused"]["uncertainty"] == "bound"
    none = simulate_workload(model, h200, 1, execution=parse_execution({"uncertainty": "none"}))
    assert none["fused"].uncertainty == "none"


def test_op_intervals(h200):
    from simfuse.fused.ops import make_op
    from simfuse.workloads.op import run_op

    op = make_op("gemv_all_reduce", {"n": 4096, "k": 4096}, 1, 8)
    res = run_op(op, h200, 1)
    iv = res.intervals
    for k in ("baseline_time_s", "fused_time_s", "speedup"):
        assert iv[k]["p10"] <= iv[k]["p50"] <= iv[k]["p90"]
    assert run_op(op, h200, 1, uncertainty="none").intervals == {}
    assert run_op(op, System.from_topology(h200.nominal, calibrated=False), 1).intervals == {}


def test_sweep_plot_draws_bands(tmp_path, h200, model):
    import pandas as pd

    from simfuse.results.plots import plot_speedup_vs_nodes

    rows = []
    for n in (1, 2):
        rows += summary_rows("m", "t", n, 8 * n, simulate_workload(model, h200, n))
    out = plot_speedup_vs_nodes(pd.DataFrame(rows), tmp_path / "s.png")
    assert out.exists() and out.stat().st_size > 10_000


def test_bound_envelope_is_sorted_and_holds_the_point():
    from simfuse.workloads.op import bound_envelope

    # the p10 model's run longer than the p90 model's (contention): sorted; a point outside: widened to it
    assert bound_envelope([3.0, 2.0, 1.0], 2.5) == {"p10": 1.0, "p50": 2.0, "p90": 3.0}
    assert bound_envelope([1.0, 1.1, 1.2], 1.3) == {"p10": 1.0, "p50": 1.1, "p90": 1.3}
    assert bound_envelope([1.0, 1.1, 1.2], 0.9)["p10"] == 0.9


def test_op_interval_holds_the_point(h200):
    from simfuse.fused.ops import make_op
    from simfuse.workloads.op import run_op

    res = run_op(make_op("gemm_all_to_all", {}, 1, 8), h200, 1)
    point = {"baseline_time_s": res.baseline_time_s, "fused_time_s": res.fused_time_s,
             "speedup": res.baseline_time_s / res.fused_time_s}
    for key, iv in res.intervals.items():
        assert iv["p10"] <= iv["p50"] <= iv["p90"] and iv["p10"] <= point[key] <= iv["p90"]
