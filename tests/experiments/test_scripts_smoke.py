"""Every experiment script runs on a tiny configuration."""

import dataclasses
import json
import subprocess
import sys

import pandas as pd
import pytest


def _run(root, *args):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_bench_engine_tiny(root, tmp_path):
    out = tmp_path / "bench.csv"
    _run(root, "experiments/bench/bench_engine.py", "--nodes", "1,2", "--ops", "all_to_all:direct", "--out", str(out))
    df = pd.read_csv(out)
    assert set(df["nodes"]) == {1, 2} and (df["events"] > 0).all()


def test_bench_dlrm_tiny(root):
    line = _run(root, "experiments/bench/bench_dlrm.py", "--one", "1", "--model", "models/dlrm_synthetic.yaml")
    row = json.loads(line.strip().splitlines()[-1])
    assert row["nodes"] == 1 and row["wall_s"] > 0 and row["speedup"] > 0


def test_dlrm_scaling_tiny(root, tmp_path):
    _run(root, "experiments/scaling/dlrm_scaling.py", "--tiny", "--out", str(tmp_path), "--workers", "1")
    df = pd.read_csv(tmp_path / "dlrm_scaling.csv")
    assert set(df["nodes"]) == {1, 2} and set(df["mode"]) == {"baseline", "fused"}
    assert (tmp_path / "speedup_vs_nodes.png").stat().st_size > 0


def test_calibration_effect_tiny(root, tmp_path):
    roof_topo = tmp_path / "roofline.yaml"
    roof_topo.write_text("".join(line for line in (root / "topologies/h200_nvl8_ib_ndr.yaml").open()
                                 if not line.startswith("calibration:")))
    _run(root, "experiments/fused_ops/fused_ops.py", "--tiny", "--out", str(tmp_path / "cal"))
    _run(root, "experiments/fused_ops/fused_ops.py", "--tiny", "--topology", str(roof_topo), "--out", str(tmp_path / "roof"))
    _run(root, "experiments/validation/calibration_effect.py", "--roofline", str(tmp_path / "roof"), "--calibrated",
         str(tmp_path / "cal"))
    eff = pd.read_csv(tmp_path / "cal" / "calibration_effect.csv")
    assert {"roofline_avg", "calibrated_avg"} <= set(eff.columns) and len(eff) > 0
    assert (tmp_path / "cal" / "calibration_coverage.csv").exists()


def test_bench_llm_tiny(root, tmp_path):
    import yaml

    model = tmp_path / "tiny_llm.yaml"
    model.write_text(yaml.safe_dump({"name": "tiny", "kind": "llm_tp_dp", "layers": 2, "hidden": 256, "ffn": 512,
                                     "heads": 8, "kv_heads": 4, "vocab": 1000, "seq_len": 128, "micro_batch": 1,
                                     "tp": 4, "sequence_parallel": True}))
    out = tmp_path / "bench_llm.csv"
    _run(root, "experiments/bench/bench_llm.py", "--nodes", "1,2", "--models", str(model), "--out", str(out))
    df = pd.read_csv(out)
    assert set(df["nodes"]) == {1, 2} and set(df["mode"]) == {"baseline", "fused"}
    assert (df["wall_s"] > 0).all() and (df["step_time_s"] > 0).all() and df["machine"].notna().all()


def test_nccl_validation_smoke(root, tmp_path):
    out = tmp_path / "nccl_validation.csv"
    _run(root, "experiments/validation/nccl_validation.py", "--smoke", "--out", str(out))
    df = pd.read_csv(out)
    assert set(df["case"]) == {"nvls_1x8", "default_2x8_290", "alltoall_8x8_1531"}
    assert df["source_url"].str.startswith("https://github.com/").all()
    nvls = df[df["case"] == "nvls_1x8"].iloc[0]
    assert nvls["algorithm"] == "nvls" and nvls["simulated_busbw_gbyte_per_s"] > 450  # above the NVLink wire rate
    # all-to-all over N nodes: busbw at most N / (N - 1) x a GPU's NIC rate (nccl-tests#130; 400 Gb/s x 0.92 here)
    a2a = df[df["case"] == "alltoall_8x8_1531"].iloc[0]
    assert a2a["op"] == "all_to_all" and 0 < a2a["simulated_busbw_gbyte_per_s"] <= 50 * 0.92 * 8 / 7 * 1.001


