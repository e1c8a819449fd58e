# ruff: noqa: B023  (kernel closures capture loop variables and are consumed within the same iteration)
"""HugeCTR's dense element-wise kernels, re-created and timed on a GPU, against simfuse's prices (issue 11).

``dense_fusion: epilogue`` (simfuse.workloads.dlrm_kernels.dense_elementwise) prices the kernels HugeCTR's MultiCross,
Concat and MLP layers launch by their bytes.  This measures kernels with the same memory traffic, at MLPerf's
per-GPU batches (6,912 / 2,112 / 1,056) and the DLRM-DCNv2 widths (x = 27 x 128 = 3,456, embeddings 26 x 128),
bf16:

=========================  ==========================================  ======================================
label (the builder's)      HugeCTR kernel (multi_cross_layer.cu ...)  re-created as
=========================  ==========================================  ======================================
dcn1_dot_add               vector_fma4_align8: x0 .* h + x_l           ``torch.addcmul(x_l, x0, h, out=)``
                           (a layer after the first: x_l is not x0)
dcn0_mul_fma3              vector_mul_fma3_align: S0 = dY .* x0,        a Triton kernel, 4 reads and 2 writes
                           dX += dY .* H
dcn_dx_memset              cudaMemsetAsync of dX                      ``dx.zero_()``
dcn_dx_add                 matrix_add (binaryOp a + b)                ``torch.add(a, b, out=)``
concat_embeddings          concat_fwd_kernel, the embedding input      ``out[:, :T*D].copy_(emb)``
concat_bottom              concat_fwd_kernel, the bottom-MLP input     ``out[:, T*D:].copy_(bot)``
concat_bwd_embeddings      concat_bwd_kernel, the embedding part       ``demb.copy_(g[:, :T*D])``
bottom2_mask_copy          the last ReLU layer's mask copy             ``mask.copy_(y)``
bottom2_reverse_relu       reverse_relu_kernel                         a Triton kernel: dY * (mask > 0)
=========================  ==========================================  ======================================

* ``python experiments/gpu_campaigns/dense_ew_kernels.py measure OUT_DIR`` (GPU): each kernel 20 times in a CUDA graph,
  5 replays under the Kineto profiler; the device duration per call (kernel events only: no launch gap) ->
  ``dense_ew_kernels_<gpu>.csv``.
* ``python experiments/gpu_campaigns/dense_ew_kernels.py predict CSV [--topology T] [--out CSV]``: simfuse's time for the
  same kernel (the builder's KernelWork, priced alone, launch latency left out) and the ratio.  Nothing here is
  fitted: the builder's byte counts come from HugeCTR's source, the bandwidth from the topology.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BATCHES = (6912, 2112, 1056)
T, D = 26, 128
X = (T + 1) * D
FIELDS = ["gpu", "batch", "label", "kernels_per_call", "time_s", "calls"]


def _graph_kernel_time(fn, torch, calls: int = 20, replays: int = 5, warm: int = 3):  # pragma: no cover - GPU
    """``fn`` ``calls`` times in a CUDA graph, ``replays`` replays under Kineto: (kernels per call, device time
    per call in s; kernel events only, no launch gap)."""
    from dlrm_dense_step import kernel_events  # experiments/ is on sys.path when this runs as a script

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    kern = kernel_events(g, torch, replays)
    n = calls * replays
    return len(kern) / n, sum(e["dur"] for e in kern) / 1e6 / n


def _write_rows(out: Path, rows: list) -> None:
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        w.writerows(rows)
    print("wrote", out)


def measure(out_dir: str) -> None:  # pragma: no cover - needs a GPU
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _mul_fma3(dy_ptr, x0_ptr, h_ptr, s0_ptr, acc_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        dy = tl.load(dy_ptr + offs, mask=m)
        x0 = tl.load(x0_ptr + offs, mask=m)
        h = tl.load(h_ptr + offs, mask=m)
        acc = tl.load(acc_ptr + offs, mask=m)
        tl.store(s0_ptr + offs, dy * x0, mask=m)
        tl.store(acc_ptr + offs, acc + dy * h, mask=m)

    @triton.jit
    def _reverse_relu(dy_ptr, mask_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        dy = tl.load(dy_ptr + offs, mask=m)
        mk = tl.load(mask_ptr + offs, mask=m)
        tl.store(out_ptr + offs, tl.where(mk > 0, dy, 0.0).to(dy.dtype), mask=m)

    dev, dt = torch.device("cuda"), torch.bfloat16
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    torch.manual_seed(0)
    rows = []
    calls, replays = 20, 5
    block = 2048
    for b in BATCHES:
        r = lambda *s: torch.randn(*s, device=dev, dtype=dt)  # noqa: E731
        x0, xl, h, dy, acc, s0, o = (r(b, X) for _ in range(7))
        emb, bot, y, dyb = r(b, T * D), r(b, D), r(b, D), r(b, D)
        cat = r(b, X)
        demb, mask, dr = r(b, T * D), r(b, D), r(b, D)
        n, nb = b * X, b * D
        kernels = {
            "dcn1_dot_add": lambda: torch.addcmul(xl, x0, h, out=o),
            "dcn0_mul_fma3": lambda: _mul_fma3[(triton.cdiv(n, block),)](dy, x0, h, s0, acc, n, BLOCK=block,
                                                                        num_warps=8),
            "dcn_dx_memset": lambda: acc.zero_(),
            "dcn_dx_add": lambda: torch.add(acc, dy, out=o),
            "concat_embeddings": lambda: cat[:, :T * D].copy_(emb),
            "concat_bottom": lambda: cat[:, T * D:].copy_(bot),
            "concat_bwd_embeddings": lambda: demb.copy_(cat[:, :T * D]),
            "bottom2_mask_copy": lambda: mask.copy_(y),
            "bottom2_reverse_relu": lambda: _reverse_relu[(triton.cdiv(nb, block),)](dyb, mask, dr, nb, BLOCK=block,
                                                                                     num_warps=8),
        }
        for label, fn in kernels.items():
            per_call, t = _graph_kernel_time(fn, torch, calls, replays)
            rows.append([gpu, b, label, per_call, t, calls * replays])
            print(f"batch {b} {label}: {t * 1e6:.2f} us per call ({per_call:g} kernels)", flush=True)
    _write_rows(Path(out_dir) / f"dense_ew_kernels_{gpu}.csv", rows)


_CONCAT_CU = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
// HugeCTR v23.08.00 src/layers/concat_layer.cu concat_fwd_kernel / concat_bwd_kernel, re-typed (not copied): one
// row per block iteration, the row's elements strided over the threads, one 2-byte element per load.
template <typename T>
__global__ void cfwd(T* out, int2 out_dim, const T* in, int2 in_dim, int offset) {
  for (int mi = blockIdx.x; mi < in_dim.x; mi += gridDim.x)
    for (int ni = threadIdx.x; ni < in_dim.y; ni += blockDim.x)
      out[mi * out_dim.y + offset + ni] = in[mi * in_dim.y + ni];
}
template <typename T>
__global__ void cbwd(const T* out, int2 out_dim, T* in, int2 in_dim, int offset) {
  for (int mi = blockIdx.x; mi < in_dim.x; mi += gridDim.x)
    for (int ni = threadIdx.x; ni < in_dim.y; ni += blockDim.x)
      in[mi * in_dim.y + ni] = out[mi * out_dim.y + offset + ni];
}
void concat_fwd(torch::Tensor out, torch::Tensor in, int64_t offset, int64_t blocks) {
  int2 od = {(int)out.size(0), (int)out.size(1)}, id = {(int)in.size(0), (int)in.size(1)};
  cfwd<at::Half><<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<at::Half>(), od, in.data_ptr<at::Half>(), id, (int)offset);
}
void concat_bwd(torch::Tensor out, torch::Tensor in, int64_t offset, int64_t blocks) {
  int2 od = {(int)out.size(0), (int)out.size(1)}, id = {(int)in.size(0), (int)in.size(1)};
  cbwd<at::Half><<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<at::Half>(), od, in.data_ptr<at::Half>(), id, (int)offset);
}
"""


