"""The embedding backward on one GPU against the simulator's sparse-update kernel (issue 11, item 5).

A model-parallel shard's backward, as HugeCTR (index calculation, local reduce, update) and FBGEMM's fused TBE
backward do it: sort the shard's ids (key-value radix sort of ``bags x lookups`` int32 ids with their positions),
then one fused kernel that, for each distinct id (a run of equal ids in sorted order), adds up the pooled
gradients of the bags that looked it up (fp16, one row of ``D`` per bag) and applies Adagrad to the row (fp32
table and fp32 accumulator, one state element per element: HugeCTR's ``optimizers.cuh``).  Ids are uniform in
``[0, rows)`` (the simulator's assumption).  simfuse prices the same shard with
:func:`simfuse.workloads.dlrm_kernels.sparse_update_work` (bytes: per lookup its row and state read and written, each
bag's gradient once) and does not price the sort.

* ``python experiments/gpu_campaigns/embedding_backward.py measure OUT_DIR`` (GPU; torch + Triton): checks the fused kernel
  against a PyTorch reference on a small case, then times ``sort`` and ``update`` (each in a CUDA graph, median of
  5 timings of 20 replays) per case: ``embedding_backward_<gpu>.csv``.
* ``python experiments/gpu_campaigns/embedding_backward.py measure-sort OUT_DIR`` (GPU and nvcc): CUB's radix sort of the
  (id, position) pairs over the bits the shard's rows need and over 32, and the run-length encoding of the sorted
  ids, as HugeCTR's index calculation runs them: ``embedding_sort_<gpu>.csv``.
* ``python experiments/gpu_campaigns/embedding_backward.py predict CSV [--model M] [--topology T] [--out CSV]``: the simulator's
  kernel for the same shards (launch included) next to the measured ``sort + update``.  Nothing is fitted.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # dlrm_dense_step (shared helpers)
sys.path.insert(0, str(ROOT))
DIM = 128
#: (bags, lookups per bag on the shard, rows of the shard): the shards the validation runs see -- bags = the
#: global batch a model-parallel shard pools (55,296 at 1 node, 135,168 at 8 and 16), lookups = its share of a
#: table's (e.g. the 100-hot table over 4 or 32 GPUs: 25, 3), rows up to 10 M (40 M over 4 GPUs)
CASES = [(55296, 1, 1_000_000), (55296, 4, 1_000_000), (55296, 25, 10_000_000), (135168, 1, 1_000_000),
         (135168, 3, 1_250_000), (135168, 8, 10_000_000), (135168, 25, 10_000_000), (135168, 1, 40_000)]
#: (BLOCK, num_warps) of the blocked update kernel, each timed
BLOCKED = [(8, 4), (16, 4), (32, 4), (32, 8), (64, 8)]
FIELDS = ["gpu", "bags", "lookups", "rows", "dim", "what", "time_s", "reps"]


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def seg_adagrad(sorted_ids, pos, grad, w, state, n, L, lr, eps, D: tl.constexpr):
        i = tl.program_id(0)
        cur = tl.load(sorted_ids + i)
        prev = tl.load(sorted_ids + i - 1, mask=i > 0, other=-1)
        if cur != prev:  # the first of a run of equal ids: reduce the run, update the row
            cols = tl.arange(0, D)
            acc = tl.zeros([D], dtype=tl.float32)
            j = i
            nxt = cur
            while nxt == cur:
                bag = tl.load(pos + j) // L
                acc += tl.load(grad + bag.to(tl.int64) * D + cols).to(tl.float32)
                j += 1
                nxt = tl.load(sorted_ids + j, mask=j < n, other=-1)
            row = cur.to(tl.int64) * D + cols
            s = tl.load(state + row) + acc * acc
            tl.store(state + row, s)
            tl.store(w + row, tl.load(w + row) - lr * acc / (tl.sqrt(s) + eps))

    return seg_adagrad


def _blocked_kernel():
    """The same update with many rows in flight per program (the lever for random row access on Hopper, as the
    forward kernels found): program ``p`` owns sorted positions ``[p*BLOCK, (p+1)*BLOCK)``; each position that
    starts a run of equal ids reduces its run (the run may reach past the block) with a ``[BLOCK, D]`` gather per
    step, then the heads' rows and optimizer state are read, updated and written as one tile."""
    import triton
    import triton.language as tl

    @triton.jit
    def seg_adagrad_blocked(sorted_ids, pos, grad, w, state, n, L, lr, eps, D: tl.constexpr,
                            BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        inb = i < n
        cols = tl.arange(0, D)
        cur = tl.load(sorted_ids + i, mask=inb, other=-1)
        prev = tl.load(sorted_ids + i - 1, mask=inb & (i > 0), other=-1)
        head = inb & (cur != prev)
        acc = tl.zeros([BLOCK, D], dtype=tl.float32)
        active = head
        j = i
        while tl.max(active.to(tl.int32), axis=0) > 0:
            bag = tl.load(pos + j, mask=active, other=0) // L
            acc += tl.load(grad + bag.to(tl.int64)[:, None] * D + cols[None, :], mask=active[:, None],
                           other=0.0).to(tl.float32)
            j += 1
            nxt = tl.load(sorted_ids + j, mask=active & (j < n), other=-1)
            active = active & (nxt == cur)
        row = cur.to(tl.int64)[:, None] * D + cols[None, :]
        m = head[:, None]
        s = tl.load(state + row, mask=m, other=0.0) + acc * acc
        tl.store(state + row, s, mask=m)
        tl.store(w + row, tl.load(w + row, mask=m, other=0.0) - lr * acc / (tl.sqrt(s) + eps), mask=m)

    return seg_adagrad_blocked


def _launch(kern, block, sid, pos, grad, w, s, n, L, lr, eps, num_warps=4):
    """One launch: ``block`` 0 is the one-id-per-program kernel, otherwise the blocked one with that block."""
    if block == 0:
        kern[(n,)](sid, pos, grad, w, s, n, L, lr, eps, D=DIM)
    else:
        kern[((n + block - 1) // block,)](sid, pos, grad, w, s, n, L, lr, eps, D=DIM, BLOCK=block,
                                          num_warps=num_warps)


def _check(torch, kern, device: str = "cuda", block: int = 0) -> bool:
    """The fused kernel against index_add_ + Adagrad in PyTorch (fp32), a small case with repeated ids (CPU under
    ``TRITON_INTERPRET=1``: the smoke test)."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(0)
    B, L, R = 500, 7, 300
    ids = torch.randint(0, R, (B * L,), device=dev, dtype=torch.int32, generator=g)
    grad = torch.randn(B, DIM, device=dev, generator=g).half()
    w0, s0 = torch.randn(R, DIM, device=dev, generator=g), torch.rand(R, DIM, device=dev, generator=g)
    acc = torch.zeros(R, DIM, device=dev).index_add_(0, ids.long(), grad.float().repeat_interleave(L, 0))
    touched = torch.zeros(R, dtype=torch.bool, device=dev)
    touched[ids.long()] = True
    s_ref = torch.where(touched[:, None], s0 + acc * acc, s0)
    w_ref = torch.where(touched[:, None], w0 - 0.01 * acc / (s_ref.sqrt() + 1e-8), w0)
    w, s = w0.clone(), s0.clone()
    sid, pos = torch.sort(ids)
    _launch(kern, block, sid, pos.int(), grad, w, s, B * L, L, 0.01, 1e-8)
    if device == "cuda":
        torch.cuda.synchronize()
    return bool(torch.allclose(w, w_ref, atol=1e-4, rtol=1e-4) and torch.allclose(s, s_ref, atol=1e-3, rtol=1e-4))


def _eager_time(fn, torch, reps: int) -> float:  # pragma: no cover - needs a GPU
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(e) / 1e3 / reps)
    return sorted(times)[2]


def measure(out_dir: str) -> Path:  # pragma: no cover - needs a GPU
    import torch
    from dlrm_dense_step import graph_replay_time

    kern, bkern = _kernel(), _blocked_kernel()
    if not _check(torch, kern):
        raise SystemExit("the fused segment-reduce + Adagrad kernel disagrees with the PyTorch reference")
    for block, _warps in BLOCKED:
        if not _check(torch, bkern, block=block):
            raise SystemExit(f"the blocked kernel (BLOCK={block}) disagrees with the PyTorch reference")
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    dev = torch.device("cuda")
    rows_out = []
    for B, L, R in CASES:
        g = torch.Generator(device=dev).manual_seed(1)
        n = B * L
        ids = torch.randint(0, R, (n,), device=dev, dtype=torch.int32, generator=g)
        grad = torch.randn(B, DIM, device=dev, generator=g).half()
        w, st = torch.randn(R, DIM, device=dev), torch.rand(R, DIM, device=dev)
        sid, pos = torch.sort(ids)
        pos32 = pos.int()

        def sort(ids=ids):
            torch.sort(ids)

        def update(sid=sid, pos32=pos32, grad=grad, w=w, st=st, n=n, L=L):
            kern[(n,)](sid, pos32, grad, w, st, n, L, 1e-4, 1e-8, D=DIM)

        # a second, independent implementation: PyTorch's own embedding-bag backward with sparse gradients and
        # its sparse Adagrad step (the DLRM reference code's path), eager; ``torch_fwd`` is the forward alone, so
        # ``torch_step - torch_fwd`` is PyTorch's backward + update
        wt = torch.nn.Parameter(torch.randn(R, DIM, device=dev))
        opt = torch.optim.Adagrad([wt], lr=1e-4, eps=1e-8)
        ids2d = ids.view(B, L).long()

        def torch_fwd(ids2d=ids2d, wt=wt):
            with torch.no_grad():
                torch.nn.functional.embedding_bag(ids2d, wt, mode="sum")

        def torch_step(ids2d=ids2d, wt=wt, opt=opt, grad=grad):
            out = torch.nn.functional.embedding_bag(ids2d, wt, mode="sum", sparse=True)
            out.backward(grad.float())
            opt.step()
            opt.zero_grad(set_to_none=True)

        for what, fn in (("torch_fwd", torch_fwd), ("torch_step", torch_step)):
            try:
                t = _eager_time(fn, torch, 10)
            except RuntimeError as exc:  # e.g. out of memory: the row is left out, the run goes on
                print(f"{what}: {exc}", flush=True)
                continue
            rows_out.append({"gpu": gpu, "bags": B, "lookups": L, "rows": R, "dim": DIM, "what": what,
                             "time_s": t, "reps": 10})
            print(f"{B:7d} x {L:3d} rows {R:9d} {what:10s} {t * 1e6:9.1f} us", flush=True)
        del wt, opt, ids2d
        variants = [("sort", sort), ("update", update)]
        for block, warps in BLOCKED:
            def blocked(sid=sid, pos32=pos32, grad=grad, w=w, st=st, n=n, L=L, block=block, warps=warps):
                _launch(bkern, block, sid, pos32, grad, w, st, n, L, 1e-4, 1e-8, num_warps=warps)

            variants.append((f"update_b{block}_w{warps}", blocked))
        for what, fn in variants:
            try:
                t, _g = graph_replay_time(fn, torch, reps=20, warm=3)
            except RuntimeError as exc:  # not capturable: eager launches, CUDA events (launch gaps included)
                print(f"{what}: no CUDA graph ({exc}); eager timing", flush=True)
                t = _eager_time(fn, torch, 20)
            rows_out.append({"gpu": gpu, "bags": B, "lookups": L, "rows": R, "dim": DIM, "what": what,
                             "time_s": t, "reps": 20})
            print(f"{B:7d} x {L:3d} rows {R:9d} {what:14s} {t * 1e6:9.1f} us", flush=True)
        del w, st, ids, grad, sid, pos, pos32
        torch.cuda.empty_cache()
    out = Path(out_dir) / f"embedding_backward_{gpu}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        wr.writeheader()
        wr.writerows(rows_out)
    return out


_SORT_CU = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cub/cub.cuh>
// cub::DeviceRadixSort::SortPairs of (uint32 id, int32 position), bits [0, end_bit), as HugeCTR's index calculation
// sorts a shard's keys (embedding/.../index_calculation.cu: cub radix sort over the bits the key range needs), and
// cub::DeviceRunLengthEncode::Encode of the sorted ids (the distinct ids and their run lengths).
int64_t sort_temp_bytes(int64_t n, int64_t end_bit) {
  size_t b = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, b, (uint32_t*)nullptr, (uint32_t*)nullptr, (int*)nullptr, (int*)nullptr,
                                  (int)n, 0, (int)end_bit);
  size_t r = 0;
  cub::DeviceRunLengthEncode::Encode(nullptr, r, (uint32_t*)nullptr, (uint32_t*)nullptr, (int*)nullptr,
                                     (int*)nullptr, (int)n);
  return (int64_t)std::max(b, r);
}
void sort_pairs(torch::Tensor tmp, torch::Tensor kin, torch::Tensor kout, torch::Tensor vin, torch::Tensor vout,
                int64_t end_bit) {
  size_t b = tmp.numel();
  cub::DeviceRadixSort::SortPairs(tmp.data_ptr(), b, (uint32_t*)kin.data_ptr<int>(), (uint32_t*)kout.data_ptr<int>(),
                                  vin.data_ptr<int>(), vout.data_ptr<int>(), (int)kin.numel(), 0, (int)end_bit,
                                  at::cuda::getCurrentCUDAStream());
}
void run_length(torch::Tensor tmp, torch::Tensor keys, torch::Tensor uniq, torch::Tensor counts, torch::Tensor nruns) {
  size_t b = tmp.numel();
  cub::DeviceRunLengthEncode::Encode(tmp.data_ptr(), b, (uint32_t*)keys.data_ptr<int>(), (uint32_t*)uniq.data_ptr<int>(),
                                     counts.data_ptr<int>(), nruns.data_ptr<int>(), (int)keys.numel(),
                                     at::cuda::getCurrentCUDAStream());
}
"""


def measure_sort(out_dir: str) -> Path:  # pragma: no cover - needs a GPU and nvcc
    """CUB's radix sort of the shard's (id, position) pairs over the bits its rows need (``cub_sort``) and over
    all 32 (``cub_sort32``), and the run-length encoding of the sorted ids (``cub_rle``), per case of ``CASES``,
    each in a CUDA graph: ``embedding_sort_<gpu>.csv`` (the columns of ``measure``)."""
    import torch
    from dlrm_dense_step import graph_replay_time
    from torch.utils.cpp_extension import load_inline

    mod = load_inline("emb_sort", cpp_sources="int64_t sort_temp_bytes(int64_t, int64_t);"
                      "void sort_pairs(torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor,"
                      " int64_t);"
                      "void run_length(torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor);",
                      cuda_sources=_SORT_CU, functions=["sort_temp_bytes", "sort_pairs", "run_length"], verbose=False)
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    gen = torch.Generator(device=dev).manual_seed(0)
    rows_out = []
    for B, L, R in CASES:
        n = B * L
        ids = torch.randint(0, R, (n,), device=dev, dtype=torch.int32, generator=gen)
        pos = torch.arange(n, device=dev, dtype=torch.int32)
        kout, vout = torch.empty_like(ids), torch.empty_like(pos)
        bits = max(1, int(R - 1).bit_length())
        tmp = torch.empty(int(mod.sort_temp_bytes(n, 32)), device=dev, dtype=torch.uint8)
        uniq, counts, nruns = torch.empty_like(ids), torch.empty_like(ids), torch.empty(1, device=dev,
                                                                                         dtype=torch.int32)
        mod.sort_pairs(tmp, ids, kout, pos, vout, bits)
        torch.cuda.synchronize()
        if not torch.equal(kout.long(), torch.sort(ids.long()).values):
            raise SystemExit("CUB's sort disagrees with torch.sort")
        a = (tmp, ids, kout, pos, vout)
        variants = {"cub_sort": lambda a=a, bits=bits: mod.sort_pairs(*a, bits),
                    "cub_sort32": lambda a=a: mod.sort_pairs(*a, 32),
                    "cub_rle": lambda a=(tmp, kout, uniq, counts, nruns): mod.run_length(*a)}
        for what, fn in variants.items():
            t, _g = graph_replay_time(fn, torch, reps=20, warm=3)
            rows_out.append({"gpu": gpu, "bags": B, "lookups": L, "rows": R, "dim": DIM, "what": what,
                             "time_s": t, "reps": 20})
            print(f"{B:7d} x {L:3d} rows {R:9d} bits {bits:2d} {what:10s} {t * 1e6:9.1f} us", flush=True)
        del ids, pos, kout, vout, tmp, uniq, counts
        torch.cuda.empty_cache()
    out = Path(out_dir) / f"embedding_sort_{gpu}.csv"
    with out.open("w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator="\n")
        wr.writeheader()
        wr.writerows(rows_out)
    return out


def predict(csv_path: str, model: str, topology: str, out: str | None) -> Path:
    """Per measured case: the index calculation measured (CUB's sort + run-length encode from
    ``embedding_sort_<gpu>.csv`` beside the CSV when it is there, else ``torch.sort``), the fastest update
    (``best_update_s``; ``best_variant``: ``update`` is one id per program, ``update_bB_wW`` the blocked kernel),
    PyTorch's sparse backward + Adagrad (``torch_bwd_s`` = ``torch_step - torch_fwd``, when measured); simfuse's
    kernels for the shard (:func:`simfuse.workloads.dlrm_kernels.sparse_update_works`, launch latency included:
    ``sim_index_s`` the sort and encode, ``sim_update_s`` the update) and the ratios.  Nothing is fitted."""
    import dataclasses

    import pandas as pd

    from simfuse.engine.compute import simulate_kernel
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.dlrm_kernels import sparse_update_works

    system = System.load(topology)
    spec = dataclasses.replace(load_workload(model), embedding_comm_dtype="fp16", optimizer_state_factor=1.0)
    df = pd.read_csv(csv_path)
    key = ["gpu", "bags", "lookups", "rows", "dim"]
    sort_csv = [Path(csv_path).with_name(f"embedding_sort_{g}.csv") for g in df["gpu"].unique()]
    sort_csv = [p for p in sort_csv if p.is_file()]
    if sort_csv:
        df = pd.concat([df] + [pd.read_csv(p) for p in sort_csv], ignore_index=True)
    piv = df.pivot_table(index=key, columns="what", values="time_s")
    upd_cols = [c for c in piv.columns if c == "update" or str(c).startswith("update_b")]
    rows = []
    for (gpu, B, L, R, D), r in piv.iterrows():
        works = sparse_update_works("emb_update", spec, int(B), [(int(R), float(L), int(D))])
        times = {name: simulate_kernel(w, system.cost).time_s for name, w in works}
        sim_update = times["emb_update"]
        sim_index = sum(times.values()) - sim_update
        upd = r[upd_cols].dropna()
        best = float(upd.min())
        cub = "cub_sort" in r and pd.notna(r["cub_sort"])
        index = float(r["cub_sort"]) + float(r["cub_rle"]) if cub else float(r["sort"])
        meas = index + best
        row = {"gpu": gpu, "bags": B, "lookups": L, "rows": R, "dim": D,
               "torch_sort_s": float(r["sort"]), "index_source": "cub_sort+cub_rle" if cub else "torch.sort",
               "index_s": index, "update_s": float(r["update"]), "best_update_s": best,
               "best_variant": str(upd.idxmin()), "measured_s": meas,
               "sim_index_s": sim_index, "sim_update_s": sim_update, "sim_s": sim_index + sim_update,
               "sim_index_over_index": sim_index / index, "sim_update_over_best_update": sim_update / best,
               "sim_over_measured": (sim_index + sim_update) / meas}
        if "torch_step" in r and "torch_fwd" in r and pd.notna(r["torch_step"]) and pd.notna(r["torch_fwd"]):
            row["torch_bwd_s"] = float(r["torch_step"]) - float(r["torch_fwd"])
            row["torch_bwd_over_measured"] = row["torch_bwd_s"] / meas
        rows.append(row)
    res = pd.DataFrame(rows)
    dest = Path(out) if out else Path(csv_path).with_name(Path(csv_path).stem + "_vs_sim.csv")
    res.to_csv(dest, index=False)
    print(res.to_string(index=False))
    return dest


def main(argv=None) -> int:
    from dlrm_dense_step import measure_predict_main

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["measure-sort"]:  # ``measure-sort OUT_DIR`` (GPU and nvcc): CUB's sort and run-length encode
        if len(argv) != 2:
            raise SystemExit("usage: embedding_backward.py measure-sort OUT_DIR")
        Path(argv[1]).mkdir(parents=True, exist_ok=True)
        measure_sort(argv[1])
        return 0
    return measure_predict_main(argv, __doc__, measure, predict, str(ROOT / "models/dlrm_dcnv2_mlperf_hugectr.yaml"))


if __name__ == "__main__":
    sys.exit(main())
