# ruff: noqa: B023  (closures capture loop variables and are consumed within the same iteration)
"""Designed kernel-timing campaign for calibration (issue 12, item 2); run on the GPU machine.

A grid per kernel family over occupancy (a fraction of one wave up to many waves) and over the per-program work:
embedding row width 8-1024 and pooling 1-256, GEMV n and k per rank 256-16384, GEMM m/n/k 512-16384, in each
dtype the kernels support.  Every shape is timed as the kernel launches back to back in one CUDA graph over
several input sets (random data, together larger than the L2), medians over replays: the quantity the simulator
predicts as launch latency + makespan.  ``compute`` variants run on one rank; ``fused`` variants on 4 emulated
ranks (time / 4 = the mean per-rank launch), like ``experiments/results/h200_kernel_heldout.csv``.

Per configuration it also records the compiled kernel's registers and shared memory (occupancy) and one
per-program trace of a multi-wave launch (resident programs per SM, measured).

Writes ``--out``/campaign.csv.gz (one row per shape), traces.csv.gz (per-program traces), log.txt.
``--smoke``: a few tiny shapes (CPU + interpreter).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import gzip
import io
import math
import os
import sys
import time
from pathlib import Path

import torch

if "--smoke" in sys.argv and not torch.cuda.is_available():  # the CPU smoke run needs Triton's interpreter,
    os.environ.setdefault("TRITON_INTERPRET", "1")  # set before the kernels are compiled (imported)

import simfuse.kernels as sk  # noqa: E402
from simfuse.kernels import _launch
from simfuse.kernels.timing import graph_bench

LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench(calls, reps):
    """(median, p10, p90) seconds per call over the closures in ``calls``, CUDA graph replays."""
    def run():
        for c in calls:
            c()
    return graph_bench(run, reps=reps, per_call=len(calls)).as_tuple()


DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def nsets_for(nbytes, l2=60 * 2**20):
    """Input sets so that together they exceed 4x the L2 (at least 2, at most 4)."""
    return int(min(4, max(2, math.ceil(4 * l2 / max(nbytes, 1)))))


class Campaign:
    def __init__(self, dev, smoke, reps, budget_s):
        self.dev, self.smoke, self.reps = dev, smoke, reps
        self.rows: list[dict] = []
        self.rec = sk.TraceRecorder(prefix="campaign")
        self.traced: set = set()
        self.t_end = time.time() + budget_s
        self.gen = torch.Generator(device=dev).manual_seed(12)
        self.skipped = 0

    def over(self):
        return time.time() > self.t_end

    def add(self, **kw):
        kw["compiled"] = dict(_launch.LAST_COMPILED.get(kw.pop("jit"), {}))
        c = kw.pop("compiled")
        kw.update(n_regs=c.get("n_regs", ""), n_spills=c.get("n_spills", ""), shared_bytes=c.get("shared", ""))
        self.rows.append(kw)

    def maybe_trace(self, key, fn):
        """One traced launch (rank 0) per configuration key: resident programs, dispatch."""
        if key in self.traced or not torch.cuda.is_available():
            return
        self.traced.add(key)
        fn(sk.TraceRecorder(rank=0))  # warm (compiled already, but the marker kernels)
        self.rec.rank = 0
        fn(self.rec)

    # ------------------------------------------------------------------------------------------- embedding
    def embedding(self, variant, dtype, dim, pooling, bags, cfg, table_rows=0, alloc=0, world=0):
        """``table_rows`` 0: the v1 default (1-16 Mi rows, about 512 MiB a table: far beyond the L2);
        ``alloc``: a label for repeated measurements of one shape on freshly allocated tables; ``world``: emulated
        ranks of a fused launch (0: 4, the v1-v3 campaigns' count; compute launches run on 1)."""
        world = (world or 4) if variant == "fused" else 1
        eb = DT[dtype].itemsize
        rows = table_rows or (1000 if self.smoke else int(min(16 * 2**20, max(2**20, 512 * 2**20 // (dim * eb)))))
        grp = sk.EmulatedGroup(world, self.dev)
        w = [torch.randn(rows, dim, device=self.dev, generator=self.gen).to(DT[dtype]) for _ in range(world)]
        to = [torch.tensor([0, rows], device=self.dev, dtype=torch.int64) for _ in range(world)]
        per_call = bags * pooling * (dim * eb + 8) * world
        sets = []
        for _ in range(nsets_for(per_call)):
            ix = [torch.randint(0, rows, (bags * pooling,), device=self.dev, generator=self.gen) for _ in range(world)]
            of = [torch.arange(bags + 1, device=self.dev, dtype=torch.int64) * pooling for _ in range(world)]
            sets.append((ix, of))
        if variant == "fused":
            wsp = sk.Workspace(grp)
            out = grp.alloc((bags // world, world * dim), DT[dtype])
            call = lambda ix, of, tr=None, wait=False: sk.embedding_all_to_all(  # noqa: E731
                grp, w, ix, of, to, out=out, workspace=wsp, config=cfg, validate=False, wait=wait, trace=tr)
        else:
            call = lambda ix, of, tr=None, wait=False: sk.embedding_compute(  # noqa: E731
                grp, w, ix, of, to, config=cfg, validate=False, trace=tr)
        t = bench([lambda ix=ix, of=of: call(ix, of) for ix, of in sets], self.reps)
        grid = -(-bags // world // cfg.bags_per_program) * world
        self.add(jit="embedding_kernel", kernel="embedding_all_to_all", variant=variant, dtype=dtype, world=world,
                 dim=dim, pooling=pooling, bags=bags, m=0, n=0, k=0, tokens=0, grid=grid,
                 bags_per_wg=cfg.bags_per_program, block_m=0, block_n=0, block_k=0, split_k=0,
                 num_warps=cfg.num_warps, num_stages=0, table_rows=rows, alloc=alloc,
                 flops_per_wg=cfg.bags_per_program * pooling * dim,
                 bytes_per_wg=cfg.bags_per_program * (pooling * (dim * eb + 8) + dim * eb + 16),
                 median_s=t[0] / world, p10_s=t[1] / world, p90_s=t[2] / world)
        if grid >= 4096:
            self.maybe_trace(("emb", variant, dtype), lambda tr: call(*sets[0], tr=tr, wait=variant == "fused"))

    # ------------------------------------------------------------------------------------------- gemv
    def gemv(self, variant, dtype, n, k, cfg, tokens=1, alloc=0):
        world = 4 if variant == "fused" else 1
        grp = sk.EmulatedGroup(world, self.dev)
        eb = DT[dtype].itemsize
        sets = [([torch.randn(tokens, k, device=self.dev, generator=self.gen).to(DT[dtype]) for _ in range(world)],
                 [torch.randn(n, k, device=self.dev, generator=self.gen).to(DT[dtype]) for _ in range(world)])
                for _ in range(nsets_for(n * k * eb * world))]
        wsp = sk.Workspace(grp)
        if variant == "fused":
            out = grp.alloc((tokens, n), DT[dtype])
            call = lambda x, w_, tr=None, wait=False: sk.gemv_all_reduce(  # noqa: E731
                grp, x, w_, out=out, workspace=wsp, config=cfg, wait=wait, trace=tr)
        else:
            call = lambda x, w_, tr=None, wait=False: sk.gemv_compute(  # noqa: E731
                grp, x, w_, config=cfg, workspace=wsp, trace=tr)
        t = bench([lambda x=x, w_=w_: call(x, w_) for x, w_ in sets], self.reps)
        tiles = -(-n // cfg.block_n)
        k_per = -(-(-(-k // cfg.split_k)) // cfg.block_k) * cfg.block_k  # noqa: B002
        kk = min(k_per, k)
        self.add(jit="gemv_kernel", kernel="gemv_all_reduce", variant=variant, dtype=dtype, world=world, dim=0,
                 pooling=0, bags=0, m=0, n=n, k=k, tokens=tokens, grid=tiles * cfg.split_k, bags_per_wg=0,
                 block_m=0, block_n=cfg.block_n, block_k=cfg.block_k, split_k=cfg.split_k, num_warps=cfg.num_warps,
                 num_stages=cfg.num_stages, table_rows=0, alloc=alloc, flops_per_wg=2.0 * tokens * cfg.block_n * kk,
                 bytes_per_wg=float(cfg.block_n * kk * eb + tokens * kk * eb + tokens * cfg.block_n * 4),
                 median_s=t[0] / world, p10_s=t[1] / world, p90_s=t[2] / world)
        if tiles * cfg.split_k >= 1024:
            self.maybe_trace(("gemv", variant, dtype), lambda tr: call(*sets[0], tr=tr, wait=variant == "fused"))

    # ------------------------------------------------------------------------------------------- gemm
    def gemm(self, variant, dtype, m, n, k, cfg, alloc=0):
        world = 4 if variant == "fused" else 1
        grp = sk.EmulatedGroup(world, self.dev)
        eb = DT[dtype].itemsize
        mr = m  # per-rank rows
        ns = nsets_for((mr * k + k * n) * eb * world)
        sets = [([torch.randn(mr, k, device=self.dev, generator=self.gen).to(DT[dtype]) for _ in range(world)],
                 [(torch.randn(k, n, device=self.dev, generator=self.gen) / k ** 0.5).to(DT[dtype])
                  for _ in range(world)]) for _ in range(ns)]
        if variant == "fused":
            counts = [[mr // world + (1 if s < mr % world else 0) for s in range(world)] for _ in range(world)]
            dr, dw, recv = sk.moe_routing(counts)
            dr = [x.to(self.dev) for x in dr]
            dw = [x.to(self.dev) for x in dw]
            wsp = sk.Workspace(grp)
            out = grp.alloc((max(recv), n), DT[dtype])
            call = lambda a, b, tr=None, wait=False: sk.gemm_all_to_all(  # noqa: E731
                grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=cfg, validate=False, wait=wait, trace=tr)
        else:
            call = lambda a, b, tr=None, wait=False: sk.gemm_compute(grp, a, b, config=cfg, trace=tr)  # noqa: E731
        t = bench([lambda a=a, b=b: call(a, b) for a, b in sets], self.reps)
        grid = -(-mr // cfg.block_m) * -(-n // cfg.block_n)
        self.add(jit="gemm_kernel", kernel="gemm_all_to_all", variant=variant, dtype=dtype, world=world, dim=0,
                 pooling=0, bags=0, m=mr, n=n, k=k, tokens=0, grid=grid, bags_per_wg=0, block_m=cfg.block_m,
                 block_n=cfg.block_n, block_k=cfg.block_k, split_k=0, num_warps=cfg.num_warps,
                 num_stages=cfg.num_stages, table_rows=0, alloc=alloc, flops_per_wg=2.0 * cfg.block_m * cfg.block_n * k,
                 bytes_per_wg=float((cfg.block_m + cfg.block_n) * k * eb + cfg.block_m * cfg.block_n * eb),
                 median_s=t[0] / world, p10_s=t[1] / world, p90_s=t[2] / world)
        if grid >= 400 and k <= 4096:
            self.maybe_trace(("gemm", variant, dtype), lambda tr: call(*sets[0], tr=tr, wait=variant == "fused"))


def grid_points(smoke):
    """The designed grid: (family, args...) tuples, in the order they are measured."""
    if smoke:
        return ([("emb", v, "fp32", d, p, b) for v in ("compute", "fused") for d, p, b in ((8, 2, 64), (16, 3, 32))]
                + [("gemv", v, "fp32", n, k) for v in ("compute", "fused") for n, k in ((256, 256), (128, 512))]
                + [("gemm", v, "fp32", m, n, k) for v in ("compute", "fused") for m, n, k in ((64, 128, 64),)])
    pts = []
    dims = (8, 16, 32, 64, 128, 256, 512, 1024)
    pools = (1, 4, 16, 64, 256)
    bagss = (1024, 4096, 16384, 65536)
    eb = {"fp32": 4, "fp16": 2, "bf16": 2}
    for dt_ in ("fp32", "fp16", "bf16"):
        for d in (dims if dt_ == "fp32" else (16, 128, 1024)):
            for p in (pools if dt_ == "fp32" else (1, 16, 256)):
                for b in (bagss if dt_ == "fp32" else (1024, 16384, 65536)):
                    if b * p * d * eb[dt_] <= 2**31:
                        pts.append(("emb", "compute", dt_, d, p, b))
    for d in (16, 128, 1024):
        for p in (4, 32, 256):
            for b in (4096, 65536):
                if b * p * d * 4 <= 2**30:
                    pts.append(("emb", "fused", "fp32", d, p, b))
    nk = (256, 1024, 4096, 16384)
    for dt_ in ("bf16", "fp32", "fp16"):
        for n in nk:
            for k in (nk if dt_ != "fp16" else (1024, 16384)):
                pts.append(("gemv", "compute", dt_, n, k))
    for n in nk:
        for k in nk:
            pts.append(("gemv", "fused", "bf16", n, k))
    for dt_ in ("bf16", "fp16"):
        for m in (512, 1024, 2048, 4096, 8192, 16384):
            for n in (512, 2048, 8192) if dt_ == "bf16" else (512, 8192):
                for k in (512, 1024, 4096, 16384) if dt_ == "bf16" else (1024, 16384):
                    pts.append(("gemm", "compute", dt_, m, n, k))
    for m in (512, 2048, 8192):
        for n in (512, 2048):
            for k in (512, 4096):
                pts.append(("gemm", "compute", "fp32", m, n, k))
    for m in (512, 2048, 8192):
        for n in (512, 4096):
            for k in (1024, 4096, 16384):
                pts.append(("gemm", "fused", "bf16", m, n, k))
    return pts


def grid_points_v2(smoke):
    """Second campaign (issue 12 follow-up): the axes v1 held fixed.  Each point ends with a dict of extras
    (``cfg``: launch-config overrides; ``table_rows``; ``alloc``: repeat on fresh tables).

    * embedding run-to-run spread: 6 shapes x 4 fresh allocations (plus 4 GiB tables), to tell allocation
      (page placement) effects from timing noise;
    * embedding table size: 1 Ki to 8 Mi rows (L2-resident to 4 GiB) at fixed per-program work;
    * embedding launch configs: bags per program 1-16 x warps 2-16 (the simulator's DLRM default is 4 bags);
    * embedding bf16 at the row widths v1 skipped;
    * GEMV at 1-8 programs per SM (n 6 Ki-32 Ki, split-k 1-8), where v1 had at most one outside n = 16 Ki;
    * GEMM at 3-5 waves (v1's grid jumps from 1-2 to 8+ waves there)."""
    if smoke:
        return [("emb", "compute", "fp32", 16, 2, 64, {"table_rows": 512, "alloc": a}) for a in (0, 1)] + [
            ("emb", "compute", "fp32", 8, 3, 64, {"cfg": {"bags_per_program": 2, "num_warps": 2}}),
            ("gemv", "compute", "fp32", 256, 256, {"cfg": {"split_k": 1}}),
            ("gemm", "compute", "fp32", 96, 64, 64, {})]
    pts = []
    for dt_, d, p, b in (("fp32", 128, 16, 16384), ("fp32", 64, 64, 4096), ("fp32", 512, 4, 65536),
                         ("fp32", 16, 256, 1024), ("bf16", 128, 16, 16384), ("fp32", 1024, 16, 4096)):
        for a in range(4):
            pts.append(("emb", "compute", dt_, d, p, b, {"alloc": a}))
    for a in range(4):
        pts.append(("emb", "compute", "fp32", 128, 16, 16384, {"table_rows": 8 * 2**20, "alloc": 10 + a}))
    for d, p, b in ((128, 16, 16384), (32, 64, 4096), (512, 4, 65536)):
        for lg in (10, 12, 14, 16, 18, 20, 22, 23):
            if (2**lg) * d * 4 <= 4 * 2**30:
                pts.append(("emb", "compute", "fp32", d, p, b, {"table_rows": 2**lg}))
    for d in (16, 128, 1024):
        for p in (4, 64):
            for bpp in (1, 2, 4, 16):
                for nw in (2, 4, 8, 16):
                    pts.append(("emb", "compute", "fp32", d, p, 16384,
                                {"cfg": {"bags_per_program": bpp, "num_warps": nw}}))
    for d in (32, 64, 256, 512):
        for p in (4, 64):
            for b in (4096, 65536):
                pts.append(("emb", "compute", "bf16", d, p, b, {}))
    for dt_ in ("bf16", "fp32"):
        for n in (6144, 8192, 12288, 16384, 24576, 32768):
            for k in (1024, 4096, 16384):
                for sk_ in (1, 2, 4, 8):
                    pts.append(("gemv", "compute", dt_, n, k, {"cfg": {"split_k": sk_}}))
    for m in (3072, 4096, 5120, 6144):
        for n in (2048, 4096, 6144):
            for k in (1024, 2048, 4096):
                pts.append(("gemm", "compute", "bf16", m, n, k, {}))
    for m, n in ((4096, 4096), (3072, 6144)):
        for k in (1024, 4096):
            pts.append(("gemm", "compute", "fp32", m, n, k, {}))
    return pts


def grid_points_v3(smoke):
    """Third campaign: the embedding's launch configuration at every row width.  v2 varied warps and bags per
    program at dims 16, 128 and 1024 only, and a per-warp term fitted there mispredicted dims in between; here
    dims 8-2048 (powers of two and the odd widths in between), warps 2-16, bags per program 2-16, fp32 and bf16,
    at two poolings and 16 Ki bags, on 512 MiB tables."""
    if smoke:
        return [("emb", "compute", "fp32", 24, 2, 64, {"cfg": {"bags_per_program": 2, "num_warps": 2}})]
    pts = []
    for dt_, dims in (("fp32", (8, 24, 48, 96, 192, 384, 640, 768, 1536, 2048)), ("bf16", (24, 96, 384, 768, 2048))):
        for d in dims:
            for p in (8, 64):
                for nw in (2, 4, 8, 16):
                    for bpp in (2, 4, 8, 16):
                        pts.append(("emb", "compute", dt_, d, p, 16384,
                                    {"cfg": {"bags_per_program": bpp, "num_warps": nw}}))
    return pts


def grid_points_v4(smoke):
    """Fourth campaign (issue 12, fifth pass): what the fp16/bf16 embedding, the fused embedding and the fp16
    GEMM/GEMV fits lacked.

    * fp16 and bf16 embedding launch configurations at every row width, as v3 did for fp32: warps 2-16 x bags per
      program 2-16 at poolings 8 and 64 (fp16: v3's fp32 widths and 128; bf16: the widths v3 lacked), 16 Ki bags,
      512 MiB tables; poolings 1 and 256 at 3 configurations (4 bags x 4 / 8 warps, 8 bags x 8 warps) at every
      fp16/bf16 width; table sizes 4 Ki-4 Mi rows at dim 128;
    * fused embedding (fp32, bf16, fp16; 4 and 8 emulated ranks; 6 dim/pooling/bag counts; 8 bags x 8 warps and 4
      bags x 8 warps: 132-8,192 programs);
    * fp16 GEMM m 512-16,384 x n 512-8,192 x k 512-16,384, fp32 GEMM at k 256-1,024 (k = 512 was v1's weakest
      region), fp16 GEMV n 256-32,768 x k 256-16,384 x split_k 1/4/8."""
    if smoke:
        return [("emb", "compute", "fp16", 24, 2, 64, {"cfg": {"bags_per_program": 2, "num_warps": 2}}),
                ("emb", "fused", "bf16", 16, 2, 64, {"world": 8}),
                ("gemv", "compute", "fp16", 256, 256, {"cfg": {"split_k": 1}}),
                ("gemm", "compute", "fp16", 96, 64, 64, {})]
    pts = []
    wide = {"fp16": (8, 24, 48, 96, 128, 192, 384, 640, 768, 1536, 2048), "bf16": (8, 48, 128, 192, 640, 1536)}
    for dt_, dims in wide.items():
        for d in dims:
            for p in (8, 64):
                for nw in (2, 4, 8, 16):
                    for bpp in (2, 4, 8, 16):
                        pts.append(("emb", "compute", dt_, d, p, 16384,
                                    {"cfg": {"bags_per_program": bpp, "num_warps": nw}}))
    for dt_ in ("fp16", "bf16"):
        for d in sorted(set(wide["fp16"]) | set(wide["bf16"]) | {24, 96, 384, 768, 2048}):
            for p in (1, 256):
                for bpp, nw in ((4, 4), (4, 8), (8, 8)):
                    pts.append(("emb", "compute", dt_, d, p, 16384,
                                {"cfg": {"bags_per_program": bpp, "num_warps": nw}}))
        for lg in (12, 16, 19, 22):
            pts.append(("emb", "compute", dt_, 128, 16, 16384, {"table_rows": 2**lg}))
    for dt_ in ("fp32", "bf16", "fp16"):
        for world in (4, 8):
            for d, p, b in ((16, 4, 16384), (64, 32, 4096), (128, 16, 65536), (128, 64, 16384), (512, 8, 16384),
                            (1024, 32, 4096)):
                for bpp in (8, 4):
                    pts.append(("emb", "fused", dt_, d, p, b, {"world": world,
                                                              "cfg": {"bags_per_program": bpp, "num_warps": 8}}))
    for m in (512, 2048, 4096, 8192, 16384):
        for n in (512, 2048, 8192):
            for k in (512, 1024, 4096, 16384):
                pts.append(("gemm", "compute", "fp16", m, n, k, {}))
    for m in (512, 2048, 8192):
        for n in (512, 2048):
            for k in (256, 512, 1024):
                pts.append(("gemm", "compute", "fp32", m, n, k, {}))
    for n in (256, 1024, 4096, 16384, 32768):
        for k in (256, 1024, 4096, 16384):
            for sk_ in (1, 4, 8):
                pts.append(("gemv", "compute", "fp16", n, k, {"cfg": {"split_k": sk_}}))
    return pts


def grid_points_v5(smoke):
    """Fifth campaign (issue 12, sixth pass): where the fifth pass's models missed most.

    * embedding grids below one wave with long dependent chains (the worst heldout4 16-bit shapes: 72-456 programs
      of 1,188-2,112 slots, poolings 177-443): fp32/bf16/fp16, dims 24-320, poolings 32-512, 512-8,192 bags at
      4 bags x 8 warps and 8 bags x 4 warps (32-2,048 programs);
    * bf16 GEMV at v4's fp16 grid (n 256-32,768 x k 256-16,384 x split_k 1/4/8): bf16 had only n >= 6 Ki (v2) and
      v1's few shapes below a wave."""
    if smoke:
        return [("emb", "compute", "bf16", 24, 32, 64, {"cfg": {"bags_per_program": 4, "num_warps": 8}}),
                ("gemv", "compute", "bf16", 256, 256, {"cfg": {"split_k": 1}})]
    pts = []
    for dt_ in ("fp32", "bf16", "fp16"):
        for d in (24, 72, 128, 320):
            for p in (32, 128, 512):
                for b in (512, 1024, 4096, 8192):
                    for bpp, nw in ((4, 8), (8, 4)):
                        pts.append(("emb", "compute", dt_, d, p, b,
                                    {"cfg": {"bags_per_program": bpp, "num_warps": nw}}))
    for n in (256, 1024, 4096, 16384, 32768):
        for k in (256, 1024, 4096, 16384):
            for sk_ in (1, 4, 8):
                pts.append(("gemv", "compute", "bf16", n, k, {"cfg": {"split_k": sk_}}))
    return pts


def grid_points_heldout(smoke, seed=2026, scale=1):
    """Held-out shapes off every grid (random, log-uniform, fixed seed), several beyond the grids' ranges along
    one axis; never used for fitting."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if smoke:
        return [("emb", "compute", "fp32", 24, 3, 96, {}), ("gemv", "compute", "fp32", 320, 192, {}),
                ("gemm", "compute", "fp32", 80, 48, 96, {})]

    def lu(lo, hi, mult=1):
        return int(max(lo, round(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) / mult) * mult))

    pts = []
    for _ in range(40 * scale):
        dt_ = str(rng.choice(["fp32", "fp32", "bf16", "fp16"]))
        d, p, b = lu(8, 2048, 8), lu(1, 512), lu(512, 131072, 64)
        cfg = {"bags_per_program": int(rng.choice([2, 4, 8, 16])), "num_warps": int(rng.choice([4, 8]))}
        if b * p * d * 4 <= 2**31:
            pts.append(("emb", "compute", dt_, d, p, b, {"cfg": cfg}))
    for _ in range(30 * scale):
        dt_ = str(rng.choice(["bf16", "fp32", "fp16"]))
        pts.append(("gemv", "compute", dt_, lu(256, 65536, 64), lu(256, 32768, 64),
                    {"cfg": {"split_k": int(rng.choice([1, 2, 4, 8]))}}))
    for _ in range(30 * scale):
        dt_ = str(rng.choice(["bf16", "bf16", "fp16", "fp32"]))
        m, n, k = lu(256, 32768, 64), lu(256, 16384, 64), lu(256, 32768, 64)
        if m * n * k <= (2**40 if dt_ != "fp32" else 2**37):
            pts.append(("gemm", "compute", dt_, m, n, k, {}))
    on_grid = {q[:6] for q in grid_points(False)}
    return [q for q in pts if q[:-1] not in on_grid]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop measuring new shapes after this")
    ap.add_argument("--only", default="", help="comma list of families (emb,gemv,gemm)")
    ap.add_argument("--grid", choices=("v1", "v2", "v3", "v4", "v5", "heldout"), default="v1",
                    help="v1: the designed grid; v2: the axes v1 held fixed; v3: embedding launch configs at every "
                         "row width; v4: fp16/bf16 embedding configs, fused embedding, fp16 GEMM/GEMV; v5: sub-wave "
                         "embedding chains, bf16 GEMV below a wave; heldout: random off-grid shapes (--seed)")
    ap.add_argument("--seed", type=int, default=2026,
                    help="draw of the heldout grid (2026: heldout2, 2027: heldout3, 2028: heldout4, 2029 with "
                         "--heldout-scale 3: heldout5)")
    ap.add_argument("--heldout-scale", type=int, default=1,
                    help="draw this many times the heldout grid's shapes per family (1: the earlier draws)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="measure every shape this many times, each on fresh allocations (alloc = 0, 1, ...), in "
                         "separate shuffled passes over the grid (the spread between them is the noise)")
    ap.add_argument("--shard", default="0/1", help="K/N: measure every N-th shape of the shuffled grid from the K-th "
                                                  "(a grid split over several device calls)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    import triton
    log(f"device {name}; {date}; torch {torch.__version__}; triton {triton.__version__}; grid {a.grid}{f' seed {a.seed}' if a.grid == 'heldout' else ''}")
    C = Campaign(dev, a.smoke, 3 if a.smoke else a.reps, a.budget_s)
    cfgs = {"emb": sk.EmbeddingConfig(bags_per_program=8, num_warps=8, unroll=2),
            "gemv": sk.GemvConfig(block_n=128, block_k=128, split_k=4, num_warps=4, num_stages=3),
            "gemm": sk.GemmConfig(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)}
    if a.smoke:
        cfgs["gemm"] = sk.GemmConfig(block_m=32, block_n=32, block_k=32)
        cfgs["gemv"] = sk.GemvConfig(block_n=64, block_k=64, split_k=2)
    only = set(filter(None, a.only.split(",")))
    grid_fn = {"v1": grid_points, "v2": grid_points_v2, "v3": grid_points_v3, "v4": grid_points_v4,
               "v5": grid_points_v5,
               "heldout": lambda smoke: grid_points_heldout(smoke, a.seed, a.heldout_scale)}[a.grid]
    pts = [p for p in grid_fn(a.smoke) if not only or p[0] in only]
    import random
    random.Random(12).shuffle(pts)  # a time-budget cut then thins every family alike
    k_, n_ = (int(x) for x in a.shard.split("/"))
    pts = pts[k_::n_]
    if a.repeats > 1:  # pass r measures every shape on fresh allocations, labelled alloc = r, in its own order
        passes = []
        for r in range(a.repeats):
            q = [p[:-1] + (dict(p[-1], alloc=r),) if isinstance(p[-1], dict) else p + ({"alloc": r},) for p in pts]
            random.Random(100 + r).shuffle(q)
            passes.extend(q)
        pts = passes
    log(f"{len(pts)} shapes (shard {a.shard}, {a.repeats} pass(es))")
    t0 = time.time()
    for i, p in enumerate(pts):
        if C.over():
            C.skipped += 1
            continue
        fam = p[0]
        extra = p[-1] if isinstance(p[-1], dict) else {}
        p = p[:-1] if extra or isinstance(p[-1], dict) else p
        cfg = dataclasses.replace(cfgs[fam], **extra.get("cfg", {}))
        try:
            if fam == "emb":
                C.embedding(p[1], p[2], p[3], p[4], p[5], cfg, table_rows=extra.get("table_rows", 0),
                            alloc=extra.get("alloc", 0), world=extra.get("world", 0))
            elif fam == "gemv":
                C.gemv(p[1], p[2], p[3], p[4], cfg, alloc=extra.get("alloc", 0))
            else:
                C.gemm(p[1], p[2], p[3], p[4], p[5], cfg, alloc=extra.get("alloc", 0))
            r = C.rows[-1]
            if i % 20 == 0:
                log(f"[{time.time() - t0:6.1f}s] {i}/{len(pts)} {p}: {r['median_s'] * 1e6:.2f} us grid {r['grid']}"
                    f" regs {r['n_regs']} smem {r['shared_bytes']}")
        except Exception as e:  # noqa: BLE001
            log(f"FAILED {p}: {type(e).__name__}: {str(e)[:300]}")
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    log(f"measured {len(C.rows)} of {len(pts)} shapes in {time.time() - t0:.1f}s; skipped for time: {C.skipped}")
    buf = io.StringIO()
    cols = list(C.rows[0].keys()) + ["device", "date"] if C.rows else []
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in C.rows:
        w.writerow(dict(r, device=name, date=date))
    with gzip.GzipFile(out / "campaign.csv.gz", "wb", mtime=0) as f:
        f.write(buf.getvalue().encode())
    if C.rec.traces:
        n = C.rec.write(out / "traces.csv.gz")
        log(f"traces: {len(C.rec.traces)} launches, {n} rows")
    (out / "log.txt").write_text("\n".join(LOG) + "\n")
    if pts and not C.rows:
        print(f"trace_campaign.py: error: no shape measured of {len(pts)} (see {out / 'log.txt'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
