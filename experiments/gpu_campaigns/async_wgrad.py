"""How much a concurrent weight-gradient stream shortens the DLRM-DCNv2 dense backward (issue 11).

HugeCTR's MLP and MultiCross layers can compute their weight gradients (wgrad) on a second CUDA stream while the
data gradients (dgrad) go on down the network (``async_wgrad``; docs/hugectr_baseline.md).  simfuse runs every
GEMM of a rank one after the other on its compute stream; this measures what that leaves out, at MLPerf's
per-GPU batches (6,912 / 2,112 / 1,056), bf16, on the backward GEMMs of the dense network the DLRM builder emits
(:func:`simfuse.workloads.dlrm_kernels._dense_layers`; no dgrad for the first bottom layer, whose input is the data):

* ``seq``: per layer, last to first, its dgrad then its wgrad, one stream (what simfuse models);
* ``async``: the dgrads in order on the main stream; each wgrad on a side stream as soon as the dgrad that
  produced its output gradient is done (an event), joined at the end;
* ``dgrad_only`` / ``wgrad_only``: each chain alone (their sum against ``seq``: the gaps of one stream).

Each variant is one CUDA graph, the median of 5 timings of 50 replays (launch gaps inside the graph included, as in
a graphed step).  Operands are distinct per GEMM and together larger than the L2 at 6,912 per GPU.

* ``python experiments/gpu_campaigns/async_wgrad.py measure OUT_DIR`` (GPU): ``async_wgrad_<gpu>.csv``.
* ``python experiments/gpu_campaigns/async_wgrad.py predict CSV [--model M] [--topology T] [--out CSV]``: the simulator's
  one-stream sum of the same GEMMs (the builder's KernelWork, each priced alone with launch latency) next to the
  measured times.  Nothing is fitted.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # dlrm_dense_step (shared helpers)
sys.path.insert(0, str(ROOT))  # simfuse, for predict (measure runs without it)
BATCHES = (6912, 2112, 1056)
FIELDS = ["gpu", "batch", "what", "gemms", "time_s", "reps"]


def backward_gemms(b: int, model: str | None = None) -> list[tuple[str, int, int, int, bool]]:
    """The dense backward's GEMMs of the builder, in issue order (last layer first): per forward layer
    ``(label, m, n, k, has_dgrad)`` with ``m`` the batch rows, ``n`` the layer's outputs, ``k`` its inputs; the
    dgrad is ``(m, k, n)``, the wgrad ``(n, k, m)``.  With ``model``: the builder's layers of that model file;
    without: DLRM-DCNv2's (``dlrm_dense_step._layers``, a copy that needs no simfuse install, for the GPU
    machine; a smoke test checks that the two agree)."""
    if model is None:
        from dlrm_dense_step import _layers

        fwd = _layers(b)
    else:
        from simfuse.spec import load_workload
        from simfuse.workloads.dlrm_kernels import _dense_layers

        bottom, inter, top = _dense_layers(load_workload(model), b)
        fwd = bottom + inter + top
    return [(lbl, m, n, k, i > 0) for i, (lbl, m, n, k) in reversed(list(enumerate(fwd)))]


def _measure_batch(b: int, torch, gpu: str) -> list:  # pragma: no cover - needs a GPU
    from dlrm_dense_step import graph_replay_time

    dev, dt = torch.device("cuda"), torch.bfloat16
    layers = backward_gemms(b)
    # per layer: input activations X (m x k), weights W (n x k), output gradient dY (m x n), outputs dX, dW
    bufs = [{"x": torch.randn(m, k, device=dev, dtype=dt), "w": torch.randn(n, k, device=dev, dtype=dt),
             "dy": torch.randn(m, n, device=dev, dtype=dt),
             "dx": torch.empty(m, k, device=dev, dtype=dt) if has_dgrad else None,
             "dw": torch.empty(n, k, device=dev, dtype=dt)} for _lbl, m, n, k, has_dgrad in layers]
    side = torch.cuda.Stream()

    def dgrad(bf):
        if bf["dx"] is not None:
            torch.mm(bf["dy"], bf["w"], out=bf["dx"])

    def wgrad(bf):
        torch.mm(bf["dy"].t(), bf["x"], out=bf["dw"])

    def seq():
        for bf in bufs:
            dgrad(bf)
            wgrad(bf)

    def asyn():
        main = torch.cuda.current_stream()
        ready = []  # ready[j]: layer j's output gradient exists (after layer j-1's dgrad)
        for bf in [None, *bufs]:
            if bf is not None:
                dgrad(bf)
            ev = torch.cuda.Event()
            ev.record(main)
            ready.append(ev)
        for j, bf in enumerate(bufs):
            side.wait_event(ready[j])
            with torch.cuda.stream(side):
                wgrad(bf)
        main.wait_stream(side)

    def dgrad_only():
        for bf in bufs:
            dgrad(bf)

    def wgrad_only():
        for bf in bufs:
            wgrad(bf)

    rows = []
    n_d = sum(1 for lay in layers if lay[4])
    for what, fn, n in (("seq", seq, n_d + len(layers)), ("async", asyn, n_d + len(layers)),
                        ("dgrad_only", dgrad_only, n_d), ("wgrad_only", wgrad_only, len(layers))):
        t, _g = graph_replay_time(fn, torch)
        rows.append([gpu, b, what, n, t, 50])
        print(f"batch {b}: {what} {t * 1e3:.4f} ms ({n} GEMMs)", flush=True)
    return rows


def measure(out_dir: str) -> None:  # pragma: no cover - needs a GPU
    import torch

    gpu = torch.cuda.get_device_name().replace(" ", "_")
    torch.manual_seed(0)
    rows = []
    for b in BATCHES:
        rows += _measure_batch(b, torch, gpu)
        torch.cuda.empty_cache()
    out = Path(out_dir) / f"async_wgrad_{gpu}.csv"
    with out.open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(FIELDS)
        wr.writerows(rows)
    print("wrote", out)


def simulated_backward(layers, system, dtype: str, concurrent: bool) -> float:
    """The backward GEMMs as one rank's graph through the executor: one stream (``seq``), or the dgrads on
    ``compute`` and each wgrad on ``compute_wgrad`` once the previous dgrad is done (``async``; the engine
    time-shares the GPU between the two streams, :mod:`simfuse.engine.share`).  Step time (s)."""
    from simfuse.graph import ComputeNode, Graph
    from simfuse.graph.executor import execute
    from simfuse.workloads.dense import gemm_work

    g = Graph(1, 1)
    rg = g.program(0)
    prev = None
    for lbl, m, n, k, has in layers:
        dep = () if prev is None else (prev,)
        wg = gemm_work(lbl + "_wgrad", n, k, m, dtype)
        if has:
            prev = rg.add(ComputeNode(name=lbl + "_dgrad", work=gemm_work(lbl + "_dgrad", m, k, n, dtype), deps=dep))
        w = rg.add(ComputeNode(name=lbl + "_wgrad", work=wg, deps=dep,
                               stream="compute_wgrad" if concurrent and has else "compute"))
        if not (concurrent and has):
            prev = w
    return execute(system, g).time_s


def predict(csv_path: str, model: str | None, topology: str, out: str | None) -> None:
    import pandas as pd

    from simfuse.engine.compute import simulate_kernel
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.dense import gemm_work

    model = model or str(ROOT / "models/dlrm_dcnv2_mlperf.yaml")
    spec = load_workload(model)
    system = System.load(topology)

    def kernel_s(lbl, m, n, k):
        return simulate_kernel(gemm_work(lbl, m, n, k, spec.dense_dtype), system.cost).time_s

    df = pd.read_csv(csv_path)
    rows = []
    for b, g in df.groupby("batch", sort=False):
        meas = dict(zip(g.what, g.time_s, strict=True))
        layers = backward_gemms(int(b), model)
        d = sum(kernel_s(lbl + "_dgrad", m, k, n) for lbl, m, n, k, has in layers if has)
        w = sum(kernel_s(lbl + "_wgrad", n, k, m) for lbl, m, n, k, _h in layers)
        sim = {v: simulated_backward(layers, system, spec.dense_dtype, v == "async") for v in ("seq", "async")}
        rows.append({"batch": b, "seq_measured_s": meas.get("seq"), "async_measured_s": meas.get("async"),
                     "async_saving": 1.0 - meas.get("async", float("nan")) / meas.get("seq", float("nan")),
                     "dgrad_only_measured_s": meas.get("dgrad_only"), "wgrad_only_measured_s": meas.get("wgrad_only"),
                     "sim_seq_s": sim["seq"], "sim_async_s": sim["async"],
                     "sim_async_saving": 1.0 - sim["async"] / sim["seq"], "sim_dgrad_s": d, "sim_wgrad_s": w,
                     "ratio_sim_seq_over_measured_seq": sim["seq"] / meas.get("seq", float("nan")),
                     "ratio_sim_async_over_measured_async": sim["async"] / meas.get("async", float("nan"))})
    s = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(s.to_string(index=False))
    if out:
        s.to_csv(out, index=False)


def main(argv=None) -> int:
    from dlrm_dense_step import measure_predict_main

    return measure_predict_main(argv, __doc__, measure, predict, None)


if __name__ == "__main__":
    sys.exit(main())
