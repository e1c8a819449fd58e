"""The DLRM-DCNv2 dense step measured on a GPU, and the simulator's GEMM times for the same layers (issue 11).

Why: the 1-node validation points are compute-bound, and the H200 model's dense GEMM times rest on isolated
``torch.mm`` calls that re-read operands from a warm L2 (``experiments/results/h200_traces/
torch_profiler_dense_h200.README.md``).  This measures the dense part of a real training step -- bottom MLP,
DCNv2 low-rank cross layers, top MLP, forward + backward + SGD step, bf16, the pooled embeddings a random input
that needs a gradient -- at MLPerf's per-GPU batches (6,912 / 2,112 / 1,056: 1 / 8 / 16 nodes), and next to it
every GEMM of that step alone.  It is a measurement: nothing is fitted to MLPerf step times.

Two parts:

* ``python experiments/gpu_campaigns/dlrm_dense_step.py measure OUT_DIR`` (GPU machine): writes ``dense_step_<gpu>.csv`` --
  per batch, the whole step under a CUDA graph (``what=step``), the sum of its kernels by class from a Kineto
  trace of graph replays (``what=kernels_gemm`` / ``kernels_other``) and every GEMM of the step isolated
  (``what=gemm``: ``torch.mm`` of the layer's forward, dgrad and wgrad shapes, CUDA graph of 20 calls, warm L2);
  and ``dense_step_kernels_<gpu>.csv``: the graphed step's kernels by name (calls and time per step).
* ``python experiments/gpu_campaigns/dlrm_dense_step.py predict CSV --model M --topology T [--out CSV]`` (any machine): the
  simulator's kernel time (launch included) for every ``gemm`` row, from the topology's cost model -- the
  same :func:`simfuse.workloads.dense.gemm_work` shapes the DLRM graph builder emits -- and the step sums.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BATCHES = (6912, 2112, 1056)  # MLPerf DGX H100 per-GPU batches at 1, 8, 16 nodes (models/dlrm_dcnv2_mlperf*.yaml)
FIELDS = ["gpu", "batch", "what", "label", "m", "n", "k", "time_s", "reps"]


def _layers(b: int, dense_features=13, bottom=(512, 256, 128), top=(1024, 1024, 512, 256, 1), tables=26, dim=128,
            dcn_layers=3, low_rank=512):
    """Forward GEMMs (label, m, n, k) as simfuse.workloads.dlrm_kernels._dense_layers lists them (DCN interaction)."""
    out, d_in = [], dense_features
    for i, o in enumerate(bottom):
        out.append((f"bottom{i}", b, o, d_in))
        d_in = o
    x = (tables + 1) * dim
    for i in range(dcn_layers):
        out += [(f"dcn{i}_v", b, low_rank, x), (f"dcn{i}_u", b, x, low_rank)]
    d_in = x
    for i, o in enumerate(top):
        out.append((f"top{i}", b, o, d_in))
        d_in = o
    return out


def _gemm_shapes(b: int):
    """Every GEMM of one step: forward (m, n, k), dgrad (m, k, n), wgrad (k, n, m) -- the builder's shapes."""
    rows = []
    for lbl, m, n, k in _layers(b):
        rows += [(lbl, m, n, k), (lbl + "_dgrad", m, k, n), (lbl + "_wgrad", k, n, m)]
    return rows


#: substrings of GEMM kernel names (cuBLAS, CUTLASS, cuBLASLt's nvjet)
_GEMM_WORDS = ("gemm", "cutlass", "xmma", "nvjet")


def kernel_events(g, torch, replays: int) -> list[dict]:  # pragma: no cover - needs a GPU
    """The ``kernel`` events of ``replays`` replays of CUDA graph ``g``, from the exported Kineto trace (robust
    across torch versions' event APIs); each has ``name`` and ``dur`` (us)."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(f"{tmp}/t.json")
        trace = json.loads(Path(f"{tmp}/t.json").read_text())
    return [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]


def graph_replay_time(fn, torch, reps: int = 50, warm: int = 10):  # pragma: no cover - needs a GPU
    """``fn`` captured once in a CUDA graph (after ``warm`` eager calls on a side stream): the median of 5 timings
    of ``reps`` replays, per replay (s), and the graph.  ``fn`` may fork work onto other streams (it must join them
    back onto the current stream)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):  # median of 5 timings of ``reps`` replays
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            g.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(e) / 1e3 / reps)
    return sorted(times)[2], g


def _kernel_sums(g, torch):  # pragma: no cover - needs a GPU
    """GEMM and other kernel time per replay of graph ``g`` (s), from a Kineto trace of 10 replays, and the
    kernels per replay."""
    kern = kernel_events(g, torch, 10)
    gemm_us = sum(e["dur"] for e in kern if any(s in e["name"].lower() for s in _GEMM_WORDS))
    other_us = sum(e["dur"] for e in kern) - gemm_us
    by_name: dict[str, list[float]] = {}
    for e in kern:
        by_name.setdefault(e["name"], []).append(e["dur"])
    return gemm_us / 1e7, other_us / 1e7, len(kern) / 10, by_name