def test_dlrm_validation_smoke(root, tmp_path):
    _run(root, "experiments/validation/dlrm_validation.py", "--smoke", "--out", str(tmp_path))
    df = pd.read_csv(tmp_path / "validation.csv")
    assert set(df["gpus"]) == {8} and len(df) == 4 and df["smoke"].all()
    v30 = df[df["config"] == "dgxh100_ngc23.04_merlin_hugectr"].iloc[0]  # from the committed derived_steps.csv
    assert v30["global_batch"] == 55296 and v30["runs"] == 10 and abs(v30["derived_step_s"] - 3.81e-3) < 0.02e-3
    assert (df["sim_planned_s"] > 0).all() and (df["sim_table_wise_s"] > 0).all()
    assert (df["sim_hugectr_s"] > 0).all()  # the HugeCTR column: the submission's own plan, per round
    assert df["hugectr_plan"].tolist() == [f"models/plans/hugectr_{r}_1n.csv" for r in ("v3.0", "v3.1", "v4.0")] \
        + ["models/plans/hugectr_v4.0_h200_1n.csv"]
    assert df["source"].str.startswith("github:mlcommons/training_results_v").all()
    assert (df["fixture"] == "experiments/results/dlrm_validation/derived_steps.csv").all()


def test_dlrm_validation_ablation_smoke(root, tmp_path):
    """--ablation sets fields the model files declare uncertain (grad_dtype, the embedding's dtypes) to values
    outside their declared choices: set, not sampled, so the run must accept them."""
    _run(root, "experiments/validation/dlrm_validation.py", "--smoke", "--ablation", "--out", str(tmp_path))
    ab = pd.read_csv(tmp_path / "ablation.csv")
    # every setting added in turn and removed in turn, per row (the script checks that all of them together give
    # the HugeCTR model file's step)
    assert set(ab["kind"]) == {"added", "removed"} and (ab["step_s"] > 0).all()
    assert ab.groupby("config").size().nunique() == 1