def measure_concat(out_dir: str) -> None:  # pragma: no cover - needs a GPU and nvcc
    """HugeCTR's concat kernels themselves (fp16, the submissions' mixed precision), compiled with
    ``torch.utils.cpp_extension.load_inline``; grid = 8 blocks per SM of 256 threads as HugeCTR launches them.
    Writes ``dense_ew_concat_<gpu>.csv`` (same columns as ``measure``)."""
    import torch
    from torch.utils.cpp_extension import load_inline

    mod = load_inline("hctr_concat", cpp_sources="void concat_fwd(torch::Tensor, torch::Tensor, int64_t, int64_t);"
                      "void concat_bwd(torch::Tensor, torch::Tensor, int64_t, int64_t);", cuda_sources=_CONCAT_CU,
                      functions=["concat_fwd", "concat_bwd"], verbose=False)
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    blocks = torch.cuda.get_device_properties(0).multi_processor_count * 8
    rows, calls, replays = [], 20, 5
    for b in BATCHES:
        cat = torch.randn(b, X, device=dev, dtype=torch.float16)
        emb = torch.randn(b, T * D, device=dev, dtype=torch.float16)
        bot = torch.randn(b, D, device=dev, dtype=torch.float16)
        kernels = {"concat_embeddings": lambda: mod.concat_fwd(cat, emb, 0, blocks),
                   "concat_bottom": lambda: mod.concat_fwd(cat, bot, T * D, blocks),
                   "concat_bwd_embeddings": lambda: mod.concat_bwd(cat, emb, 0, blocks)}
        for label, fn in kernels.items():
            per_call, t = _graph_kernel_time(fn, torch, calls, replays, warm=1)
            rows.append([gpu, b, label, per_call, t, calls * replays])
            print(f"batch {b} {label} (HugeCTR kernel): {t * 1e6:.2f} us per call", flush=True)
    _write_rows(Path(out_dir) / f"dense_ew_concat_{gpu}.csv", rows)