def measure(out_dir: str) -> None:  # pragma: no cover - needs a GPU
    import torch
    from torch import nn

    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    dt = torch.bfloat16
    torch.manual_seed(0)
    rows = []
    kernel_rows = []  # per kernel name of the graphed step: calls and time per step

    class DCN(nn.Module):
        def __init__(self, x, r, n):
            super().__init__()
            self.v = nn.ModuleList(nn.Linear(x, r, bias=False) for _ in range(n))
            self.u = nn.ModuleList(nn.Linear(r, x) for _ in range(n))

        def forward(self, x0):
            x = x0
            for v, u in zip(self.v, self.u, strict=True):
                x = x0 * u(v(x)) + x
            return x

    def mlp(sizes, last_relu=True):
        mods = []
        for i in range(len(sizes) - 1):
            mods.append(nn.Linear(sizes[i], sizes[i + 1]))
            if last_relu or i < len(sizes) - 2:
                mods.append(nn.ReLU())
        return nn.Sequential(*mods)

    def graph_time(fn, reps=50, warm=10):
        return graph_replay_time(fn, torch, reps=reps, warm=warm)

    for b in BATCHES:
        bottom = mlp([13, 512, 256, 128]).to(dev, dt)
        dcn = DCN(27 * 128, 512, 3).to(dev, dt)
        top = mlp([27 * 128, 1024, 1024, 512, 256, 1], last_relu=False).to(dev, dt)
        params = [*bottom.parameters(), *dcn.parameters(), *top.parameters()]
        opt = torch.optim.SGD(params, lr=1e-3, foreach=True)
        dense_x = torch.randn(b, 13, device=dev, dtype=dt)
        emb = torch.randn(b, 26 * 128, device=dev, dtype=dt, requires_grad=True)
        label = torch.randint(0, 2, (b, 1), device=dev).to(torch.float32)
        lossf = nn.BCEWithLogitsLoss()

        def step(top=top, dcn=dcn, bottom=bottom, dense_x=dense_x, emb=emb, lossf=lossf, label=label, opt=opt):
            y = top(dcn(torch.cat([bottom(dense_x), emb], dim=1)))
            loss = lossf(y.float(), label)
            loss.backward()
            opt.step()

        for p in params:
            p.grad = None
        emb.grad = None
        try:
            t, g = graph_time(step)
        except Exception as exc:  # noqa: BLE001 - report it and go on with the isolated GEMMs
            print(f"batch {b}: step capture failed: {exc}", flush=True)
            t, g = float("nan"), None
        rows.append([gpu, b, "step", "fwd+bwd+sgd", "", "", "", t, 50 if g is not None else 0])
        if g is not None:
            gemm_s, other_s, per_step, by_name = _kernel_sums(g, torch)
            for name, durs in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
                kernel_rows.append([gpu, b, name, len(durs) / 10, sum(durs) / 1e7])
            rows.append([gpu, b, "kernels_gemm", f"{per_step:g} kernels/step", "", "", "", gemm_s, 10])
            rows.append([gpu, b, "kernels_other", "", "", "", "", other_s, 10])
            print(f"batch {b}: step {t * 1e3:.3f} ms, gemm kernels {gemm_s * 1e3:.3f} ms, other {other_s * 1e3:.3f} ms",
                  flush=True)
            del g
        # every GEMM of the step alone (warm L2: the same operands every call)
        for lbl, m, n, k in _gemm_shapes(b):
            a = torch.randn(m, k, device=dev, dtype=dt)
            w = torch.randn(k, n, device=dev, dtype=dt)
            t, _ = graph_time(lambda a=a, w=w: torch.mm(a, w), reps=20, warm=3)
            rows.append([gpu, b, "gemm", lbl, m, n, k, t, 20])
    out = Path(out_dir) / f"dense_step_{gpu}.csv"
    with out.open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(FIELDS)
        wr.writerows(rows)
    kout = Path(out_dir) / f"dense_step_kernels_{gpu}.csv"
    with kout.open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["gpu", "batch", "kernel", "calls_per_step", "time_per_step_s"])
        wr.writerows(kernel_rows)
    print("wrote", out, kout)


#: op class of a kernel of the measured step, by its name (PyTorch ATen kernel names; GEMMs excluded)
_MEASURED_CLASSES = (("add", "CUDAFunctor_add"), ("mul", "MulFunctor"), ("reduce", "reduce_kernel"),
                     ("relu_bwd", "threshold"), ("relu", "clamp"), ("copy", "CatArrayBatchedCopy"),
                     ("optimizer", "multi_tensor_apply"))
def _measured_class(name: str) -> str:
    low = name.lower()
    if any(w in low for w in _GEMM_WORDS):
        return "gemm"
    for cls, key in _MEASURED_CLASSES:
        if key in name:
            return cls
    return "other"