def test_trace_campaign_smoke_grids(root, tmp_path):
    """The v2 (axes v1 held fixed) and held-out grids run under the interpreter and write one row per shape with
    the table size and allocation labels."""
    import gzip
    import io
    import os

    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs the Triton interpreter (TRITON_INTERPRET=1) on a CPU machine")
    sys.path.insert(0, str(root / "experiments" / "gpu_campaigns"))
    try:
        import trace_campaign as tc
    finally:
        sys.path.pop(0)
    for grid, fn, extra in (("v2", tc.grid_points_v2, ()), ("heldout", tc.grid_points_heldout, ("--repeats", "2")),
                            ("v4", tc.grid_points_v4, ()), ("v5", tc.grid_points_v5, ())):
        out = tmp_path / grid
        _run(root, "experiments/gpu_campaigns/trace_campaign.py", "--smoke", "--grid", grid, "--out", str(out), *extra)
        df = pd.read_csv(io.BytesIO(gzip.decompress((out / "campaign.csv.gz").read_bytes())))
        reps = 2 if extra else 1
        assert len(df) == reps * len(fn(True))
        if grid == "heldout":  # every shape once per pass, on fresh allocations labelled by the pass
            assert sorted(df["alloc"].value_counts().tolist()) == [len(fn(True))] * 2
            key = ["kernel", "dtype", "dim", "pooling", "bags", "m", "n", "k"]
            assert (df.groupby(key).size() == 2).all()
        if grid == "v4":  # fused launches on 8 emulated ranks, fp16 compute
            assert 8 in set(df[df["variant"] == "fused"]["world"]) and "fp16" in set(df["dtype"])
        assert {"table_rows", "alloc"} <= set(df.columns)
        assert (df["median_s"] > 0).all()
        emb = df[df["kernel"] == "embedding_all_to_all"]
        assert (emb["table_rows"] > 0).all()
        if grid == "v2":
            assert sorted(emb["alloc"].unique().tolist())[:2] == [0, 1]
            assert set(emb["bags_per_wg"]) >= {2, 8}
    # a shard K/N measures every N-th shape of the shuffled grid from the K-th
    out = tmp_path / "shard"
    _run(root, "experiments/gpu_campaigns/trace_campaign.py", "--smoke", "--grid", "v4", "--shard", "1/2", "--only", "gemv,gemm",
         "--out", str(out))
    df = pd.read_csv(io.BytesIO(gzip.decompress((out / "campaign.csv.gz").read_bytes())))
    assert len(df) == 1
    # the held-out draw is reproducible and off the v1 grid
    assert tc.grid_points_heldout(False) == tc.grid_points_heldout(False)
    v1 = {p[:6] for p in tc.grid_points(False)}
    assert not any(p[:-1] in v1 for p in tc.grid_points_heldout(False))
    # --heldout-scale 1 is the earlier draws (heldout4 = seed 2028: 93 shapes); 3 draws three times the shapes per
    # family from its own seed (heldout5 = seed 2029), still off the v1 grid
    assert tc.grid_points_heldout(False, 2028, 1) == tc.grid_points_heldout(False, 2028) and \
        len(tc.grid_points_heldout(False, 2028)) == 93
    h5 = tc.grid_points_heldout(False, 2029, 3)
    assert len(h5) > 2 * 93 and not any(p[:-1] in v1 for p in h5)