def predict(csv_path: str, topology: str, out: str | None) -> None:
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    from simfuse.engine.compute import simulate_kernel
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.dlrm_kernels import dense_elementwise

    system = System.load(topology)
    spec = load_workload(ROOT / "models" / "dlrm_dcnv2_mlperf.yaml")

    def device_s(w):  # the kernel alone without its launch latency (Kineto durations have none)
        return simulate_kernel(w, system.cost).time_s - system.cost.launch_latency_s(w)

    df = pd.read_csv(csv_path)
    works_at = {b: dict(dense_elementwise(spec, int(b)).all()) for b in df.batch.unique()}
    sim, nbytes = [], []
    for r in df.itertuples():
        w = works_at[r.batch].get(r.label)
        sim.append(device_s(w) if w is not None else float("nan"))
        nbytes.append(w.bytes_per_wg * w.num_workgroups if w is not None else float("nan"))
    df["bytes"] = nbytes
    df["measured_tb_per_s"] = df["bytes"] / df["time_s"] / 1e12
    df["sim_time_s"] = sim
    df["ratio_sim_over_measured"] = df["sim_time_s"] / df["time_s"]
    with pd.option_context("display.width", 200):
        print(df.to_string(index=False))
    if out:
        df.to_csv(out, index=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out_dir")
    mc = sub.add_parser("measure-concat", help="HugeCTR's own concat kernels (needs nvcc)")
    mc.add_argument("out_dir")
    p = sub.add_parser("predict")
    p.add_argument("csv")
    p.add_argument("--topology", default=str(ROOT / "topologies/h200_nvl8_ib_ndr.yaml"))
    p.add_argument("--out")
    a = ap.parse_args(argv)
    if a.cmd != "predict":
        Path(a.out_dir).mkdir(parents=True, exist_ok=True)
    if a.cmd == "measure":
        measure(a.out_dir)
    elif a.cmd == "measure-concat":
        measure_concat(a.out_dir)
    else:
        predict(a.csv, a.topology, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
