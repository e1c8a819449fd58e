"""What a new user reads: a run without an interval says so (and why) instead of printing p10 = p50 = p90; a batch
that does not split suggests what would; validate labels held-out and in-sample errors; op --help lists every
operator's parameters from the registry."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simfuse.cli import main
from simfuse.errors import SpecError

H100 = "topologies/h100_nvl8_ib_ndr.yaml"  # no calibration profile: no residuals, no interval
MODEL = "models/dlrm_synthetic.yaml"


# ----------------------------------------------------------------------------------------- no interval

def test_rows_without_interval_are_empty_and_say_why():
    from simfuse.fused.knobs import parse_execution
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.run import simulate_workload, summary_rows

    system = System.load(H100)
    assert not system.has_residuals
    for asked, why in (("bound", "no calibration profile with residuals"), ("none", "not asked")):
        ex = parse_execution({"uncertainty": asked})
        res = simulate_workload(load_workload(MODEL), system, 1, execution=ex)
        rows = {r["mode"]: r for r in summary_rows("m", "t", 1, 8, res, ex)}
        for r in rows.values():
            assert r["uncertainty"] == "none" and why in r["uncertainty_note"]
            assert all(math.isnan(r[f"iteration_time_{q}_s"]) for q in ("p10", "p50", "p90"))
        assert all(math.isnan(rows["fused"][f"speedup_{q}"]) for q in ("p10", "p50", "p90"))
        assert not math.isnan(rows["fused"]["speedup"])  # the point estimate is still there


def test_run_prints_no_interval_instead_of_equal_quantiles(capsys):
    assert main(["run", "--model", MODEL, "--topology", H100, "--nodes", "1", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "p10_ms" not in out and "speedup_p10" not in out
    assert "no interval" in out and "residuals" in out


def test_run_with_interval_labels_it(capsys):
    assert main(["run", "--model", MODEL, "--topology", "topologies/h200_nvl8_ib_ndr.yaml", "--nodes", "1",
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "p10_ms" in out and "prediction interval from the kernel cost model's cross-validated residuals" in out


# --------------------------------------------------------------------------------- batches that do not split

def _hint_numbers(hint: str):
    nodes = re.search(r"node counts that split it: ([\d, or]+);", hint)
    node_counts = [int(x.replace(",", "")) for x in re.findall(r"[\d,]+", nodes.group(1))] if nodes else []
    per_gpu = int(re.search(r"--batch-per-gpu ([\d,]+)", hint).group(1).replace(",", ""))
    batches = [int(x.replace(",", "")) for x in
               re.findall(r"[\d,]+", re.search(r"--global-batch ([\d, or]+)$", hint).group(1))]
    return node_counts, per_gpu, batches


@given(batch=st.integers(1, 2**20), nodes=st.integers(1, 2048), g=st.sampled_from([1, 4, 8]))
def test_batch_split_hint_suggests_what_splits(batch, nodes, g):
    """Every node count suggested splits the batch, the nearest on each side of the asked one; the suggested
    global batches split over the asked GPUs and bracket the batch."""
    from simfuse.workloads.planner import batch_split_hint

    n = nodes * g
    if batch % n == 0:
        return
    node_counts, per_gpu, batches = _hint_numbers(batch_split_hint(batch, nodes, g))
    assert per_gpu >= 1
    for k in node_counts:
        assert k != nodes and batch % (k * g) == 0
    below = [k for k in node_counts if k < nodes]
    if below:  # nothing between the suggestion and the asked count splits
        assert all(batch % (k * g) for k in range(below[0] + 1, nodes))
    assert all(b % n == 0 for b in batches) and max(batches) > batch
    assert min(batches) < batch or min(batches) == n  # (n itself when the batch is below one per GPU)


def test_refusal_names_batch_per_gpu(capsys):
    assert main(["run", "--model", "models/dlrm_dcnv2_tablewise.yaml", "--topology", H100, "--nodes", "100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--batch-per-gpu" in err and "not divisible" in err
    node_counts, per_gpu, _ = _hint_numbers(err.strip().split("; try ", 1)[1])
    assert node_counts and per_gpu > 0


def test_check_batch_split_still_raises_spec_error():
    from simfuse.spec import load_workload
    from simfuse.workloads.planner import check_batch_split

    with pytest.raises(SpecError, match="global_batch"):
        check_batch_split(load_workload("models/dlrm_dcnv2_tablewise.yaml"), 100, 8)


# ------------------------------------------------------------------------------------------------ validate

def _stats(points, median, worst):
    return {"points": points, "median_abs_pct_error": median, "max_abs_pct_error": worst}


def test_validate_labels_held_out_and_in_sample():
    from simfuse.cli.calibrate import validation_lines

    summary = {"basis": "held_out", "held_out": _stats(18, 3.76, 20.1), "held_out_in_calibration_range":
               _stats(18, 3.76, 20.1), "calibration_kernels": _stats(24, 10.7, 36.9),
               "calibration_collectives": _stats(0, None, None)}
    lines = validation_lines(summary, makespan=True)
    held = next(line for line in lines if "3.76%" in line)
    ins = next(line for line in lines if "10.70%" in line)
    assert held.startswith("held-out") and "NOT fitted" in held
    assert lines.index(ins) > lines.index(next(line for line in lines if line.startswith("in-sample")))
    assert any("makespan" in line for line in lines)
    no_held = validation_lines({**summary, "basis": "calibration", "held_out": _stats(0, None, None)})
    assert "none given" in no_held[0] and "in-sample only" in no_held[0]


def test_validate_cli_prints_both_labels(capsys):
    from simfuse.cli.calibrate import main as cal_main

    assert cal_main(["validate", "--topology", "topologies/h200_nvl8_ib_ndr.yaml", "--measurements",
                     "experiments/results/h200_kernel_heldout.csv"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("held-out (") and "\nin-sample (" in out


# ------------------------------------------------------------------------------------------------- op --help

def test_op_help_lists_every_operator_and_parameter(capsys):
    """The help comes from the operator registry: every operator and every one of its parameters appears."""
    import dataclasses

    from simfuse.fused.knobs import FusedKnobs
    from simfuse.fused.ops import OPS

    with pytest.raises(SystemExit):
        main(["op", "--help"])
    text = capsys.readouterr().out
    epilog = text[text.index("operators and their parameters"):]
    for name, cls in OPS.items():
        block = epilog[epilog.index(f"  {name}:") + 2:]
        nxt = re.search(r"\n  \S", block)  # the next operator (or the knobs' heading ends it)
        flat = " ".join(block[:nxt.start() if nxt else None].split())
        for param, default in cls.defaults.items():
            assert f"{param} ({default})" in flat, (name, param)
    for f in dataclasses.fields(FusedKnobs):  # twrw_push acts on DLRM's embedding only: refused by op, not listed
        assert (f"  {f.name}:" in epilog) == (f.name != "twrw_push"), f.name
