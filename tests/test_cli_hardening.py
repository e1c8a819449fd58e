"""Problems an independent review found by using the CLI (stop 23): each is a regression test.

* an input error raised inside a simulation process reached the user as a TypeError traceback (simpy rebuilds a
  process's exception as ``type(e)(*e.args)``);
* the shipped LLM models could not be run from the command line (the cost guard had no estimate for them);
* ``--seed -1`` crashed in numpy; unknown algorithm names passed when the run did not meet that collective;
* the fused GEMM operators' baseline: the operator's own kernel unfused by default (it was priced as cuBLAS on
  the H200), or a library kernel on request.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from simfuse.cli import main
from simfuse.costs import KernelWork
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError, TraceError
from simfuse.fused.knobs import FusedKnobs, parse_execution
from simfuse.fused.ops import make_op
from simfuse.system import System
from simfuse.workloads.op import run_op

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"


@pytest.mark.parametrize("cls", [SpecError, TraceError])
def test_errors_rebuild_from_their_args_and_pickle(cls):
    e = cls("file.yaml", "field", "went wrong")
    again = type(e)(*e.args)
    assert str(again) == str(e) == "file.yaml: field: went wrong"
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


def test_an_input_error_inside_a_simulation_is_a_clean_exit_2(capsys):
    # nvls_tree is a known all-reduce algorithm, but needs several nodes: the error is raised while simulating
    rc = main(["op", "--op", "gemv_all_reduce", "--topology", str(H200), "--nodes", "1",
               "--set", "baseline_algorithm=nvls_tree"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs at least 2 nodes" in err and "Traceback" not in err


def test_shipped_llm_model_runs_from_the_cli(tmp_path, capsys):
    rc = main(["run", "--model", str(ROOT / "models" / "llm_tp_dp.yaml"), "--topology", str(H200), "--nodes", "1",
               "--set", "uncertainty=none", "--out", str(tmp_path / "o")])
    assert rc == 0 and (tmp_path / "o" / "summary.csv").exists()


@pytest.mark.parametrize("cmd", [["collective", "--op", "all_reduce", "--size", "1MiB"],
                                 ["op", "--op", "gemv_all_reduce"]])
def test_negative_seed_is_refused(capsys, cmd):
    with pytest.raises(SystemExit) as e:
        main([*cmd, "--topology", str(H200), "--nodes", "1", "--seed", "-1"])
    assert e.value.code == 2 and "non-negative" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["allreduce_algorithm", "alltoall_algorithm", "baseline_algorithm"])
def test_unknown_algorithm_names_are_refused_even_if_unused(key):
    with pytest.raises(SpecError, match=key):
        parse_execution({key: "foo"})
    parse_execution({key: "direct"})  # a known name passes


def test_library_kernels_only_are_priced_by_cublas_models():
    """The profile's dense (cuBLAS) fit and the device's small-M curve price ``impl="library"`` GEMMs only."""
    system = System.load(H200)
    cost = system.cost
    lib = KernelWork("gemm", 64, 2.0 * 128 * 128 * 4096, 1e6, "bf16", "compute",
                     (("m", 1024), ("n", 1024), ("k", 4096)))
    own = KernelWork("gemm", 64, lib.flops_per_wg, lib.bytes_per_wg, "bf16", "compute", lib.shape, impl="simfuse")
    inner = getattr(cost, "inner", cost)
    assert inner.dense_time_s(lib) is not None or inner.curve_time_s(lib) is not None
    assert inner.dense_time_s(own) is None and inner.curve_time_s(own) is None


@pytest.mark.parametrize("op_name", ["gemm_reduce_scatter", "gemm_all_to_all"])
def test_baseline_kernel_library_or_the_same_kernel(op_name):
    system = System.load(H200)
    op = make_op(op_name, {}, 1, 8)
    same = run_op(op, system, 1, knobs=FusedKnobs(), uncertainty="none")  # the default
    lib = run_op(op, system, 1, knobs=FusedKnobs(baseline_kernel="library"), uncertainty="none")
    own = simulate_kernel(op.work("compute"), system.cost).time_s
    assert same.baseline_compute_s == pytest.approx(own, rel=1e-9)
    assert lib.fused_time_s == same.fused_time_s  # only the baseline changes
    # on the H200 cuBLAS's measured model is faster than the bundled Triton GEMM's at these shapes
    assert lib.baseline_compute_s < same.baseline_compute_s


def test_unknown_baseline_kernel_is_refused():
    with pytest.raises(SpecError, match="baseline_kernel"):
        parse_execution({"baseline_kernel": "cublas"})


def test_validate_names_a_non_numeric_shape_value(tmp_path, capsys):
    src = (ROOT / "experiments" / "results" / "h200_kernel_heldout.csv").read_text().splitlines()
    header = src[0].split(",")
    i = header.index("shape")
    row = src[1].split(",")
    row[i] = "dim=abc;rows=5"
    bad = tmp_path / "m.csv"
    bad.write_text("\n".join([src[0], ",".join(row)]) + "\n")
    rc = main(["validate", "--topology", str(H200), "--measurements", str(bad), "--out", str(tmp_path / "v")])
    err = capsys.readouterr().err
    assert rc == 2 and "line 2 shape" in err and "dim='abc' is not a number" in err
    assert not (tmp_path / "v").exists()


def test_an_unwritable_out_is_a_one_line_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["run", "--model", str(ROOT / "models" / "transformer_tp_decode.yaml"), "--topology", str(H200),
               "--nodes", "1", "--set", "uncertainty=none", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert rc == 2 and str(blocker) in err and "Traceback" not in err


def test_decode_model_names_hidden_when_it_does_not_split(tmp_path, capsys):
    import yaml

    d = yaml.safe_load((ROOT / "models" / "transformer_tp_decode.yaml").read_text())
    d["hidden"] = 7
    p = tmp_path / "dec.yaml"
    p.write_text(yaml.safe_dump(d))
    rc = main(["run", "--model", str(p), "--topology", str(H200), "--nodes", "1", "--out", str(tmp_path / "o")])
    assert rc == 2 and "hidden: 7 does not split over 8 ranks" in capsys.readouterr().err


@pytest.mark.parametrize("column,value,message", [("kernel", "foo", "kernel: unknown 'foo'"),
                                                  ("dtype", "fp99", "dtype: unknown 'fp99'"),
                                                  ("world", "0", "world: must be >= 1")])
def test_campaign_cells_are_checked_when_read(tmp_path, column, value, message):
    import csv
    import gzip
    import io

    from simfuse.calibrate.campaign import read_campaign

    raw = gzip.decompress((ROOT / "experiments/results/h200_campaign/heldout5/campaign.csv.gz").read_bytes()).decode()
    rows = list(csv.DictReader(io.StringIO(raw)))[:3]
    rows[1][column] = value
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    p = tmp_path / "c.csv"
    p.write_text(out.getvalue())
    with pytest.raises(SpecError, match=f"line 3: {message}"):
        read_campaign(p)
    cut = tmp_path / "cut.csv"
    lines = raw.splitlines()[:4]  # the unchanged rows
    cut.write_text("\n".join(lines[:-1] + [",".join(lines[-1].split(",")[:10])]) + "\n")  # the last row cut off
    with pytest.raises(SpecError, match="cut-off"):
        read_campaign(cut)


def test_a_setting_given_twice_must_agree_and_either_spelling_counts(tmp_path, capsys):
    base = ["run", "--model", str(ROOT / "models" / "dlrm_synthetic.yaml"), "--topology", str(H200), "--nodes", "1",
            "--set", "uncertainty=none"]
    assert main([*base, "--mode", "fused", "--set", "mode=baseline", "--out", str(tmp_path / "a")]) == 2
    assert "--mode: given as 'fused' and as --set mode='baseline'" in capsys.readouterr().err
    assert main([*base, "--set", "mode=fused", "--out", str(tmp_path / "b")]) == 0  # no longer ignored
    import pandas as pd

    assert list(pd.read_csv(tmp_path / "b" / "summary.csv")["mode"]) == ["fused"]
    assert main([*base, "--global-batch", "4096", "--set", "global_batch=2048", "--out", str(tmp_path / "c")]) == 2


@pytest.mark.parametrize("key", ["global_batch", "batch_per_gpu"])
@pytest.mark.parametrize("value", ["1e30", "nan", "inf", "-4", "0"])
def test_scaled_batch_settings_are_bounded(key, value):
    # 1e30 reached the graph builder and overflowed a machine integer (a traceback)
    with pytest.raises(SpecError, match=key):
        parse_execution({key: value})


# stop 24: the three review findings left open at stop 23
SMALL_DLRM = ROOT / "models" / "dlrm_dcnv2_mlperf.yaml"


def _plan_run(plan, capsys):
    rc = main(["run", "--model", str(SMALL_DLRM), "--topology", str(H200), "--nodes", "1", "--mode", "baseline",
               "--set", "uncertainty=none", "--global-batch", "512", "--plan", str(plan)])
    return rc, capsys.readouterr().err


def test_plan_csv_with_an_unknown_mode_names_it(tmp_path, capsys):
    rows = ["mode,table,sharding,ranks"] + [f"{'basline' if t == 3 else 'baseline'},t{t},table_wise,{t % 8}"
                                            for t in range(26)]
    plan = tmp_path / "plan.csv"
    plan.write_text("\n".join(rows) + "\n")
    rc, err = _plan_run(plan, capsys)
    assert rc == 2 and "mode (line 5)" in err and "'basline'" in err and "Traceback" not in err


def test_plan_csv_with_rows_only_for_the_other_mode_says_so(tmp_path, capsys):
    # review: every row was for 'fused' and the run was baseline: the error said only "no row for table t0"
    rows = ["table,sharding,ranks,mode"] + [f"t{t},table_wise,{t % 8},fused" for t in range(26)]
    plan = tmp_path / "plan.csv"
    plan.write_text("\n".join(rows) + "\n")
    rc, err = _plan_run(plan, capsys)
    assert rc == 2 and "no row for table t0" in err and "26 row(s) were skipped as rows of the other mode" in err
    assert "this run is baseline" in err and "Traceback" not in err


def test_plan_csv_header_with_spaces_is_read(tmp_path, capsys):
    # review: "table, sharding, ranks" (as typed) was refused as "ranks: missing column"
    rows = ["table, sharding, ranks"] + [f"t{t},table_wise,{t % 8}" for t in range(26)]
    plan = tmp_path / "plan.csv"
    plan.write_text("\n".join(rows) + "\n")
    rc, err = _plan_run(plan, capsys)
    assert rc == 0, err


def test_a_cut_off_json_plan_is_reported_as_json(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text('\n  "t0": {"sharding_type": "table_wise", "ranks": [0]}, "t1": {"shard')  # no opening brace
    rc, err = _plan_run(plan, capsys)
    assert rc == 2 and "malformed JSON" in err and "missing column" not in err


@pytest.mark.parametrize("size", ["1.5", "0.3KiB"])
def test_fractional_byte_sizes_are_refused(capsys, size):
    rc = main(["collective", "--op", "all_reduce", "--topology", str(H200), "--nodes", "1", "--size", size])
    assert rc == 2 and "whole number of bytes" in capsys.readouterr().err


def test_fractional_sizes_that_are_whole_bytes_pass():
    from simfuse.units import parse_size_bytes

    assert parse_size_bytes("1.5KB") == 1500 and parse_size_bytes("0.5KiB") == 512


def test_cost_guard_sees_the_scaled_batch(capsys):
    """The guard estimates a DLRM run at its batch after --batch-per-gpu: a runaway batch is refused before
    anything is built, and a big weak-scaling point the engine runs in seconds is not."""
    from simfuse.fused.knobs import parse_execution
    from simfuse.guard import estimate_workload
    from simfuse.spec import load_workload
    from simfuse.workloads.run import scaled_spec

    rc = main(["run", "--model", str(SMALL_DLRM), "--topology", str(H200), "--nodes", "1", "--set", "uncertainty=none",
               "--batch-per-gpu", str(2**40)])
    err = capsys.readouterr().err
    assert rc == 2 and "cost guard" in err and "--force" in err
    spec = load_workload(ROOT / "models" / "dlrm_dcnv2_mlperf_16n.yaml")
    topo = System.load(H200).topology
    ex = parse_execution({"batch_per_gpu": "1056"})
    big = estimate_workload(scaled_spec(spec, 16384, 8, ex), topo, 16384, 8)  # bench_planner's 16,384 nodes
    assert not big.too_expensive and big.workgroups_per_rank > 1000
    runaway = estimate_workload(scaled_spec(spec, 1, 8, parse_execution({"batch_per_gpu": str(2**40)})), topo, 1, 8)
    assert runaway.too_expensive


def test_exported_chakra_graph_is_the_graph_the_run_simulated(tmp_path):
    """--export-chakra wrote the model file's batch, not the --global-batch the run simulated (found in stop 24:
    the replay took 2.65 ms against the run's 0.89 ms); now the replay of the export equals the run."""
    import pandas as pd

    common = ["--topology", str(H200), "--set", "uncertainty=none"]
    assert main(["run", "--model", str(SMALL_DLRM), "--nodes", "2", "--global-batch", "1024", "--mode", "baseline",
                 "--export-chakra", str(tmp_path / "et"), "--out", str(tmp_path / "a"), *common]) == 0
    assert main(["run", "--chakra", str(tmp_path / "et"), "--out", str(tmp_path / "b"), *common]) == 0
    a = pd.read_csv(tmp_path / "a" / "summary.csv")
    b = pd.read_csv(tmp_path / "b" / "summary.csv")
    # the run simulates orbit classes, the replay every rank: they agree to 0.03% here, not bit for bit (a known
    # gap under the proxy's post rule, docs/design.md); the replay equals the run simulated in full
    assert float(b.iteration_time_s.iloc[0]) == pytest.approx(float(a.iteration_time_s.iloc[0]), rel=3e-4)
    c = tmp_path / "c"
    assert main(["run", "--model", str(SMALL_DLRM), "--nodes", "2", "--global-batch", "1024", "--mode", "baseline",
                 "--sim-mode", "full", "--out", str(c), *common]) == 0
    full = pd.read_csv(c / "summary.csv")
    assert float(b.iteration_time_s.iloc[0]) == pytest.approx(float(full.iteration_time_s.iloc[0]), rel=1e-9)