def _alone_s(system, w) -> float:
    """A kernel priced alone, from the engine's wave times (launch latency + full waves + the last, partial one):
    an independent path to the scripts' ``simulate_kernel``."""
    from simfuse.engine.compute import _wave_times, effective_slots

    slots = effective_slots(system.cost, w)
    full_t, rem_t = _wave_times(system.cost, w, slots)
    waves = -(-w.num_workgroups // slots)
    return system.cost.launch_latency_s(w) + (waves - (1 if rem_t else 0)) * full_t + rem_t


def test_dlrm_dense_step_predict(root, tmp_path):
    """The prediction half of experiments/gpu_campaigns/dlrm_dense_step.py on the committed H200 measurement (the measuring
    half needs a GPU): one simulated time per measured GEMM, every GEMM shape the DLRM builder emits, and the
    GEMM sum equal to the sum of the builder's forward, dgrad and wgrad kernels priced alone, each at the
    in-graph launch latency (the measured step is a CUDA graph)."""
    import importlib.util

    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.dense import gemm_work
    from simfuse.workloads.dlrm_kernels import _dense_layers, dense_elementwise

    out = tmp_path / "pred.csv"
    csv_in = "experiments/results/dlrm_dense_step/dense_step_NVIDIA_H200.csv"
    _run(root, "experiments/gpu_campaigns/dlrm_dense_step.py", "predict", csv_in, "--out", str(out))
    df = pd.read_csv(out)
    gm = df[df.what == "gemm"]
    assert gm.sim_time_s.notna().all() and (gm.sim_time_s > 0).all()
    spec_ = importlib.util.spec_from_file_location("dds", root / "experiments/gpu_campaigns/dlrm_dense_step.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    model = load_workload(root / "models/dlrm_dcnv2_mlperf.yaml")
    system = System.load(root / "topologies/h200_nvl8_ib_ndr.yaml").with_launch("graph")
    eager = System.load(root / "topologies/h200_nvl8_ib_ndr.yaml")
    summary = pd.read_csv(tmp_path / "pred_summary.csv")
    for b in mod.BATCHES:
        bo, it, to = _dense_layers(model, b)
        assert mod._layers(b) == bo + it + to
        total = 0.0
        for lbl, m, n, k in bo + it + to:
            ws = [gemm_work(lbl, m, n, k, "bf16"), gemm_work(lbl, m, k, n, "bf16"), gemm_work(lbl, k, n, m, "bf16")]
            if lbl == bo[0][0]:  # the first bottom layer has no dgrad (its input is the data)
                ws.pop(1)
            total += sum(_alone_s(system, w) for w in ws)
        assert summary.set_index("batch").loc[b, "sim_gemms_s"] == pytest.approx(total, rel=1e-9)
        eager_total = sum(_alone_s(eager, gemm_work(lbl, m, n, k, "bf16")) for lbl, m, n, k in bo + it + to)
        assert eager_total > sum(_alone_s(system, gemm_work(lbl, m, n, k, "bf16")) for lbl, m, n, k in bo + it + to)
        # the non-GEMM columns: the builder's element-wise kernels per dense_fusion, each priced alone
        for fusion in ("legacy", "epilogue"):
            ks = dense_elementwise(dataclasses.replace(model, dense_fusion=fusion), b).all()
            ew_total = sum(_alone_s(system, w) for _lbl, w in ks)
            assert summary.set_index("batch").loc[b, f"sim_nongemm_{fusion}_s"] == pytest.approx(ew_total, rel=1e-9)
    classes = pd.read_csv(tmp_path / "pred_classes.csv")
    assert set(classes.batch) == set(mod.BATCHES) and (classes.measured_s >= 0).all()
    by_b = classes.groupby("batch").sim_unfused_s.sum()
    for b in mod.BATCHES:  # the op-class table splits the unfused column
        assert by_b[b] == pytest.approx(summary.set_index("batch").loc[b, "sim_nongemm_unfused_s"], rel=1e-9)


@pytest.mark.parametrize("csv_name", ["dense_ew_kernels_NVIDIA_H200.csv", "dense_ew_concat_NVIDIA_H200.csv"])
def test_dense_ew_kernels_predict(root, tmp_path, csv_name):
    """The prediction half of experiments/gpu_campaigns/dense_ew_kernels.py on the committed H200 measurement: every measured
    kernel is one the builder emits under ``dense_fusion: epilogue``, with the bytes the builder counts, and the
    simulated time is that kernel priced alone without its launch latency."""
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.dlrm_kernels import dense_elementwise

    out = tmp_path / "ew.csv"
    _run(root, "experiments/gpu_campaigns/dense_ew_kernels.py", "predict",
         f"experiments/results/dlrm_dense_step/{csv_name}", "--out", str(out))
    df = pd.read_csv(out)
    spec = load_workload(root / "models/dlrm_dcnv2_mlperf.yaml")
    system = System.load(root / "topologies/h200_nvl8_ib_ndr.yaml")
    assert len(df) and df.sim_time_s.notna().all()
    for r in df.itertuples():
        w = dict(dense_elementwise(spec, int(r.batch)).all())[r.label]
        assert r.bytes == pytest.approx(w.bytes_per_wg * w.num_workgroups)
        assert r.sim_time_s == pytest.approx(_alone_s(system, w) - system.cost.launch_latency_s(w), rel=1e-9)


def test_async_wgrad_predict(root, tmp_path):
    """The prediction half of experiments/gpu_campaigns/async_wgrad.py on the committed H200 measurement: the one-stream sum
    equals the builder's dgrad and wgrad GEMMs priced alone; two streams are shorter than one and no shorter than
    the one-stream sum less every GEMM's launch latency (the SMs are time-shared); the script's GPU-side copy of
    the layer shapes equals the builder's."""
    import importlib.util
    import sys as _sys

    from simfuse.system import System
    from simfuse.workloads.dense import gemm_work

    out = tmp_path / "aw.csv"
    _run(root, "experiments/gpu_campaigns/async_wgrad.py", "predict", "experiments/results/async_wgrad/async_wgrad_NVIDIA_H200.csv",
         "--out", str(out))
    df = pd.read_csv(out)
    assert list(df.batch) == [6912, 2112, 1056]
    _sys.path.insert(0, str(root / "experiments" / "gpu_campaigns"))
    spec_ = importlib.util.spec_from_file_location("aw", root / "experiments/gpu_campaigns/async_wgrad.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    system = System.load(root / "topologies/h200_nvl8_ib_ndr.yaml")
    for r in df.itertuples():
        layers = mod.backward_gemms(int(r.batch), str(root / "models/dlrm_dcnv2_mlperf.yaml"))
        assert layers == mod.backward_gemms(int(r.batch))
        works = [gemm_work("d", m, k, n, "bf16") for _l, m, n, k, has in layers if has] + \
            [gemm_work("w", n, k, m, "bf16") for _l, m, n, k, _h in layers]
        assert r.sim_seq_s == pytest.approx(sum(_alone_s(system, w) for w in works), rel=1e-9)
        lat = sum(system.cost.launch_latency_s(w) for w in works)
        assert r.sim_seq_s - lat - 1e-12 <= r.sim_async_s < r.sim_seq_s
        assert 0 < r.async_saving < 1 and r.async_measured_s < r.seq_measured_s


def test_embedding_backward_kernel_and_predict(root, tmp_path):
    """experiments/gpu_campaigns/embedding_backward.py: its fused segment-reduce + Adagrad kernels (one id per program, and the
    blocked one at two block sizes) equal the PyTorch reference under the Triton interpreter, and its predict half
    prices every case of a CSV with the builder's sparse backward (the CSV's times are synthetic: sort 1 ms,
    update 1 ms, a blocked update 0.5 ms, CUB's sort + encode beside it 0.25 + 0.05 ms; the ratios then read
    sim / those)."""
    import importlib.util
    import os
    import sys as _sys

    _sys.path.insert(0, str(root / "experiments" / "gpu_campaigns"))
    spec_ = importlib.util.spec_from_file_location("eb", root / "experiments/gpu_campaigns/embedding_backward.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    if os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("torch") is not None:
        import torch

        assert mod._check(torch, mod._kernel(), "cpu")
        bk = mod._blocked_kernel()
        assert mod._check(torch, bk, "cpu", block=8) and mod._check(torch, bk, "cpu", block=32)
    times = {"sort": 1e-3, "update": 1e-3, "update_b16_w4": 5e-4}
    rows = [{"gpu": "synthetic", "bags": B, "lookups": L, "rows": R, "dim": 128, "what": w, "time_s": t,
             "reps": 20} for B, L, R in mod.CASES for w, t in times.items()]
    src = tmp_path / "embedding_backward_synthetic.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    out = tmp_path / "vs.csv"
    _run(root, "experiments/gpu_campaigns/embedding_backward.py", "predict", str(src), "--out", str(out))
    df = pd.read_csv(out)
    assert len(df) == len(set(mod.CASES)) and (df.sim_s > 0).all()
    assert set(df.best_variant) == {"update_b16_w4"} and set(df.index_source) == {"torch.sort"}
    assert list(df.measured_s) == pytest.approx([1.5e-3] * len(df))
    assert list(df.sim_update_over_best_update) == pytest.approx(list(df.sim_update_s / 5e-4))
    assert list(df.sim_s) == pytest.approx(list(df.sim_index_s + df.sim_update_s))
    # CUB's sort beside the CSV replaces torch.sort as the measured index calculation
    cub = [{"gpu": "synthetic", "bags": B, "lookups": L, "rows": R, "dim": 128, "what": w, "time_s": t,
            "reps": 20} for B, L, R in mod.CASES for w, t in (("cub_sort", 2.5e-4), ("cub_sort32", 3e-4),
                                                              ("cub_rle", 5e-5))]
    pd.DataFrame(cub).to_csv(tmp_path / "embedding_sort_synthetic.csv", index=False)
    _run(root, "experiments/gpu_campaigns/embedding_backward.py", "predict", str(src), "--out", str(out))
    df = pd.read_csv(out)
    assert set(df.index_source) == {"cub_sort+cub_rle"}
    assert list(df.measured_s) == pytest.approx([8e-4] * len(df))
    # the simulated kernels grow with the lookups they update
    df["lookups_total"] = df.bags * df.lookups
    big = df[df.rows >= 1_000_000].sort_values(["lookups_total", "rows"])
    assert big.sim_update_s.is_monotonic_increasing and big.sim_index_s.is_monotonic_increasing


def test_launch_latency_summary(root, tmp_path):
    """experiments/gpu_campaigns/launch_latency.py: the summary half on a synthetic table (the GPU half needs CUDA). Each
    estimate (queued -> eager, graph) is the median of the trivial one-block kernels' rows of that mode; the
    single-launch and bandwidth rows never enter it. A malformed table is refused with the file and the field
    named, exit 2."""
    import importlib.util

    spec_ = importlib.util.spec_from_file_location("ll", root / "experiments/gpu_campaigns/launch_latency.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    rows = []
    for kernel, mode, t_us in (("torch_add1", "graph", 1.0), ("torch_add1", "queued", 2.0),
                               ("triton_store_1", "graph", 3.0), ("triton_store_1", "queued", 4.0),
                               ("torch_add1", "single", 50.0), ("torch_add_16mb", "graph", 20.0),
                               ("triton_store_1056", "graph", 30.0)):
        rows.append({f: "" for f in mod.FIELDS} | {"gpu": "synthetic", "kernel": kernel, "mode": mode,
                                                   "per_kernel_median_s": t_us * 1e-6})
    src = tmp_path / "ll.csv"
    pd.DataFrame(rows, columns=mod.FIELDS).to_csv(src, index=False)
    assert mod.launch_latency_estimate_s(mod.read_table(src), "graph") == pytest.approx(2e-6)
    assert mod.launch_latency_estimate_s(mod.read_table(src), "queued") == pytest.approx(3e-6)
    out = _run(root, "experiments/gpu_campaigns/launch_latency.py", "summary", str(src), str(src))
    assert "kernel_launch_latency_us (queued" in out and "3.000 us" in out
    assert "graph_launch_latency_us (graph" in out and "2.000 us" in out
    bad = tmp_path / "bad.csv"
    bad.write_text(src.read_text().replace("1e-06", "abc", 1))
    r = subprocess.run([sys.executable, "experiments/gpu_campaigns/launch_latency.py", "summary", str(bad)],
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 2 and "bad.csv" in r.stderr and "per_kernel_median_s" in r.stderr
    only_bw = tmp_path / "bw.csv"
    pd.DataFrame([rows[5]], columns=mod.FIELDS).to_csv(only_bw, index=False)
    r = subprocess.run([sys.executable, "experiments/gpu_campaigns/launch_latency.py", "summary", str(only_bw)],
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 2 and "trivial" in r.stderr


def test_bench_resolution_tiny(root, tmp_path):
    """Both runs of every point (exact and on the grid) are written, with their difference."""
    out = tmp_path / "bench_resolution.csv"
    _run(root, "experiments/bench/bench_resolution.py", "--nodes", "1,2", "--models", "models/dlrm_synthetic.yaml",
         "--workers", "1", "--out", str(out))
    df = pd.read_csv(out)
    assert set(df["nodes"]) == {1, 2} and set(df["mode"]) == {"baseline", "fused"}
    assert (df["exact_iteration_s"] > 0).all() and (df["grid_iteration_s"] > 0).all()
    assert df["rel_diff"].to_numpy() == pytest.approx((df["grid_iteration_s"] / df["exact_iteration_s"] - 1).to_numpy(),
                                                      abs=1e-15)


def test_knob_screen_tiny(root, tmp_path):
    """Both knob points of every point, the gain between them and the screen's verdict on the first's share."""
    from simfuse.workloads.dlrm_candidates import KNOB_SCREEN_POST_SHARE

    out = tmp_path / "knob_screen.csv"
    _run(root, "experiments/bench/knob_screen.py", "--models", "dlrm_dcnv2_mlperf", "--nodes", "2",
         "--post-us", "topology,0.1", "--workers", "1", "--out", str(out))
    df = pd.read_csv(out)
    assert list(df["put_post_us"]) == [0.005, 0.1]  # the topology's own value, then the one asked for
    assert df["gain_rel"].to_numpy() == pytest.approx(
        (df["slice1_iteration_s"] / df["slice8_iteration_s"] - 1).to_numpy(), abs=1e-15)
    assert list(df["screen_skips"]) == list(df["put_post_share"] < KNOB_SCREEN_POST_SHARE)
    # posting 20x dearer: the queues are busier, and batching puts pays
    assert df["put_post_share"].iloc[1] > df["put_post_share"].iloc[0] and df["gain_rel"].iloc[1] > 0


def test_fit_guard_dlrm_tiny(root, tmp_path):
    """The guard's DLRM fit on three rows of its own CSV: a fully simulated point and two rank-class points; it
    recovers a per-event constant that prices the full point within 2x of its wall time (one point, one
    constant: the fit must land on it), and says how many points are within 2x."""
    df = pd.read_csv(root / "experiments/results/bench_guard_fit.csv")
    pick = df[((df["model"] == "dlrm_dcnv2_mlperf_hugectr") & (df["nodes"] == 1))
              | ((df["model"] == "dlrm_synthetic") & df["nodes"].isin([128, 1024]))]
    assert len(pick) == 3
    csv = tmp_path / "rows.csv"
    pick.to_csv(csv, index=False)
    out = _run(root, "experiments/bench/fit_guard_dlrm.py", "--csv", str(csv))
    assert "DLRM_SECONDS_PER_EVENT = " in out and "DLRM_SECONDS_PER_CLASS = " in out
    assert "full simulation: 1 of 1 points within 2x" in out
    assert "rank classes: 2 of 2 points within 2x" in out


def test_bench_targets_tiny(root, tmp_path):
    """Run points of the speed benchmark in fresh processes (one refused: the decode model's hidden size does not
    split over 16,384 GPUs), then their guard columns recomputed: a run that went well keeps its verdict when
    read back beside a refused one (its error column then holds NaN)."""
    out = tmp_path / "targets.csv"
    _run(root, "experiments/bench/bench_targets.py", "--what", "run", "--only", "runs", "--nodes", "1,2048",
         "--models", "models/dlrm_synthetic.yaml,models/transformer_tp_decode.yaml", "--out", str(out))
    df = pd.read_csv(out)
    bad = df[df["error"].notna()]
    assert list(bad["model"]) == ["transformer_tp_decode"] and not bad["meets_target"].any()
    good = df[df["error"].isna()]
    assert (good["wall_s"] > 0).all() and (good["guard_estimate_s"] > 0).all()
    assert good["guard_ratio"].to_numpy() == pytest.approx((good["guard_estimate_s"] / good["wall_s"]).to_numpy())
    expect = (good["wall_s"] <= good["target_s"]) & good["guard_ratio"].between(0.5, 2.0)
    assert list(good["meets_target"]) == list(expect)
    _run(root, "experiments/bench/bench_targets.py", "--reestimate", "--out", str(out))
    again = pd.read_csv(out)
    ok = again[again["error"].isna()]
    assert ok["guard_estimate_s"].to_numpy() == pytest.approx(good["guard_estimate_s"].to_numpy())
    expect = (ok["wall_s"] <= ok["target_s"]) & ok["guard_ratio"].between(0.5, 2.0)
    assert list(ok["meets_target"]) == list(expect) and not again[again["error"].notna()]["meets_target"].any()


def _refused(root, args: list[str], needle: str, out=None):
    """The script exits 2 with one error line naming ``needle``, no traceback, and leaves ``out`` unwritten."""
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 2 and needle in r.stderr, (args, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert out is None or not out.exists(), args


SC, VA, BE = "experiments/scaling/", "experiments/validation/", "experiments/bench/"
BAD_ARGUMENTS = [
    (SC + "dlrm_scaling.py", ["--models", "dlrm_synthetic", "--topologies", "h200_nvl8_ib_ndr", "--nodes", "0"],
     "--nodes", "out"),
    (SC + "dlrm_scaling.py", ["--tiny", "--workers", "0"], "--workers", "out"),
    (SC + "dlrm_scaling.py", ["--tiny", "--set", "bogus"], "--set", "out"),
    (SC + "dlrm_scaling.py", ["--models", "nope", "--nodes", "1"], "nope.yaml", "out"),
    (SC + "dlrm_twrw_fused.py", ["--nodes", "x"], "--nodes", "out.csv"),
    (SC + "dlrm_twrw_fused.py", ["--topologies", "nope"], "nope.yaml", "out.csv"),
    (SC + "hugectr_plans.py", ["--mirror", "/nonexistent_mirror"], "--mirror", "out"),
    (VA + "nccl_validation.py", ["--smoke", "--out", "/proc/simfuse_x"], "--out", None),
    (VA + "dlrm_validation.py", ["--smoke", "--derived", "/nonexistent.csv"], "--derived", "out"),
    (VA + "calibration_effect.py", ["--roofline", "/nonexistent_dir", "--calibrated", "/nonexistent_dir"],
     "--roofline", None),
    (VA + "flows_equivalence.py", ["--cases", "bogus"], "--cases", "out.json"),
    (VA + "flows_equivalence.py", ["--cases", "dlrm_v1_full_2", "--rtol", "-1"], "--rtol", "out.json"),
    (BE + "bench_dlrm.py", ["--nodes", "-4"], "--nodes", "out.csv"),
    (BE + "bench_engine.py", ["--nodes", "1", "--ops", "all_reduce:nope"], "--ops", "out.csv"),
    (BE + "bench_fill_threshold.py", ["--problems", "0"], "--problems", "out.csv"),
    (BE + "bench_llm.py", ["--nodes", "1", "--models", "/nonexistent.yaml"], "nonexistent.yaml", "out.csv"),
    (BE + "bench_planner.py", ["--points", "planner:0"], "--points", "out.csv"),
    (BE + "bench_resolution.py", ["--nodes", "1", "--workers", "0"], "--workers", "out.csv"),
    (BE + "knob_screen.py", ["--nodes", "1", "--post-us", "-1"], "--post-us", "out.csv"),
    (BE + "knob_screen.py", ["--nodes", "1", "--post-us", "nan"], "--post-us", "out.csv"),
    (BE + "knob_screen.py", ["--nodes", "1", "--post-us", "1e300"], "--post-us", "out.csv"),
    (BE + "knob_screen.py", ["--nodes", "1", "--models", "/nonexistent.yaml"], "nonexistent.yaml", "out.csv"),
    (BE + "knob_screen.py", ["--nodes", "1", "--models", "llm_tp_dp"], "--models", "out.csv"),
    (BE + "bench_targets.py", ["--what", "run", "--nodes", "x"], "--nodes", "out.csv"),
    (BE + "bench_uncertainty.py", ["--nodes", "1", "--draws", "0"], "--draws", "out.csv"),
    (BE + "bench_uncertainty.py", ["--nodes", "1", "--out", "/proc/simfuse_x"], "--out", None),
    (BE + "fit_guard_dlrm.py", ["--csv", "/nonexistent.csv"], "--csv", None),
]


@pytest.mark.parametrize("script, args, needle, out", BAD_ARGUMENTS,
                         ids=[f"{s.rsplit('/', 1)[1]}:{n}" for s, _a, n, _o in BAD_ARGUMENTS])
def test_scripts_bad_arguments_exit_2_without_traceback(root, tmp_path, script, args, needle, out):
    path = tmp_path / out if out else None
    extra = ["--out", str(path)] if path is not None and "--out" not in args else []
    _refused(root, [script, *args, *extra], needle, path)