def predict(csv_path: str, model: str, topology: str, out: str | None) -> None:
    sys.path.insert(0, str(ROOT))
    import dataclasses

    import pandas as pd

    from simfuse.engine.compute import simulate_kernel
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.dense import elementwise_work, gemm_work
    from simfuse.workloads.dlrm_kernels import _dense_layers, dense_elementwise

    spec = load_workload(model)
    # the measured step and the isolated GEMMs are CUDA-graph replays: every kernel at the in-graph latency
    system = System.load(topology).with_launch("graph")

    def kernel_s(w):  # the kernel alone: launch latency + makespan of its grid
        return simulate_kernel(w, system.cost).time_s

    def dense_params(b):
        bo, it, to = _dense_layers(spec, b)
        return sum(k * n + n for (_l, _m, n, k) in bo + it + to)

    df = pd.read_csv(csv_path)
    df["sim_time_s"] = [kernel_s(gemm_work(r.label, int(r.m), int(r.n), int(r.k), spec.dense_dtype))
                        if r.what == "gemm" else float("nan") for r in df.itertuples()]
    df["ratio_sim_over_measured"] = df["sim_time_s"] / df["time_s"]
    kern_csv = Path(csv_path).with_name(Path(csv_path).name.replace("dense_step_", "dense_step_kernels_"))
    kern = pd.read_csv(kern_csv) if kern_csv.exists() else None
    summary, classes = [], []
    for b, g in df.groupby("batch", sort=False):
        gm = g[g.what == "gemm"]
        row = {"batch": b, "step_measured_s": g[g.what == "step"].time_s.iloc[0],
               "gemm_kernels_in_step_measured_s": g[g.what == "kernels_gemm"].time_s.iloc[0],
               # the builder emits no dgrad for the first bottom layer (its input is the data; nor does the
               # measured step, whose dense input needs no gradient): the isolated row stays, out of the sum
               "sim_gemms_s": gm[gm.label != "bottom0_dgrad"].sim_time_s.sum(),
               "other_kernels_in_step_measured_s": g[g.what == "kernels_other"].time_s.iloc[0],
               "isolated_gemms_measured_s": gm.time_s.sum()}
        # the builder's non-GEMM dense kernels per dense_fusion setting; the measured step is PyTorch (unfused)
        # with an SGD step, so the unfused column adds the dense SGD kernel the builder emits for sgd
        p = dense_params(int(b))
        sgd = ("dense_update", elementwise_work("dense_update", p * (2.0 * 2 + 2), 2.0 * p, spec.dense_dtype,
                                                wgs=max(1, p // 8192)))
        per_class: dict = {}
        for fusion in ("legacy", "epilogue", "unfused"):
            dew = dense_elementwise(dataclasses.replace(spec, dense_fusion=fusion), int(b))
            ks = dew.all() + ([sgd] if fusion == "unfused" else [])
            row[f"sim_nongemm_{fusion}_s"] = sum(kernel_s(w) for _lbl, w in ks)
            row[f"sim_nongemm_{fusion}_kernels"] = len(ks)
            if fusion == "unfused":
                for lbl, w in ks:
                    c = per_class.setdefault("optimizer" if lbl == "dense_update" else dew.op_classes[lbl], [0, 0.0])
                    c[0] += 1
                    c[1] += kernel_s(w)
        summary.append(row)
        meas: dict = {}
        if kern is not None:
            for r in kern[kern.batch == b].itertuples():
                c = _measured_class(r.kernel)
                if c != "gemm":
                    m = meas.setdefault(c, [0.0, 0.0])
                    m[0] += r.calls_per_step
                    m[1] += r.time_per_step_s
        for c in sorted(set(per_class) | set(meas)):
            classes.append({"batch": b, "op_class": c, "measured_calls": meas.get(c, [0, 0])[0],
                            "measured_s": meas.get(c, [0, 0.0])[1], "sim_unfused_kernels": per_class.get(c, [0])[0],
                            "sim_unfused_s": per_class.get(c, [0, 0.0])[1]})
    s = pd.DataFrame(summary)
    cl = pd.DataFrame(classes)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(s.to_string(index=False))
        print(cl.to_string(index=False))
    if out:
        df.to_csv(out, index=False)
        s.to_csv(Path(out).with_name(Path(out).stem + "_summary.csv"), index=False)
        cl.to_csv(Path(out).with_name(Path(out).stem + "_classes.csv"), index=False)


def measure_predict_main(argv, doc: str, measure_fn, predict_fn, model_default: str | None) -> int:
    """The command line of a measure (GPU) / predict (any machine) script: ``measure OUT_DIR`` and ``predict CSV
    [--model M] [--topology T] [--out CSV]``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out_dir")
    p = sub.add_parser("predict")
    p.add_argument("csv")
    p.add_argument("--model", default=model_default)
    p.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    p.add_argument("--out")
    a = ap.parse_args(argv)
    if a.cmd == "measure":
        Path(a.out_dir).mkdir(parents=True, exist_ok=True)
        measure_fn(a.out_dir)
    else:
        predict_fn(a.csv, a.model, a.topology, a.out)
    return 0


def main(argv=None) -> int:
    return measure_predict_main(argv, __doc__, measure, predict, str(ROOT / "models/dlrm_dcnv2_mlperf.yaml"))


if __name__ == "__main__":
    sys.exit(main())