# --- flags that were ignored or misreported (user trial, 2026-12-06) -------------------------------------------


@pytest.mark.parametrize("flags", [["--size", "1MiB", "-b", "1KiB"], ["--size", "1MiB", "-e", "4MiB"], ["--size", "1MiB", "-f", "4"],
                                   ["-e", "4MiB"]])
def test_collective_refuses_conflicting_sizes(flags, capsys):
    rc = main(["collective", "--topology", str(H200), "--nodes", "1", "--op", "all_reduce", *flags])
    assert rc == 2 and "--" in capsys.readouterr().err


def test_chakra_run_refuses_flags_it_would_ignore(tmp_path, capsys):
    et = tmp_path / "et"
    assert main(["run", "--model", str(SMALL_DLRM), "--topology", str(H200), "--nodes", "1", "--mode", "baseline",
                 "--set", "uncertainty=none", "--export-chakra", str(et)]) == 0
    capsys.readouterr()
    for flags, field in ((["--nodes", "2"], "--nodes"), (["--mode", "fused"], "--mode")):
        assert main(["run", "--chakra", str(et), "--topology", str(H200), *flags]) == 2
        assert field in capsys.readouterr().err
    capsys.readouterr()
    assert main(["run", "--chakra", str(et), "--topology", str(H200), "--nodes", "1"]) == 0
    out = capsys.readouterr().out
    # one mode, no baseline to compare with: no speedup column (it printed NaN)
    assert "iteration_time_ms" in out and "speedup" not in out and "NaN" not in out


