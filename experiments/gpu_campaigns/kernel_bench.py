# ruff: noqa: B023  (benchmark closures capture loop variables and are consumed within the same iteration)
"""Benchmark simfuse's fused Triton kernels against their unfused baselines (run on the H200).

Writes into ``--out``:
  kernel_bench_h200.csv       fused / baseline / compute / torch timings with the target of each figure
  h200_kernel_heldout.csv     median per-launch times of untraced (held-out) shapes
  traces_<kernel>.csv.gz      per-program traces (docs/trace_format.md), every rank, several launches per shape
  torch_profiler_h200.json.gz chrome trace of a few torch baseline ops
  log.txt                     everything printed

Timing: every operation is run over several input sets (together larger than the 60 MiB L2, random
data), warmed up, captured in a CUDA graph when possible (otherwise launched directly) and timed with
CUDA events; medians (p10, p90) over many replays, divided by the number of input sets.
``--smoke`` runs the whole script on tiny shapes (CPU + Triton interpreter when no GPU).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if "--smoke" in sys.argv and not torch.cuda.is_available():  # the CPU smoke run needs Triton's interpreter,
    os.environ.setdefault("TRITON_INTERPRET", "1")  # set before the kernels are compiled (imported)

import triton  # noqa: E402

import simfuse.kernels as sk  # noqa: E402
from simfuse.kernels.timing import graph_bench, quantiles  # noqa: E402
from simfuse.kernels.trace import format_shape  # noqa: E402

LOG = None
COPY_CEIL = 4.27e12  # bytes/s, docs/sources.md S9 (re-measured below)


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG:
        LOG.write(s + "\n")
        LOG.flush()


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def sweep_configs(label, cfgs, make_config, calls_for, reps):
    """Time every configuration ``make_config(*cfg)`` with ``bench(calls_for(config))``; configurations that fail
    to compile or run are logged and skipped.  Returns ``[(median_s, cfg, stats), ...]``, fastest first."""
    res = []
    for cfg in cfgs:
        c = make_config(*cfg)
        try:
            t = bench(calls_for(c), reps=reps)
        except Exception as e:  # noqa: BLE001
            log(f"   {label} config failed", cfg, repr(e)[:200])
            continue
        res.append((t[0], cfg, t))
    res.sort()
    return res


def bench(calls, reps=30, graph=True):
    """Median/p10/p90 seconds per call over the input sets in ``calls`` (list of closures), and the method."""
    def run():
        for c in calls:
            c()
    t = graph_bench(run, reps=reps, per_call=len(calls), fallback=True, host_reps=max(2, reps // 10), graph=graph,
                    on_fallback=lambda e: log("   graph capture failed, timing direct launches:", e))
    return t.as_tuple() + (t.method,)


def relerr(out, ref):
    out = out.detach().cpu().double()
    if torch.isnan(out).any():
        return float("nan")
    return float((out - ref).norm() / ref.norm())


class Results:
    def __init__(self, env):
        self.env = env
        self.rows = []
        self.heldout = []

    def add(self, op, variant, backend, world, dtype, shape, config, t, metric, value, target="", method=""):
        med, p10, p90 = t[:3]
        row = dict(operator=op, variant=variant, backend=backend, world_size=world, dtype=dtype, shape=shape,
                   config=config, median_us=round(med * 1e6, 2), p10_us=round(p10 * 1e6, 2),
                   p90_us=round(p90 * 1e6, 2), metric=metric, value=round(value, 4), target=target,
                   timing=method or (t[3] if len(t) > 3 else ""), **self.env)
        self.rows.append(row)
        log(f"   {op:22s} {variant:9s} {backend:9s} W={world} {dtype:4s} {shape:40s} {med*1e6:9.1f} us "
            f"{value:8.3f} {metric} {target}")

    def write(self, out):
        if self.rows:
            with open(out / "kernel_bench_h200.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
                w.writeheader()
                w.writerows(self.rows)
        if self.heldout:
            with open(out / "h200_kernel_heldout.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(self.heldout[0]))
                w.writeheader()
                w.writerows(self.heldout)


def dname(dtype):
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


# ------------------------------------------------------------------------------------------ inputs
def emb_inputs(world, batch, dim, pooling, rows, dtype, dev, nsets, gen, tables=1):
    weights = [torch.randn(rows * tables, dim, device=dev, dtype=torch.float32, generator=gen).to(dtype)
               for _ in range(world)]
    toffs = [torch.arange(tables + 1, device=dev, dtype=torch.int64) * rows for _ in range(world)]
    sets = []
    for _ in range(nsets):
        ix = [torch.randint(0, rows, (tables * batch * pooling,), device=dev, generator=gen) for _ in range(world)]
        of = [torch.arange(tables * batch + 1, device=dev, dtype=torch.int64) * pooling for _ in range(world)]
        sets.append((ix, of))
    return weights, toffs, sets


def gemv_inputs(world, tokens, n, k, dtype, dev, nsets, gen):
    kr = k // world
    return [([torch.randn(tokens, kr, device=dev, generator=gen).to(dtype) for _ in range(world)],
             [torch.randn(n, kr, device=dev, generator=gen).to(dtype) for _ in range(world)]) for _ in range(nsets)]


def gemm_inputs(world, m, n, k, dtype, dev, nsets, gen):
    mr = m // world
    counts = [[mr // world + (1 if s < mr % world else 0) for s in range(world)] for _ in range(world)]
    dr, dw, recv = sk.moe_routing(counts)
    dr = [t.to(dev) for t in dr]
    dw = [t.to(dev) for t in dw]
    sets = [([torch.randn(mr, k, device=dev, generator=gen).to(dtype) for _ in range(world)],
             [(torch.randn(k, n, device=dev, generator=gen) / k ** 0.5).to(dtype) for _ in range(world)])
            for _ in range(nsets)]
    return sets, dr, dw, recv


# ------------------------------------------------------------------------------------------ sections
def ceilings(R, S, dev):
    global COPY_CEIL
    n = S["copy_elems"]
    srcs = [torch.randn(n, device=dev) for _ in range(2)]
    dsts = [torch.empty_like(s) for s in srcs]
    # direct launches: inside a CUDA graph a device-to-device copy becomes a (slower) copy-engine node
    t = bench([lambda s=s, d=d: d.copy_(s) for s, d in zip(srcs, dsts, strict=False)], reps=S["reps"], graph=False)
    bw = 2 * n * 4 / t[0]
    if dev.type == "cuda":
        COPY_CEIL = bw
    R.add("copy", "torch", "-", 1, "fp32", f"bytes={n*4}", "", t, "TB/s", bw / 1e12, "ceiling")
    del srcs, dsts


def correctness(R, S, dev, gen):
    """Small shapes, every operator and baseline at W=2 and 4, against float64 references."""
    bad = []
    for world, conc in [(w_, c_) for w_ in S["check_worlds"] for c_ in (False, True)]:
        grp = sk.EmulatedGroup(world, dev, concurrent=conc)
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            w, to, sets = emb_inputs(world, 8 * world, 32, 5, 50, dtype, dev, 1, gen, tables=2)
            ix, of = sets[0]
            ref = sk.embedding_reference(w, ix, of, to)
            for name, fn in (("fused", sk.embedding_all_to_all), ("baseline", sk.embedding_all_to_all_baseline)):
                out = fn(grp, w, ix, of, to)
                e = max(relerr(o, r) for o, r in zip(out, ref, strict=False))
                if not e <= tol:
                    bad.append(("emb", name, world, dtype, e))
                log(f"   check emb {name} W={world} conc={conc} {dname(dtype)} rel={e:.2e}")
            sets = gemv_inputs(world, 3, 200, 64 * world, dtype, dev, 1, gen)
            xs, ws = sets[0]
            ref = sk.gemv_reference(xs, ws)
            for name, fn in (("fused", sk.gemv_all_reduce), ("baseline", sk.gemv_all_reduce_baseline)):
                out = fn(grp, xs, ws, config=sk.GemvConfig(block_n=32, block_k=64, split_k=2))
                e = max(relerr(o, ref) for o in out)
                if not e <= tol:
                    bad.append(("gemv", name, world, dtype, e))
                log(f"   check gemv {name} W={world} conc={conc} {dname(dtype)} rel={e:.2e}")
            sets, dr, dw, recv = gemm_inputs(world, 96 * world, 96, 64, dtype, dev, 1, gen)
            a, b = sets[0]
            ref = sk.gemm_reference(a, b, dr, dw, recv)
            for name, fn in (("fused", sk.gemm_all_to_all), ("baseline", sk.gemm_all_to_all_baseline)):
                out = fn(grp, a, b, dr, dw, recv, config=sk.GemmConfig(64, 64, 32, 4, 4, 2))
                e = max(relerr(o[:recv[d]], ref[d]) for d, o in enumerate(out))
                if not e <= tol:
                    bad.append(("gemm", name, world, dtype, e))
                log(f"   check gemm {name} W={world} conc={conc} {dname(dtype)} rel={e:.2e}")
    log("CORRECTNESS:", "all ok" if not bad else f"FAILURES {bad}")
    return not bad


def bench_embedding(R, S, dev, gen):
    batch, pool, rows = S["emb_batch"], S["emb_pool"], S["emb_rows"]
    best = {}
    for dtype, dim in S["emb_cases"]:
        dn = dname(dtype)
        w, to, sets = emb_inputs(1, batch, dim, pool, rows, dtype, dev, S["nsets"], gen)
        rbytes = batch * pool * dim * w[0].element_size()
        shape = format_shape({"bags": batch, "dim": dim, "pooling": pool, "rows": rows, "tables": 1})
        # torch embedding_bag (compute only)
        t = bench([lambda ix=ix, of=of: F.embedding_bag(ix[0], w[0], of[0], mode="sum", include_last_offset=True)
                   for ix, of in sets], reps=S["reps"])
        R.add("embedding_all_to_all", "torch", "-", 1, dn, shape, "F.embedding_bag", t, "TB/s", rbytes / t[0] / 1e12)
        # sweep on the fused kernel at W=1
        grp = sk.EmulatedGroup(1, dev)
        wsp = sk.Workspace(grp)

        def emb_calls(c):
            out = grp.alloc((batch, dim), dtype)
            return [lambda ix=ix, of=of: sk.embedding_all_to_all(grp, w, ix, of, to, out=out, workspace=wsp,
                                                                  config=c, validate=False) for ix, of in sets]

        res = sweep_configs("emb", S["emb_sweep"] if not best else S["emb_sweep_small"], sk.EmbeddingConfig,
                            emb_calls, S["reps"] // 2)
        for t0, cfg, t in res[:3]:
            R.add("embedding_all_to_all", "fused-sweep", "emulated", 1, dn, shape, str(cfg), t, "TB/s", rbytes / t0 / 1e12,
                  ">=3.6 TB/s" if (dtype, dim) == (torch.float32, 128) else "")
        best[(dtype, dim)] = sk.EmbeddingConfig(*res[0][1])
        torch.cuda.empty_cache() if dev.type == "cuda" else None
    # fused vs baseline across emulated world sizes (each rank: one table, the global batch)
    for dtype, dim in S["emb_cases"]:
        dn = dname(dtype)
        c = best[(dtype, dim)]
        for world, conc in [(w_, c_) for w_ in S["worlds"] for c_ in (True, False)]:
            sfx = "" if conc else "-seq"
            w, to, sets = emb_inputs(world, batch, dim, pool, rows, dtype, dev, S["nsets"], gen)
            grp = sk.EmulatedGroup(world, dev, concurrent=conc)
            wsp = sk.Workspace(grp)
            out = grp.alloc((batch // world, world * dim), dtype)
            out2 = grp.alloc((batch // world, world * dim), dtype)
            rbytes = world * batch * pool * dim * w[0].element_size()
            shape = format_shape({"bags": batch, "dim": dim, "pooling": pool, "rows": rows, "tables": 1})
            tf = bench([lambda ix=ix, of=of: sk.embedding_all_to_all(grp, w, ix, of, to, out=out, workspace=wsp,
                                                                      config=c, validate=False)
                        for ix, of in sets], reps=S["reps"])
            tb = bench([lambda ix=ix, of=of: sk.embedding_all_to_all_baseline(grp, w, ix, of, to, config=c, out=out2,
                                                                               validate=False)
                        for ix, of in sets], reps=S["reps"])
            tgt = ">=3.6 TB/s" if (dtype, dim) == (torch.float32, 128) else ""
            R.add("embedding_all_to_all", "fused" + sfx, "emulated", world, dn, shape, str(c), tf, "TB/s",
                  rbytes / tf[0] / 1e12, tgt)
            R.add("embedding_all_to_all", "baseline" + sfx, "emulated", world, dn, shape, str(c), tb, "TB/s",
                  rbytes / tb[0] / 1e12, f"fused saves {100 * (1 - tf[0] / tb[0]):.1f}%")
    return best


def bench_gemv(R, S, dev, gen):
    best = {}
    for n, k in S["gemv_shapes"]:
        for tokens in S["gemv_tokens"]:
            sets = gemv_inputs(1, tokens, n, k, torch.bfloat16, dev, S["nsets"], gen)
            wbytes = n * k * 2
            shape = format_shape({"n": n, "k": k, "tokens": tokens})
            t = bench([lambda x=x, w=w: torch.matmul(x[0], w[0].T) for x, w in sets], reps=S["reps"])
            R.add("gemv_all_reduce", "torch", "-", 1, "bf16", shape, "torch.matmul", t, "TB/s", wbytes / t[0] / 1e12)
            grp = sk.EmulatedGroup(1, dev)
            wsp = sk.Workspace(grp)
            res = sweep_configs(
                "gemv", S["gemv_sweep"], sk.GemvConfig,
                lambda c: [lambda x=x, w=w: sk.gemv_compute(grp, x, w, config=c, workspace=wsp) for x, w in sets],
                S["reps"] // 2)
            for t0, cfg, t in res[:3]:
                R.add("gemv_all_reduce", "compute-sweep", "emulated", 1, "bf16", shape, str(cfg), t, "TB/s",
                      wbytes / t0 / 1e12, f">={0.85 * COPY_CEIL / 1e12:.2f} TB/s")
            best[(n, k, tokens)] = sk.GemvConfig(*res[0][1])
    for n, k in S["gemv_shapes"]:
        for tokens in S["gemv_tokens"]:
            c = best[(n, k, tokens)]
            wbytes = n * k * 2
            shape = format_shape({"n": n, "k": k, "tokens": tokens})
            for world, conc in [(1, False)] + [(w_, c_) for w_ in S["worlds"] for c_ in (True, False)]:
                sfx = "" if conc or world == 1 else "-seq"
                sets = gemv_inputs(world, tokens, n, k, torch.bfloat16, dev, S["nsets"], gen)
                grp = sk.EmulatedGroup(world, dev, concurrent=conc)
                wsp = sk.Workspace(grp)
                out = grp.alloc((tokens, n), torch.bfloat16)
                # per-rank K is k/world: keep the split-K product near the tuned one
                cw = sk.GemvConfig(c.block_n, c.block_k, max(1, c.split_k // world), c.num_warps, c.num_stages)
                tf = bench([lambda x=x, w=w: sk.gemv_all_reduce(grp, x, w, out=out, workspace=wsp, config=cw)
                            for x, w in sets], reps=S["reps"])
                R.add("gemv_all_reduce", "fused" + sfx, "emulated", world, "bf16", shape, str(cw), tf, "TB/s",
                      wbytes / tf[0] / 1e12, f">={0.85 * COPY_CEIL / 1e12:.2f} TB/s")
                if world > 1:
                    wsb = sk.Workspace(grp)
                    tb = bench([lambda x=x, w=w: sk.gemv_all_reduce_baseline(grp, x, w, config=cw, workspace=wsb)
                                for x, w in sets], reps=S["reps"])
                    R.add("gemv_all_reduce", "baseline" + sfx, "emulated", world, "bf16", shape, str(cw), tb, "TB/s",
                          wbytes / tb[0] / 1e12, f"fused saves {100 * (1 - tf[0] / tb[0]):.1f}%")
    return best


def bench_gemm(R, S, dev, gen):
    best = {}
    for m, n, k in S["gemm_shapes"]:
        flops = 2 * m * n * k
        shape = format_shape({"m": m, "n": n, "k": k})
        sets, dr, dw, recv = gemm_inputs(1, m, n, k, torch.bfloat16, dev, S["nsets"], gen)
        tt = bench([lambda a=a, b=b: torch.matmul(a[0], b[0]) for a, b in sets], reps=S["reps"])
        R.add("gemm_all_to_all", "torch", "-", 1, "bf16", shape, "torch.matmul", tt, "TFLOP/s", flops / tt[0] / 1e12)
        grp = sk.EmulatedGroup(1, dev)
        res = sweep_configs(
            "gemm", S["gemm_sweep"], sk.GemmConfig,
            lambda c: [lambda a=a, b=b: sk.gemm_compute(grp, a, b, config=c) for a, b in sets], S["reps"] // 2)
        for t0, cfg, t in res[:3]:
            R.add("gemm_all_to_all", "compute-sweep", "emulated", 1, "bf16", shape, str(cfg), t, "TFLOP/s",
                  flops / t0 / 1e12, f">={0.9 * flops / tt[0] / 1e12:.0f} TFLOP/s (90% torch)")
        best[(m, n, k)] = sk.GemmConfig(*res[0][1])
        c = best[(m, n, k)]
        for world, conc in [(1, False)] + [(w_, c_) for w_ in S["worlds"] for c_ in (True, False)]:
            sfx = "" if conc or world == 1 else "-seq"
            sets, dr, dw, recv = gemm_inputs(world, m, n, k, torch.bfloat16, dev, S["nsets"], gen)
            grp = sk.EmulatedGroup(world, dev, concurrent=conc)
            wsp = sk.Workspace(grp)
            out = grp.alloc((max(recv), n), torch.bfloat16)
            out2 = grp.alloc((max(recv), n), torch.bfloat16)
            tf = bench([lambda a=a, b=b: sk.gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=c,
                                                            validate=False) for a, b in sets], reps=S["reps"])
            R.add("gemm_all_to_all", "fused" + sfx, "emulated", world, "bf16", shape, str(c), tf, "TFLOP/s",
                  flops / tf[0] / 1e12, f">={0.9 * flops / tt[0] / 1e12:.0f} TFLOP/s")
            if world > 1:
                plan = sk.scatter_plan(grp, dr, dw)
                tb = bench([lambda a=a, b=b: sk.gemm_all_to_all_baseline(grp, a, b, dr, dw, recv, config=c, out=out2,
                                                                         plan=plan, validate=False)
                            for a, b in sets], reps=S["reps"])
                R.add("gemm_all_to_all", "baseline" + sfx, "emulated", world, "bf16", shape, str(c), tb, "TFLOP/s",
                      flops / tb[0] / 1e12, f"fused saves {100 * (1 - tf[0] / tb[0]):.1f}%")
    return best


def tune(R, S, dev, gen):
    """Focused sweep of the two shapes that missed their targets (GEMV 8192x8192 1 token, GEMM 2048x7168x4096).

    Per candidate configuration: the compute kernel and the fused operator at W=1 (wait included, as in
    the ``fused`` rows), each checked against a float64/fp32 reference on fresh random data (outputs
    poisoned with NaN first), then timed like the main sections (4 input sets, CUDA graph, median of
    ``reps`` replays).  The incumbent configuration is timed first and again last (run-to-run spread).
    """
    ok = True
    n, k = S["tune_gemv_shape"]
    wbytes = n * k * 2
    shape = format_shape({"n": n, "k": k, "tokens": 1})
    gtarget = f">={0.85 * COPY_CEIL / 1e12:.2f} TB/s"
    sets = gemv_inputs(1, 1, n, k, torch.bfloat16, dev, S["nsets"], gen)
    tt = bench([lambda x=x, w=w: torch.matmul(x[0], w[0].T) for x, w in sets], reps=S["reps"])
    R.add("gemv_all_reduce", "torch", "-", 1, "bf16", shape, "torch.matmul", tt, "TB/s", wbytes / tt[0] / 1e12)
    grp = sk.EmulatedGroup(1, dev)
    wsp = sk.Workspace(grp)
    out = grp.alloc((1, n), torch.bfloat16)
    cands = list(S["tune_gemv"]) + [S["tune_gemv"][0]]
    for i, cfg in enumerate(cands):
        c = sk.GemvConfig(*cfg)
        try:
            xs, ws = gemv_inputs(1, 1, n, k, torch.bfloat16, dev, 1, gen)[0]
            ref = (xs[0].double() @ ws[0].double().T)
            yc = sk.gemv_compute(grp, xs, ws, config=c, workspace=wsp)[0].double()
            out.local(0).fill_(float("nan"))
            yf = sk.gemv_all_reduce(grp, xs, ws, out=out, workspace=wsp, config=c)[0].double()
            ec = float("nan") if torch.isnan(yc).any() else float((yc - ref).norm() / ref.norm())
            ef = float("nan") if torch.isnan(yf).any() else float((yf - ref).norm() / ref.norm())
            if not (ec < 1e-2 and ef < 1e-2):
                ok = False
                log("   TUNE CHECK FAILED gemv", cfg, ec, ef)
                continue
            t = bench([lambda x=x, w=w: sk.gemv_compute(grp, x, w, config=c, workspace=wsp) for x, w in sets],
                      reps=S["reps"])
            R.add("gemv_all_reduce", "compute-tune" + ("-again" if i == len(cands) - 1 else ""), "emulated", 1,
                  "bf16", shape, str(c), t, "TB/s", wbytes / t[0] / 1e12, gtarget)
            tf = bench([lambda x=x, w=w: sk.gemv_all_reduce(grp, x, w, out=out, workspace=wsp, config=c)
                        for x, w in sets], reps=S["reps"])
            R.add("gemv_all_reduce", "fused" if i < len(cands) - 1 else "fused-again", "emulated", 1, "bf16", shape,
                  str(c), tf, "TB/s", wbytes / tf[0] / 1e12, gtarget)
            log(f"   relerr compute {ec:.2e} fused {ef:.2e}")
        except Exception as e:  # noqa: BLE001
            log("   gemv tune config failed", cfg, repr(e)[:300])
    del sets, wsp, out
    torch.cuda.empty_cache() if dev.type == "cuda" else None

    m, n, k = S["tune_gemm_shape"]
    flops = 2 * m * n * k
    shape = format_shape({"m": m, "n": n, "k": k})
    sets, dr, dw, recv = gemm_inputs(1, m, n, k, torch.bfloat16, dev, S["nsets"], gen)
    tt = bench([lambda a=a, b=b: torch.matmul(a[0], b[0]) for a, b in sets], reps=S["reps"])
    R.add("gemm_all_to_all", "torch", "-", 1, "bf16", shape, "torch.matmul", tt, "TFLOP/s", flops / tt[0] / 1e12)
    mtarget = f">={0.9 * flops / tt[0] / 1e12:.0f} TFLOP/s"
    grp = sk.EmulatedGroup(1, dev)
    wsp = sk.Workspace(grp)
    out = grp.alloc((max(recv), n), torch.bfloat16)
    cands = list(S["tune_gemm"]) + [S["tune_gemm"][0]]
    for i, cfg in enumerate(cands):
        c = sk.GemmConfig(*cfg)
        try:
            a, b = sets[i % len(sets)]
            ref = a[0].float() @ b[0].float()
            yc = sk.gemm_compute(grp, a, b, config=c)[0].float()
            out.local(0).fill_(float("nan"))
            yf = sk.gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=c, validate=False)[0]
            yf = yf.float()
            ec = float("nan") if torch.isnan(yc).any() else float((yc - ref).norm() / ref.norm())
            ef = float("nan") if torch.isnan(yf).any() else float((yf - ref).norm() / ref.norm())
            if not (ec < 1e-2 and ef < 1e-2):
                ok = False
                log("   TUNE CHECK FAILED gemm", cfg, ec, ef)
                continue
            del yc, yf, ref
            t = bench([lambda a=a, b=b: sk.gemm_compute(grp, a, b, config=c) for a, b in sets], reps=S["reps"])
            R.add("gemm_all_to_all", "compute-tune" + ("-again" if i == len(cands) - 1 else ""), "emulated", 1,
                  "bf16", shape, str(c), t, "TFLOP/s", flops / t[0] / 1e12, mtarget)
            tf = bench([lambda a=a, b=b: sk.gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=c,
                                                            validate=False) for a, b in sets], reps=S["reps"])
            R.add("gemm_all_to_all", "fused" if i < len(cands) - 1 else "fused-again", "emulated", 1, "bf16", shape,
                  str(c), tf, "TFLOP/s", flops / tf[0] / 1e12, mtarget)
            log(f"   relerr compute {ec:.2e} fused {ef:.2e}")
        except Exception as e:  # noqa: BLE001
            log("   gemm tune config failed", cfg, repr(e)[:300])
    tt2 = bench([lambda a=a, b=b: torch.matmul(a[0], b[0]) for a, b in sets], reps=S["reps"])
    R.add("gemm_all_to_all", "torch-again", "-", 1, "bf16", shape, "torch.matmul", tt2, "TFLOP/s",
          flops / tt2[0] / 1e12)
    log("TUNE CORRECTNESS:", "all ok" if ok else "FAILURES (see above)")


def _work_totals(tr):
    """(FLOP, bytes) of one traced launch, summed over its programs exactly as the tracer counts them."""
    def tot(v):
        return float(v) * tr.grid if isinstance(v, (int, float)) else float(sum(v))
    return tot(tr.flops_per_program), tot(tr.bytes_per_program)


def traces_and_heldout(R, S, dev, gen, out_dir, best):
    """Per-program traces of EVERY rank of an emulated group at traced shapes; medians at held-out shapes.

    Traced shapes: per call one rank's launch is traced (``TraceRecorder.rank``); after one warm-up call per rank
    and variant (scratch recorder: compilation and module load stay out of the record), ``trace_reps`` calls per
    rank and variant are recorded, rotating over ``nsets`` input sets (so repeats do not re-read a warm L2).
    ``simfuse calibrate`` uses the median launch per (shape, rank) and the mean over ranks.

    Held-out shapes: the ranks' launches back to back in one CUDA graph, time / world = mean per-rank launch.
    The fused operators are timed with ``wait=False`` (the fused kernels only, as traced; the consumers' wait
    kernels are not part of the traced quantity) -- the time with the wait kernels is kept in
    ``median_with_wait_s``.  ``traffic_bytes``/``traffic_flops``: the launch's per-program bytes/FLOP summed over the grid
    exactly as the tracer counts them (a scratch-traced launch of rank 0), the traces' definition of
    ``bytes_per_program``; ``bytes`` stays the unique footprint (A+B+C for GEMM).
    """
    world = S["trace_world"]
    reps = S["trace_reps"]
    grp = sk.EmulatedGroup(world, dev)
    date = R.env["date"]
    devname = R.env["device"]

    def held(kernel, variant, dtype, shape, grid, warps, t, flops, byts, traffic, t_wait=None):
        R.heldout.append(dict(kernel=kernel, variant=variant, backend="emulated", world_size=world, dtype=dtype,
                              shape=shape, grid=grid, num_warps=warps, median_s=t[0], p10_s=t[1], p90_s=t[2],
                              flops=flops, bytes=byts, device=devname, date=date, traffic_bytes=traffic[1],
                              traffic_flops=traffic[0], median_with_wait_s=t_wait[0] if t_wait else "",
                              timing="graph, ranks back to back, time/world; fused: wait=False"))

    def traced_calls(calls):
        """calls: {variant: fn(set_index, trace)}; one warm-up per rank and variant, then ``reps`` recorded."""
        for r in range(world):
            scratch = sk.TraceRecorder(rank=r)
            for fn in calls.values():
                fn(0, scratch)
            rec.rank = r
            for i in range(reps):
                for fn in calls.values():
                    fn(i, rec)

    def traffic_of(fn):
        scratch = sk.TraceRecorder(rank=0)
        fn(scratch)
        return _work_totals(scratch.traces[-1])

    def first_program_us(rec):
        return [round((min(t.start_ns) - t.launch_ns) / 1e3, 1) for t in rec.traces]

    # embedding
    ec = best.get("emb") or sk.EmbeddingConfig()
    rec = sk.TraceRecorder(prefix="h200")
    for dim, batch, traced in S["emb_trace_shapes"]:
        w, to, sets = emb_inputs(world, batch, dim, 32, S["trace_rows"], torch.float32, dev, S["nsets"], gen)
        if traced:
            ns = len(sets)
            traced_calls({
                "fused": lambda i, tr: sk.embedding_all_to_all(grp, w, *sets[i % ns], to, config=ec, trace=tr),
                "compute": lambda i, tr: sk.embedding_compute(grp, w, *sets[i % ns], to, config=ec, trace=tr)})
        else:
            wsp = sk.Workspace(grp)
            out = grp.alloc((batch // world, world * dim), torch.float32)
            ix0, of0 = sets[0]
            trf = traffic_of(lambda tr: sk.embedding_all_to_all(grp, w, ix0, of0, to, config=ec, trace=tr))
            trc = traffic_of(lambda tr: sk.embedding_compute(grp, w, ix0, of0, to, config=ec, trace=tr))
            tf = bench([lambda ix=ix, of=of: sk.embedding_all_to_all(grp, w, ix, of, to, out=out, workspace=wsp,
                                                                      config=ec, validate=False, wait=False)
                        for ix, of in sets], reps=S["reps"])
            tw = bench([lambda ix=ix, of=of: sk.embedding_all_to_all(grp, w, ix, of, to, out=out, workspace=wsp,
                                                                      config=ec, validate=False)
                        for ix, of in sets], reps=S["reps"])
            tc = bench([lambda ix=ix, of=of: sk.embedding_compute(grp, w, ix, of, to, config=ec, validate=False)
                        for ix, of in sets], reps=S["reps"])
            grid = -(-batch // world // ec.bags_per_program) * world
            shape = format_shape({"bags": batch, "dim": dim, "mode": "sum", "tables": 1, "rows": S["trace_rows"],
                                  "lookups": batch * 32, "bags_per_program": ec.bags_per_program})
            fl = batch * 32 * dim
            by = batch * 32 * (dim * 4 + 8) + batch * (dim * 4 + 16)
            for var, t, trf_, t_w in (("fused", tf, trf, tw), ("compute", tc, trc, None)):
                held("embedding_all_to_all", var, "fp32", shape, grid, ec.num_warps, [x / world for x in t[:3]], fl, by,
                     trf_, [x / world for x in t_w[:3]] if t_w else None)
    n = rec.write(out_dir / "traces_embedding_all_to_all.csv.gz")
    log(f"   embedding traces: {n} rows, {len(rec.traces)} launches; launch->first program (us):",
        first_program_us(rec))
    # gemv
    rec = sk.TraceRecorder(prefix="h200")
    for n_, traced in S["gemv_trace_shapes"]:
        k = S["gemv_trace_k"]
        gc = best.get(("gemv", 8192)) or sk.GemvConfig(block_n=64, block_k=256, split_k=1)
        sets = gemv_inputs(world, 1, n_, k, torch.bfloat16, dev, S["nsets"], gen)
        if traced:
            ns = len(sets)
            traced_calls({
                "fused": lambda i, tr: sk.gemv_all_reduce(grp, *sets[i % ns], config=gc, trace=tr),
                "compute": lambda i, tr: sk.gemv_compute(grp, *sets[i % ns], config=gc, trace=tr)})
        else:
            wsp = sk.Workspace(grp)
            out = grp.alloc((1, n_), torch.bfloat16)
            x0, w0 = sets[0]
            trf = traffic_of(lambda tr: sk.gemv_all_reduce(grp, x0, w0, config=gc, trace=tr))
            trc = traffic_of(lambda tr: sk.gemv_compute(grp, x0, w0, config=gc, trace=tr))
            tf = bench([lambda x=x, w=w: sk.gemv_all_reduce(grp, x, w, out=out, workspace=wsp, config=gc, wait=False)
                        for x, w in sets], reps=S["reps"])
            tw = bench([lambda x=x, w=w: sk.gemv_all_reduce(grp, x, w, out=out, workspace=wsp, config=gc)
                        for x, w in sets], reps=S["reps"])
            tc = bench([lambda x=x, w=w: sk.gemv_compute(grp, x, w, config=gc, workspace=wsp) for x, w in sets],
                       reps=S["reps"])
            shape = format_shape({"n": n_, "k": k // world, "tokens": 1, "block_n": gc.block_n, "split_k": gc.split_k})
            grid = -(-n_ // gc.block_n) * gc.split_k
            for var, t, trf_, t_w in (("fused", tf, trf, tw), ("compute", tc, trc, None)):
                held("gemv_all_reduce", var, "bf16", shape, grid, gc.num_warps, [x_ / world for x_ in t[:3]],
                     2 * n_ * k // world, n_ * k // world * 2, trf_, [x_ / world for x_ in t_w[:3]] if t_w else None)
    n = rec.write(out_dir / "traces_gemv_all_reduce.csv.gz")
    log(f"   gemv traces: {n} rows, {len(rec.traces)} launches; launch->first program (us):", first_program_us(rec))
    # gemm
    rec = sk.TraceRecorder(prefix="h200")
    gm = best.get("gemm") or sk.GemmConfig()
    nn, kk = S["gemm_trace_nk"]
    for m, traced in S["gemm_trace_shapes"]:
        sets, dr, dw, recv = gemm_inputs(world, m, nn, kk, torch.bfloat16, dev, S["nsets"], gen)
        if traced:
            ns = len(sets)
            traced_calls({
                "fused": lambda i, tr: sk.gemm_all_to_all(grp, *sets[i % ns], dr, dw, recv, config=gm, trace=tr),
                "compute": lambda i, tr: sk.gemm_compute(grp, *sets[i % ns], config=gm, trace=tr)})
        else:
            wsp = sk.Workspace(grp)
            out = grp.alloc((max(recv), nn), torch.bfloat16)
            a0, b0 = sets[0]
            trf = traffic_of(lambda tr: sk.gemm_all_to_all(grp, a0, b0, dr, dw, recv, config=gm, trace=tr))
            trc = traffic_of(lambda tr: sk.gemm_compute(grp, a0, b0, config=gm, trace=tr))
            tf = bench([lambda a=a, b=b: sk.gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=gm,
                                                            validate=False, wait=False) for a, b in sets],
                       reps=S["reps"])
            tw = bench([lambda a=a, b=b: sk.gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=gm,
                                                            validate=False) for a, b in sets], reps=S["reps"])
            tc = bench([lambda a=a, b=b: sk.gemm_compute(grp, a, b, config=gm) for a, b in sets], reps=S["reps"])
            mr = m // world
            shape = format_shape({"m": mr, "n": nn, "k": kk, "block_m": gm.block_m, "block_n": gm.block_n,
                                  "block_k": gm.block_k})
            grid = -(-mr // gm.block_m) * -(-nn // gm.block_n)
            for var, t, trf_, t_w in (("fused", tf, trf, tw), ("compute", tc, trc, None)):
                held("gemm_all_to_all", var, "bf16", shape, grid, gm.num_warps, [x / world for x in t[:3]],
                     2 * mr * nn * kk, (mr * kk + kk * nn + mr * nn) * 2, trf_,
                     [x / world for x in t_w[:3]] if t_w else None)
    n = rec.write(out_dir / "traces_gemm_all_to_all.csv.gz")
    log(f"   gemm traces: {n} rows, {len(rec.traces)} launches; launch->first program (us):", first_program_us(rec))


def profiler(S, dev, out_dir, gen):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    w = torch.randn(S["trace_rows"], 128, device=dev, generator=gen)
    ix = torch.randint(0, S["trace_rows"], (4096 * 32,), device=dev, generator=gen)
    of = torch.arange(4097, device=dev) * 32
    a = torch.randn(1024, 1024, device=dev, generator=gen).to(torch.bfloat16)
    x = torch.randn(1, 4096, device=dev, generator=gen).to(torch.bfloat16)
    wv = torch.randn(4096, 4096, device=dev, generator=gen).to(torch.bfloat16)
    for _ in range(2):
        F.embedding_bag(ix, w, of, mode="sum", include_last_offset=True)
    sync()
    with profile(activities=acts) as prof:
        for _ in range(3):
            F.embedding_bag(ix, w, of, mode="sum", include_last_offset=True)
            torch.matmul(a, a)
            torch.matmul(x, wv.T)
            w.clone()
        sync()
    tmp = Path(tempfile.mkdtemp()) / "p.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as fi, gzip.open(out_dir / "torch_profiler_h200.json.gz", "wb") as fo:
        shutil.copyfileobj(fi, fo)


# ------------------------------------------------------------------------------------------ symmetric
def _sym_worker(rank, world, init_file, result_file, smoke):
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    out = []
    try:
        grp = sk.SymmetricGroup()
        dev = grp.device

        def timeit(fn, reps=20):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            ts = []
            for _ in range(reps):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t0)
            return quantiles(ts)

        def rec(op, variant, shape, t, err):
            out.append(dict(op=op, variant=variant, world=world, shape=shape, t=t, err=err))

        # inputs of ALL ranks from fixed seeds (every process can compute the reference)
        g = torch.Generator(device="cpu").manual_seed(1234)
        # embedding
        batch, dim, pool, rows = (64, 32, 4, 100) if smoke else (16384, 128, 32, 1 << 18)
        allw = [torch.randn(rows, dim, generator=g) for _ in range(world)]
        allix = [torch.randint(0, rows, (batch * pool,), generator=g) for _ in range(world)]
        of = torch.arange(batch + 1) * pool
        ref = sk.embedding_reference(allw, allix, [of] * world)[rank]
        w, ix, ofd = allw[rank].to(dev), allix[rank].to(dev), of.to(dev)
        to = torch.tensor([0, rows], device=dev)
        ws = sk.Workspace(grp)
        shape = format_shape({"bags": batch, "dim": dim, "pooling": pool, "rows": rows})
        for mode in ("host", "device"):
            f = lambda mode=mode: sk.embedding_all_to_all(  # noqa: E731
                grp, [w], [ix], [ofd], [to], tables_per_rank=[1] * world, workspace=ws, validate=False, wait=mode)[0]
            e = relerr(f(), ref)
            rec("embedding_all_to_all", f"fused-wait-{mode}", shape, timeit(f), e)
        outb = grp.alloc((batch // world, world * dim), torch.float32)
        for coll in ("copy", "torch"):
            fb = lambda coll=coll: sk.embedding_all_to_all_baseline(  # noqa: E731
                grp, [w], [ix], [ofd], [to], tables_per_rank=[1] * world, collective=coll, out=outb, validate=False)[0]
            try:
                e = relerr(fb(), ref)
                rec("embedding_all_to_all", f"baseline-{coll}", shape, timeit(fb), e)
            except Exception as ex:  # noqa: BLE001
                rec("embedding_all_to_all", f"baseline-{coll}", shape, None, repr(ex)[:200])
        # gemv
        n, k, tokens = (256, 128, 2) if smoke else (8192, 8192, 1)
        kr = k // world
        allx = [torch.randn(tokens, kr, generator=g).to(torch.bfloat16) for _ in range(world)]
        allwv = [torch.randn(n, kr, generator=g).to(torch.bfloat16) for _ in range(world)]
        ref = sk.gemv_reference(allx, allwv)
        x, wv = allx[rank].to(dev), allwv[rank].to(dev)
        ws = sk.Workspace(grp)
        cfg = sk.GemvConfig(block_n=32, block_k=256)
        shape = format_shape({"n": n, "k": k, "tokens": tokens})
        for mode in ("host", "device"):
            f = lambda mode=mode: sk.gemv_all_reduce(grp, [x], [wv], workspace=ws, config=cfg, wait=mode)[0]  # noqa: E731
            rec("gemv_all_reduce", f"fused-wait-{mode}", shape, timeit(f), relerr(f(), ref))
        wsb = sk.Workspace(grp)
        for coll in ("copy", "torch"):
            fb = lambda coll=coll: sk.gemv_all_reduce_baseline(grp, [x], [wv], config=cfg, collective=coll,  # noqa: E731
                                                               workspace=wsb)[0]
            try:
                e = relerr(fb(), ref)
                rec("gemv_all_reduce", f"baseline-{coll}", shape, timeit(fb), e)
            except Exception as ex:  # noqa: BLE001
                rec("gemv_all_reduce", f"baseline-{coll}", shape, None, repr(ex)[:200])
        # gemm
        m, n, k = (64 * world, 64, 64) if smoke else (4096, 2048, 2048)
        mr = m // world
        counts = [[mr // world] * world for _ in range(world)]
        dr, dw, recv = sk.moe_routing(counts)
        alla = [torch.randn(mr, k, generator=g).to(torch.bfloat16) for _ in range(world)]
        allb = [(torch.randn(k, n, generator=g) / k ** 0.5).to(torch.bfloat16) for _ in range(world)]
        ref = sk.gemm_reference(alla, allb, dr, dw, recv)[rank]
        a, b = alla[rank].to(dev), allb[rank].to(dev)
        drd, dwd = dr[rank].to(dev), dw[rank].to(dev)
        ws = sk.Workspace(grp)
        cfg = sk.GemmConfig()
        shape = format_shape({"m": m, "n": n, "k": k})
        for mode in ("host", "device"):
            f = lambda mode=mode: sk.gemm_all_to_all(grp, [a], [b], [drd], [dwd], recv, workspace=ws,  # noqa: E731
                                                     config=cfg, validate=False, wait=mode)[0]
            rec("gemm_all_to_all", f"fused-wait-{mode}", shape, timeit(f), relerr(f()[:recv[rank]], ref))
        outg = grp.alloc((max(recv), n), torch.bfloat16)
        for coll in ("copy", "torch"):
            fb = lambda coll=coll: sk.gemm_all_to_all_baseline(grp, [a], [b], [drd], [dwd], recv, config=cfg,  # noqa: E731
                                                               collective=coll, out=outg)[0]
            try:
                e = relerr(fb()[:recv[rank]], ref)
                rec("gemm_all_to_all", f"baseline-{coll}", shape, timeit(fb), e)
            except Exception as ex:  # noqa: BLE001
                rec("gemm_all_to_all", f"baseline-{coll}", shape, None, repr(ex)[:200])
    except Exception:  # noqa: BLE001
        out.append(dict(error=traceback.format_exc()[-2000:]))
    if rank == 0:
        with open(result_file, "w") as fo:
            json.dump(out, fo)
    dist.destroy_process_group()


def symmetric(R, S, timeout_s):
    import multiprocessing as mp

    os.environ["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    ctx = mp.get_context("spawn")
    for world in S["sym_worlds"]:
        d = Path(tempfile.mkdtemp())
        init, res = d / "init", d / "res.json"
        procs = [ctx.Process(target=_sym_worker, args=(r, world, str(init), str(res), S["smoke"])) for r in range(world)]
        for p in procs:
            p.start()
        t_end = time.time() + timeout_s
        for p in procs:
            p.join(max(1, t_end - time.time()))
        for p in procs:
            if p.is_alive():
                log(f"   symmetric W={world}: process {p.pid} timed out, killing it")
                p.kill()
                p.join()
        if not res.exists():
            log(f"   symmetric W={world}: no result")
            continue
        for rec in json.load(open(res)):
            if "error" in rec:
                log(f"   symmetric W={world} error:\n{rec['error']}")
                continue
            if rec["t"] is None:
                log(f"   symmetric W={world} {rec['op']} {rec['variant']}: failed {rec['err']}")
                continue
            R.add(rec["op"], rec["variant"], "symmetric", world, "bf16" if "gemv" in rec["op"] or "gemm" in rec["op"]
                  else "fp32", rec["shape"], "", tuple(rec["t"]), "rel_err", rec["err"] if rec["err"] == rec["err"] else -1,
                  "host-timed incl. barrier", method="host")


# ------------------------------------------------------------------------------------------ main
def sizes(smoke):
    if smoke:
        return dict(smoke=True, copy_elems=1 << 16, reps=4, nsets=2, check_worlds=(2, 3), worlds=(2,),
                    emb_batch=32, emb_pool=4, emb_rows=200, emb_cases=((torch.float32, 32),),
                    emb_sweep=((4, 2, 1), (8, 4, 2)), emb_sweep_small=((4, 2, 1),),
                    gemv_shapes=((64, 64),), gemv_tokens=(1,), gemv_sweep=((32, 32, 1, 4, 1), (16, 32, 2, 4, 1)),
                    gemm_shapes=((64, 64, 64),), gemm_sweep=((32, 32, 32, 4, 4, 1),),
                    trace_world=2, trace_reps=2, trace_rows=100, emb_trace_shapes=((16, 32, True), (32, 64, False)),
                    gemv_trace_k=64, gemv_trace_shapes=((64, True), (128, False)),
                    gemm_trace_nk=(64, 64), gemm_trace_shapes=((64, True), (128, False)), sym_worlds=(),
                    tune_gemv_shape=(64, 64), tune_gemv=((32, 32, 1, 4, 1), (16, 32, 2, 4, 1, True)),
                    tune_gemm_shape=(64, 64, 32), tune_gemm=((32, 32, 16, 2, 4, 1), (32, 32, 16, 2, 4, 1, True)))
    return dict(
        smoke=False, copy_elems=1 << 28, reps=40, nsets=4, check_worlds=(2, 4), worlds=(2, 4, 8),
        emb_batch=16384, emb_pool=32, emb_rows=4 << 20,
        emb_cases=((torch.float32, 128), (torch.float32, 64), (torch.float16, 128), (torch.bfloat16, 128)),
        emb_sweep=[(b, w, u) for b in (4, 8, 16) for w in (2, 4, 8) for u in (1, 2, 4)],
        emb_sweep_small=[(4, 4, 2), (8, 4, 2), (8, 8, 2), (16, 8, 2), (8, 4, 4), (16, 4, 4), (4, 2, 4)],
        gemv_shapes=((8192, 8192), (28672, 8192)), gemv_tokens=(1, 16),
        gemv_sweep=[(16, 256, 1, 4, 3), (32, 256, 1, 4, 3), (64, 256, 1, 4, 3), (32, 512, 1, 4, 3),
                    (64, 128, 2, 4, 4), (32, 256, 2, 4, 3), (64, 256, 2, 8, 3), (128, 128, 4, 4, 3),
                    (32, 128, 4, 4, 4), (64, 512, 1, 8, 3), (16, 512, 1, 4, 4), (32, 512, 2, 4, 3),
                    (16, 256, 2, 2, 4), (64, 128, 1, 4, 5)],
        gemm_shapes=((4096, 4096, 4096), (2048, 7168, 4096)),
        gemm_sweep=[(128, 256, 64, 8, 8, 3), (128, 128, 64, 8, 4, 4), (128, 256, 64, 8, 8, 4),
                    (256, 128, 64, 8, 8, 3), (128, 128, 64, 8, 8, 3), (128, 256, 32, 8, 4, 4)],
        trace_world=4, trace_reps=5, trace_rows=1 << 20,
        emb_trace_shapes=((64, 4096, True), (128, 16384, True), (64, 32768, True), (128, 65536, True),
                          (128, 8192, False), (64, 24576, False), (128, 49152, False)),
        gemv_trace_k=8192, gemv_trace_shapes=((4096, True), (8192, True), (16384, True), (28672, True),
                                              (6144, False), (12288, False), (20480, False)),
        # world 4: per-rank M = 512, 1024, 2048, 4096 traced; 768, 1536, 3072 held out
        gemm_trace_nk=(4096, 4096), gemm_trace_shapes=((2048, True), (4096, True), (8192, True), (16384, True),
                                                       (3072, False), (6144, False), (12288, False)),
        sym_worlds=(2, 4),
        # section "tune": the two shapes that missed (block_n, block_k, split_k, warps, stages, vec) and
        # (block_m, block_n, block_k, group_m, warps, stages, even); the first entry is the incumbent
        tune_gemv_shape=(8192, 8192),
        tune_gemv=[(128, 128, 4, 4, 3), (64, 128, 8, 4, 3), (128, 128, 8, 4, 3), (64, 256, 4, 4, 3),
                   (128, 128, 4, 8, 3), (128, 128, 4, 4, 4), (64, 128, 4, 4, 4), (32, 256, 4, 4, 3),
                   (32, 256, 1, 4, 3, True), (16, 256, 1, 4, 3, True), (32, 256, 2, 4, 3, True),
                   (16, 512, 1, 4, 3, True), (16, 256, 2, 4, 3, True), (64, 128, 2, 4, 3, True),
                   (32, 256, 4, 4, 3, True), (32, 128, 4, 4, 4, True), (16, 512, 2, 4, 3, True),
                   (64, 256, 1, 8, 3, True), (32, 256, 2, 8, 3, True), (16, 256, 4, 4, 4, True),
                   (32, 512, 1, 8, 3, True), (16, 128, 4, 4, 5, True), (64, 128, 8, 4, 3, True),
                   (32, 128, 8, 4, 3, True)],
        tune_gemm_shape=(2048, 7168, 4096),
        tune_gemm=[(128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 3, True), (128, 256, 64, 16, 8, 3, True),
                   (128, 256, 64, 4, 8, 3, True), (128, 256, 64, 16, 8, 3), (128, 256, 64, 8, 8, 4, True),
                   (256, 128, 64, 8, 8, 3, True), (256, 128, 64, 16, 8, 3, True), (128, 128, 64, 8, 4, 4, True),
                   (128, 128, 64, 16, 8, 4, True), (128, 256, 32, 16, 8, 4, True), (64, 256, 64, 16, 4, 4, True)],
    )


def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="default experiments/results/h200_bench_out (with --smoke: "
                    "runs/h200_bench_smoke)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (CPU/interpreter friendly)")
    ap.add_argument("--sections", default="ceil,check,emb,gemv,gemm,trace,prof,sym")
    ap.add_argument("--sym-timeout", type=float, default=100.0)
    ap.add_argument("--configs", default="", help='JSON {"emb": [...], "gemv": [...], "gemm": [...]}: configs for '
                    "the trace section when the sweeps are not run")
    ap.add_argument("--tune-configs", default="", help='JSON {"gemv": [[...], ...], "gemm": [[...], ...]}: candidate '
                    "configurations of the tune section (first = incumbent, timed again last)")
    args = ap.parse_args()
    out = Path(args.out or ("runs/h200_bench_smoke" if args.smoke else "experiments/results/h200_bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    LOG = open(out / "log.txt", "w")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = dict(device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu-interpreter",
               torch=torch.__version__, triton=triton.__version__, date=dt.date.today().isoformat())
    log("env:", env)
    S = sizes(args.smoke)
    R = Results(env)
    gen = torch.Generator(device=dev).manual_seed(0)
    sec = set(args.sections.split(","))
    if args.tune_configs:
        tj = json.loads(args.tune_configs)
        S.update({f"tune_{key}": [tuple(c) for c in tj[key]] for key in ("gemv", "gemm") if key in tj})
    best = {}
    if args.configs:
        cj = json.loads(args.configs)
        best.update(emb=sk.EmbeddingConfig(*cj["emb"]), gemm=sk.GemmConfig(*cj["gemm"]))
        best[("gemv", 8192)] = sk.GemvConfig(*cj["gemv"])
    steps = [
        ("ceil", lambda: ceilings(R, S, dev)),
        ("check", lambda: correctness(R, S, dev, gen)),
        ("emb", lambda: best.update(emb=bench_embedding(R, S, dev, gen).get((torch.float32, 128)))),
        ("gemv", lambda: best.update({("gemv", k[0]): v for k, v in bench_gemv(R, S, dev, gen).items() if k[2] == 1})),
        ("gemm", lambda: best.update(gemm=next(iter(bench_gemm(R, S, dev, gen).values())))),
        ("tune", lambda: tune(R, S, dev, gen)),
        ("trace", lambda: traces_and_heldout(R, S, dev, gen, out, best)),
        ("prof", lambda: profiler(S, dev, out, gen)),
        ("sym", lambda: symmetric(R, S, args.sym_timeout)),
    ]
    failed = []
    for name, fn in steps:
        if name not in sec:
            continue
        t0 = time.time()
        log(f"== {name}")
        try:
            fn()
        except Exception:  # noqa: BLE001
            log(traceback.format_exc())
            failed.append(name)
        log(f"== {name} done in {time.time() - t0:.1f} s")
        R.write(out)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    # best gemv config for untuned trace shapes: nearest tuned N
    log("\nSUMMARY (median us, metric, target)")
    for r in R.rows:
        if r["variant"].startswith(("torch", "compute-tune")) or r["variant"].startswith(("baseline", "fused")) or r["operator"] == "copy":
            log(f"{r['operator'][:14]:14s} {r['variant'][:16]:16s} {r['backend'][:4]} W={r['world_size']} {r['dtype']} "
                f"{r['shape'][:34]:34s} {r['median_us']:9.1f} {r['value']:8.3f} {r['metric']:7s} {r['target']}")
    if failed:
        print(f"kernel_bench.py: error: section(s) {', '.join(failed)} failed (tracebacks in {out / 'log.txt'})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