def test_a_plan_for_a_workload_without_tables_is_refused(tmp_path, capsys):
    plan = tmp_path / "plan.csv"
    plan.write_text("table,sharding,ranks\nt0,table_wise,0\n")
    rc = main(["run", "--model", str(ROOT / "models" / "moe_layer.yaml"), "--topology", str(H200), "--plan",
               str(plan)])
    assert rc == 2 and "plan_file" in capsys.readouterr().err


def test_a_directory_given_as_a_log_is_named_as_one(tmp_path, capsys):
    rc = main(["fit-fabric", str(tmp_path), "--topology", str(H200), "--out", str(tmp_path / "f.yaml")])
    assert rc == 2 and "is a directory" in capsys.readouterr().err


def test_a_closed_stdout_is_not_an_error(monkeypatch, capsys):
    """`simfuse op ... | head -1`: the reader closes the pipe and the next write raises BrokenPipeError; simfuse
    exits quietly with 0 (it printed "simfuse: error: <file>: Broken pipe" and returned 2)."""
    import sys

    class ClosedPipe:
        def write(self, _text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    rc = main(["op", "--op", "gemv_all_reduce", "--topology", str(H200), "--nodes", "1"])
    assert rc == 0
    assert "Broken pipe" not in capsys.readouterr().err


@pytest.mark.parametrize("argv,bad", [
    (["op", "--op", "embedding_all_to_all", "--nodes", "64", "--set", "global_batch=8388608"],
     ["--sim-mode", "--mode symmetric"]),
    (["collective", "--nodes", "4096", "--mode", "full", "--op", "all_to_all", "--size", "1MiB"], ["--sim-mode"]),
])
def test_the_guard_suggests_only_flags_the_command_has(argv, bad, capsys):
    """op and collective have no --sim-mode, and a run that is already symmetric is not made cheaper by
    --mode symmetric (the refusal suggested both)."""
    assert main([*argv, "--topology", str(H200)]) == 2
    err = capsys.readouterr().err
    assert "cost guard" in err and "--force" in err
    assert not any(b in err for b in bad), err


def test_guard_prices_dlrm_flow_solves_and_candidate_runs(root, monkeypatch):
    """A fully simulated DLRM run costs its flow solves (DLRM_SECONDS_PER_EVENT per estimated event at 64 pushing
    GPUs, measured) times its simulations (two plans per mode with a planned placement, each fused one times the
    knob grid where its screen would let the grid run; one a mode otherwise): the guard said '~0 s' for a planned
    8-node run that took minutes.  Above NOTE_SECONDS the run gets a note (here with 8 Monte Carlo draws).  With
    workers, the candidates are shared by them (the first alone unless the run is long)."""
    import dataclasses

    from simfuse.guard import (
        DLRM_PLANNED_SECONDS_PER_RANK_TABLE,
        DLRM_SECONDS_FIXED,
        DLRM_SECONDS_PER_RANK_TABLE,
        NOTE_SECONDS,
        cost_note,
        estimate_workload,
    )
    from simfuse.spec import load_topology, load_workload
    from simfuse.workloads.parallel import MIN_PARALLEL_RUN_S

    topo = load_topology(H200)
    spec = load_workload(ROOT / "models" / "dlrm_dcnv2_tablewise.yaml")
    spec = dataclasses.replace(spec, placement="planned", global_batch=2 * spec.global_batch)
    none = parse_execution({"uncertainty": "none"})
    planned = estimate_workload(spec, topo, 8, 8, execution=none)
    tw = estimate_workload(dataclasses.replace(spec, placement="table_wise"), topo, 8, 8, execution=none)
    assert planned.simulated_ranks == 64
    # --sim-mode classes is priced as the builder runs it: the guard reads the placement (as the builder does),
    # whose fused plan here has an orbit class per GPU, so at 8 nodes it is no cheaper than auto (measured: the
    # same events and time)
    from simfuse.system import System
    from simfuse.workloads.dlrm import simulated_rank_count

    classes = estimate_workload(spec, topo, 8, 8, sim_mode="classes", execution=none)
    counts = [simulated_rank_count(spec, System.from_topology(topo), 8, 8, m, "classes")[0]
              for m in ("baseline", "fused")]
    assert counts == [16, 64] and classes.simulated_ranks == max(counts)
    assert classes.seconds == pytest.approx(planned.seconds)
    # one mode: its two plans; a baseline simulation runs fewer ranks (orbit classes of equal placement columns:
    # two a node) than a fused one (every rank)
    def one_mode(topology, mode, sp=spec, **ex):
        return estimate_workload(sp, topology, 8, 8, execution=parse_execution({"uncertainty": "none", "mode": mode,
                                                                                **ex}))

    one = {mode: one_mode(topo, mode) for mode in ("baseline", "fused")}
    assert one["baseline"].simulated_ranks == 16 and one["fused"].simulated_ranks == 64
    # beside the simulations, each run pays its work per rank and table once (more with a planned placement)
    tables = len(spec.tables)
    run_p = DLRM_SECONDS_FIXED + 64 * tables * (DLRM_SECONDS_PER_RANK_TABLE + DLRM_PLANNED_SECONDS_PER_RANK_TABLE)
    sims = {m: e.extra_seconds - run_p for m, e in one.items()}
    assert planned.extra_seconds - run_p == pytest.approx(sims["baseline"] + sims["fused"])
    # the knob grid: at the file's 5 ns posts the screen would stop each fused plan after its first point; where
    # every put is dear (1 us) both points are priced, each a simulation as long -- where the grid applies at all:
    # at the file's own batch (the fused kernels' waves within MAX_PUSH_WAVES; at twice it the busiest rank's
    # column-equivalent tables make more waves, and the grid is not tuned)
    dear = topo.replace(gpu_initiated=dataclasses.replace(topo.gpu_initiated, put_post_s=1e-6))
    assert one_mode(dear, "fused").extra_seconds == pytest.approx(one_mode(topo, "fused").extra_seconds)
    half = dataclasses.replace(spec, global_batch=spec.global_batch // 2)
    sims_half = one_mode(topo, "fused", half).extra_seconds - run_p
    assert one_mode(dear, "fused", half).extra_seconds - run_p == pytest.approx(2 * sims_half)
    assert one_mode(dear, "fused", half, tune_knobs="off").extra_seconds - run_p == pytest.approx(sims_half)
    tw_run = DLRM_SECONDS_FIXED + 64 * tables * DLRM_SECONDS_PER_RANK_TABLE
    assert tw.extra_seconds - tw_run > 0  # table-wise: one simulation per mode
    # each candidate is priced on its own plan's shape: (simulations, seconds each) in run order (baseline's own
    # plan, the fused mode's; the fused mode's own, the baseline's)
    import simfuse.workloads.dlrm_workload as dw

    seen = []
    real = dw._candidates_wall_s
    monkeypatch.setattr(dw, "_candidates_wall_s", lambda cands, workers: seen.append(list(cands)) or real(cands, workers))
    bound = estimate_workload(spec, topo, 8, 8, execution=parse_execution({"uncertainty": "bound"}))
    (cands,) = seen
    assert sum(c * t for c, t in cands[:2]) == pytest.approx(sims["baseline"])
    assert sum(c * t for c, t in cands[2:]) == pytest.approx(sims["fused"])
    per_sim = {"baseline": cands[0][1], "fused": cands[2][1]}  # the interval's runs keep each mode's own plan
    # three interval runs a mode (the knob grid screened as in the point estimate)
    assert bound.extra_seconds == pytest.approx(planned.extra_seconds + 3 * (per_sim["baseline"] + per_sim["fused"]))
    heavy = estimate_workload(spec, topo, 8, 8, execution=parse_execution({"uncertainty": "mc",
                                                                         "uncertainty_draws": "8"}))
    assert heavy.seconds > NOTE_SECONDS and "cheaper: --sim-mode classes" in cost_note(heavy)
    assert cost_note(estimate_workload(spec, topo, 16, 8)) is None  # 128 ranks: rank classes, seconds
    # two workers: a long run shares every candidate; a short one runs its first alone and shares the rest
    two = estimate_workload(spec, topo, 8, 8, execution=none, workers=2)
    total = sims["baseline"] + sims["fused"]
    first = per_sim["baseline"]
    staged = first + (total - first) / 2
    want = total / 2 if staged >= MIN_PARALLEL_RUN_S else staged
    assert two.extra_seconds - run_p == pytest.approx(want)


def test_chakra_run_refuses_workload_settings_and_a_fused_only_export(tmp_path, capsys):
    """Settings that shape a --model workload (batch, plan, placement, export) do nothing to a Chakra replay:
    refused, not ignored; --export-chakra with --mode fused would export a baseline the run never chose."""
    et = tmp_path / "et"
    common = ["--topology", str(H200), "--set", "uncertainty=none"]
    assert main(["run", "--model", str(SMALL_DLRM), "--nodes", "1", "--mode", "baseline",
                 "--export-chakra", str(et), *common]) == 0
    capsys.readouterr()
    for flags in (["--global-batch", "1024"], ["--set", "placement=row_wise"], ["--export-chakra", str(tmp_path / "x")]):
        assert main(["run", "--chakra", str(et), *common, *flags]) == 2, flags
        assert "Chakra trace runs as recorded" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["run", "--model", str(SMALL_DLRM), "--nodes", "1", "--mode", "fused",
                 "--export-chakra", str(tmp_path / "y"), *common]) == 2
    assert "--mode baseline or both" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_guard_prices_a_ring_on_a_3tier_fabric_by_its_quotient(root):
    """A ring (a schedule over neighbouring nodes) on a fabric whose nodes differ (several leaves) runs the ranks
    of one pod (the quotient mode): the guard counts those 256 ranks and lets the 512-node run go; in full mode
    it counts every rank and refuses it without --force (it ran over 6 minutes and 8 GB); on the rail fabric the
    same ring is one rank."""
    from simfuse.errors import SpecError as _SpecError
    from simfuse.guard import check_cost, estimate_collective_run
    from simfuse.spec import load_topology

    three = load_topology(root / "topologies" / "h200_3tier_pods.yaml")
    rail = load_topology(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    est = estimate_collective_run(three, "reduce_scatter", 512, 8, [64 << 20], "auto")
    assert est.simulated_ranks == 32 * 8 and est.seconds < 2.0
    check_cost(est, False, command="collective")
    full = estimate_collective_run(three, "reduce_scatter", 512, 8, [64 << 20], "full")
    assert full.simulated_ranks == 512 * 8
    with pytest.raises(_SpecError, match="--force"):
        check_cost(full, False, command="collective")
    assert estimate_collective_run(rail, "reduce_scatter", 512, 8, [64 << 20], "auto").simulated_ranks == 1


def test_tuner_refuses_a_3tier_fabric_without_a_symmetric_form_with_what_to_do(root, capsys, tmp_path):
    """48 nodes on the shipped 3-tier file fill 1.5 pods: the fabric has no symmetric form, on which the simulating
    tuner (``collectives.tuner: simulate``) ranks its candidates beyond 64 GPUs (ranking them by full simulation
    took ~10 minutes).  The command exits 2 naming --algorithm / --protocol and whole pods, writes nothing; with
    both named it simulates every rank.  NCCL's tuner (the default) ranks by NCCL's model and simulates only its
    choice."""
    import yaml

    shipped = str(root / "topologies" / "h200_3tier_pods.yaml")
    args = ["collective", "--op", "all_reduce", "--topology", shipped, "--nodes", "48", "--size", "1MiB", "--quiet"]
    assert main(args) == 0
    raw = yaml.safe_load(open(shipped))
    raw["collectives"]["tuner"] = "simulate"
    raw["calibration"] = str((root / "topologies" / raw["calibration"]).resolve())
    topo = tmp_path / "sim_tuner.yaml"
    topo.write_text(yaml.safe_dump(raw))
    capsys.readouterr()
    args = ["collective", "--op", "all_reduce", "--topology", str(topo), "--nodes", "48", "--size", "1MiB",
            "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--algorithm" in err and "--protocol" in err and "whole leaves and pods" in err
    assert main([*args, "--algorithm", "tree", "--protocol", "LL128"]) == 0
    assert "full" in capsys.readouterr().out
    # a workload there: the fabric's own refusal says which node counts have the symmetric form
    assert main(["run", "--model", str(root / "models" / "llm_tp_dp.yaml"), "--topology", shipped, "--nodes", "33",
                 "--set", "uncertainty=none", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "multiple of 4 nodes" in err and "multiple of 32" in err


# ------------------------------------------------------------------------------ review pass: bad-input sweep
DLRM = ROOT / "models" / "dlrm_synthetic.yaml"


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("sets,message", [(["seed=1", "seed=2"], "--set 'seed': given twice"),
                                          (["=3"], "--set: empty key in '=3'")])
def test_run_and_sweep_refuse_a_repeated_or_empty_set_key(tmp_path, capsys, command, sets, message):
    # run and sweep kept the last of two --set seed=... silently (op refused it); --set =3 named no field
    argv = [command, "--model", str(DLRM), "--topology", str(H200), "--nodes", "1", "--out", str(tmp_path / "o")]
    rc = main(argv + [x for s in sets for x in ("--set", s)])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [["collective", "--op", "all_reduce", "--size", "1MiB", "--out", "{d}/t.csv"],
                                  ["run", "--model", str(DLRM), "--out", "{d}/o"],
                                  ["sweep", "--model", str(DLRM), "--nodes", "1", "--out", "{d}/o"]])
def test_an_out_no_file_can_be_written_under_is_refused_before_running(tmp_path, capsys, monkeypatch, argv):
    # --out under a read-only file system (or /proc) failed after the simulation, naming a temporary file
    import errno
    import tempfile

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    rc = main([a.format(d=tmp_path) for a in argv] + ["--topology", str(H200)])
    err = capsys.readouterr().err
    assert rc == 2 and "--out: cannot write under" in err and "Read-only file system" in err
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_scheduler_that_cannot_be_reached_is_a_one_line_error(tmp_path, capsys):
    pytest.importorskip("distributed")
    rc = main(["sweep", "--model", str(DLRM), "--topology", str(H200), "--nodes", "1", "--out", str(tmp_path / "o"),
               "--scheduler", "bogus", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--scheduler: cannot reach a Dask scheduler at 'bogus'" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("model,key,value,message", [
    ("transformer_tp_decode.yaml", "ffn", 28671, "ffn: 28671 does not split over 8 ranks"),
    ("moe_layer.yaml", "top_k", 33, "top_k: 33 exceeds the 32 experts of 8 GPUs"),
    ("moe_layer.yaml", "tokens_per_gpu", 4095, "tokens_per_gpu: tokens_per_gpu*top_k (32760) must divide evenly"),
])
def test_decode_and_moe_models_name_their_own_fields(tmp_path, capsys, model, key, value, message):
    # the errors named the operator's parameters (k, tokens), and top_k above the expert count was simulated
    import yaml

    d = yaml.safe_load((ROOT / "models" / model).read_text())
    d[key] = value
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(d))
    rc = main(["run", "--model", str(p), "--topology", str(H200), "--nodes", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{p}: {message}" in err


@pytest.mark.parametrize("argv, message", [
    (["--op", "gemm_all_to_all", "--set", "top_k=100"], "top_k: 100 exceeds the 32 experts"),
    (["--op", "embedding_all_to_all", "--set", "comm_dtype=foo"], "comm_dtype: unknown dtype 'foo'"),
])
def test_op_parameters_are_named_as_given(capsys, argv, message):
    # top_k above the expert count was simulated; a bad comm_dtype was reported as `dtype`
    rc = main(["op", "--topology", str(ROOT / "topologies/h100_nvl8_ib_ndr.yaml"), *argv])
    assert rc == 2 and message in capsys.readouterr().err


def test_a_missing_calibration_profile_names_the_topology_field(tmp_path, capsys):
    # a copied topology whose relative `calibration:` no longer resolves: the error named only the missing file
    topo = tmp_path / "t.yaml"
    topo.write_text((ROOT / "topologies/h200_nvl8_ib_ndr.yaml").read_text())
    rc = main(["run", "--model", str(ROOT / "models/dlrm_synthetic.yaml"), "--topology", str(topo)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{topo}: calibration: profile" in err and "not found" in err
    assert "Traceback" not in err


def _uneven_log(tmp_path):
    """An all-reduce log whose two hosts ran 8 and 4 ranks (our own fixture, nccl-tests' format)."""
    lines = ["# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20", "#"]
    for r in range(12):
        host, dev = ("node-00", r) if r < 8 else ("node-01", r - 8)
        lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r} on {host} device  {dev} [0x18] NVIDIA H100 80GB HBM3")
    lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
              "  (GB/s)"]
    for size, t in ((1048576, 78.1), (2097152, 126.1), (4194304, 222.2)):
        alg = size / t / 1e3
        lines.append(f"{size:12d} {size // 4:12d}     float     sum      -1 {t:8.1f} {alg:7.2f} {alg * 22 / 12:7.2f}"
                     f"      0 {t:8.1f} {alg:7.2f} {alg * 22 / 12:7.2f}      0")
    p = tmp_path / "all_reduce_perf_uneven.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_a_log_whose_hosts_ran_unequal_ranks_is_refused(tmp_path, capsys):
    log = _uneven_log(tmp_path)
    out = tmp_path / "fit.yaml"
    rc = main(["fit-fabric", str(log), "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"),
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "unequal numbers of ranks (node-00: 8, node-01: 4)" in err and not out.exists()


def test_more_gpus_per_node_than_the_topologys_nodes_hold_is_refused(capsys):
    rc = main(["collective", "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"), "--nodes", "2",
               "--gpus-per-node", "16", "--op", "all_reduce", "--size", "1MiB"])
    err = capsys.readouterr().err
    assert rc == 2 and "--gpus-per-node: 16 GPUs per node, but the topology's nodes hold 8" in err
    # part of a node is fine
    assert main(["collective", "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"), "--nodes", "2",
                 "--gpus-per-node", "4", "--op", "all_reduce", "--size", "1MiB", "--quiet"]) == 0


def test_a_fabric_fit_of_more_gpus_per_node_than_the_topology_holds_is_refused():
    from simfuse.calibrate.fabric_fit import fit_fabric
    from simfuse.calibrate.nccl_tests import NcclRow, NcclTestLog
    from simfuse.spec import load_topology

    rows = [NcclRow(2 ** k, 2 ** k // 4, "float", "sum", 1e-5 * 2 ** (k - 20), None, None, None, i)
            for i, k in enumerate(range(20, 31))]
    log = NcclTestLog("<trace>", "all_reduce", 16, ["h0"], [], rows, nodes=1)
    with pytest.raises(SpecError, match="16 GPUs per node, but the topology's nodes hold 8"):
        fit_fabric(log, load_topology(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"))


def test_collective_json_with_out_keeps_stdout_json(tmp_path, capsys):
    out = tmp_path / "o.csv"
    rc = main(["collective", "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"), "--nodes", "2",
               "--op", "all_to_all", "--size", "1MiB", "--format", "json", "--out", str(out), "--quiet"])
    cap = capsys.readouterr()
    import json

    row = json.loads(cap.out)
    assert rc == 0 and out.exists() and row["time_s"] > 0 and "wrote" in cap.err


def test_fit_fabric_residual_over_no_large_size_is_null_not_nan(tmp_path, capsys):
    import json

    lines = ["# nThread 1 nGpus 1 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20", "#"]
    for r in range(16):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r} on node-{r // 8} device  {r % 8} [0x18] NVIDIA H100")
    lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
              "  (GB/s)"]
    for k in range(10, 21):
        size, t = 2 ** k, 20.0 + 2 ** k / 2e4
        alg = size / t / 1e3
        lines.append(f"{size:12d} {size // 4:12d}     float     sum      -1 {t:8.2f} {alg:7.2f} {alg * 30 / 16:7.2f}"
                     f"      0 {t:8.2f} {alg:7.2f} {alg * 30 / 16:7.2f}      0")
    log = tmp_path / "all_reduce_perf_small.log"
    log.write_text("\n".join(lines) + "\n")
    yml = tmp_path / "fit.yaml"
    rc = main(["fit-fabric", str(log), "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"), "--force",
               "--format", "json", "--out", str(yml)])
    out = capsys.readouterr().out

    def no_constants(c):
        raise ValueError(c)

    res = json.loads(out, parse_constant=no_constants)  # NaN would raise here
    assert rc == 0 and res["max_rel_residual_large"] is None and res["max_rel_residual"] >= 0
    assert "n/a (>= 64 MiB)" in yml.read_text() and "nan" not in yml.read_text().lower()


def test_run_and_sweep_remove_an_earlier_runs_uncertainty_files(tmp_path, capsys):
    """A run (or sweep) into a folder an uncertainty run wrote leaves no sensitivity.csv, uncertainty_draws.csv
    or tornado.png of the earlier run beside its own files (audit: they survived, even for another model)."""
    out = tmp_path / "r"
    decode = str(ROOT / "models" / "transformer_tp_decode.yaml")
    first = ["run", "--model", decode, "--topology", str(H200), "--nodes", "1", "--set", "uncertainty=inputs",
             "--set", "uncertainty_draws=4", "--out", str(out), "--quiet"]
    assert main(first) == 0
    assert {"sensitivity.csv", "uncertainty_draws.csv", "tornado.png"} <= {p.name for p in out.iterdir()}
    assert main(["run", "--model", decode, "--topology", str(H200), "--nodes", "1", "--out", str(out), "--quiet"]) == 0
    left = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    assert left == {"summary.csv", "breakdown.csv"}, left
    sw = tmp_path / "s"
    base = ["sweep", "--model", decode, "--topology", str(H200), "--nodes", "1,2", "--out", str(sw), "--quiet"]
    assert main(base + ["--set", "uncertainty=inputs", "--set", "uncertainty_draws=4"]) == 0
    assert (sw / "sensitivity.csv").exists() and (sw / "tornado.png").exists()
    assert main(base) == 0
    assert not (sw / "sensitivity.csv").exists() and not (sw / "tornado.png").exists()
    assert (sw / "results.csv").exists()
    capsys.readouterr()


def test_breakdown_and_trace_say_they_show_one_of_the_repeated_steps(tmp_path, capsys):
    import json

    import pandas as pd

    out = tmp_path / "dec"
    assert main(["run", "--model", str(ROOT / "models" / "transformer_tp_decode.yaml"), "--topology", str(H200),
                 "--nodes", "1", "--out", str(out), "--trace", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text  # the baseline row's speedup reads "-"
    summ = pd.read_csv(out / "summary.csv")
    br = pd.read_csv(out / "breakdown.csv")
    rep = int(br["repeat"].iloc[0])
    assert rep > 1 and (br["repeat"] == rep).all()
    base = br[br["mode"] == "baseline"]
    it = float(summ.loc[summ["mode"] == "baseline", "iteration_time_s"].iloc[0])
    # one step's phases, times the steps, fill the iteration (phases of a step may overlap on two streams)
    assert base["time_s"].sum() * rep >= 0.9 * it and (base["first_start_s"] < it / rep).all()
    names = {e["args"]["name"] for e in json.loads((out / "trace.json").read_text())["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert any(f"(one of {rep} identical steps)" in n for n in names)


@pytest.mark.parametrize("mode", ["fused", "baseline"])
def test_a_one_mode_sweep_prints_its_rows_without_a_speedup(mode, tmp_path, capsys):
    assert main(["sweep", "--model", str(ROOT / "models" / "transformer_tp_decode.yaml"), "--topology", str(H200),
                 "--nodes", "1,2", "--mode", mode, "--out", str(tmp_path / "s"), "--quiet"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[0] == "mode" and [ln.split()[0] for ln in lines[1:3]] == [mode, mode]
    assert "None" not in out and "NaN" not in out and "speedup" not in out and "iteration_time_s" in out


@pytest.mark.parametrize("model, setting, field", [
    ("transformer_tp_decode", "twrw_push=bulk", "twrw_push: bulk: applies to dlrm workloads"),
    ("moe_layer", "tune_knobs=off", "tune_knobs: off: applies to dlrm workloads"),
    ("moe_layer", "baseline_kernel=library", "baseline_kernel: library: applies to `simfuse op`"),
    ("dlrm_dcnv2_mlperf", "baseline_kernel=library", "baseline_kernel: library: applies to `simfuse op`"),
    ("dlrm_dcnv2_mlperf", "sensitivity=rank", "sensitivity: rank: applies with uncertainty=inputs"),
    ("transformer_tp_decode", "uncertainty_draws=8", "uncertainty_draws: 8: applies with uncertainty=mc or inputs"),
])
def test_settings_a_run_would_ignore_are_refused(model, setting, field, capsys):
    rc = main(["run", "--model", str(ROOT / "models" / f"{model}.yaml"), "--topology", str(H200), "--nodes", "1",
               "--set", setting])
    assert rc == 2 and field in capsys.readouterr().err


def test_op_refuses_the_dlrm_only_knob_and_takes_the_library_baseline(capsys):
    topo = str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")
    assert main(["op", "--op", "gemv_all_reduce", "--topology", topo, "--set", "twrw_push=bulk"]) == 2
    assert "twrw_push: bulk: applies to dlrm workloads" in capsys.readouterr().err
    assert main(["op", "--op", "gemm_all_to_all", "--topology", topo, "--nodes", "2", "--set",
                 "baseline_kernel=library", "--quiet"]) == 0


def test_a_smaller_chakra_export_replaces_the_earlier_ranks(tmp_path, capsys):
    et = tmp_path / "et"
    model = str(ROOT / "models" / "transformer_tp_decode.yaml")
    for nodes in ("2", "1"):
        assert main(["run", "--model", model, "--topology", str(H200), "--nodes", nodes, "--mode", "baseline",
                     "--set", "uncertainty=none", "--export-chakra", str(et)]) == 0
    assert len(list(et.glob("transformer_tp_decode.*.et"))) == 8  # ranks 8-15 of the 2-node export are gone
    assert main(["run", "--chakra", str(et), "--topology", str(H200), "--nodes", "1"]) == 0
    capsys.readouterr()


def test_a_dtype_without_a_peak_names_the_topology_field(capsys):
    assert main(["op", "--op", "gemv_all_reduce", "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"),
                 "--set", "dtype=int8"]) == 2
    err = capsys.readouterr().err
    assert "device.peak_tflops.int8: no peak FLOP/s given for dtype 'int8'" in err and "bf16" in err
