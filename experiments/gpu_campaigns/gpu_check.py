# ruff: noqa: B023  (benchmark closures capture loop variables and are consumed within the same iteration)
"""`make gpu-check`: compile every accepted configuration class of simfuse's kernels on the GPU, check each against
a float64 reference, and time the headline shapes (issue 12, item 5).

A configuration class passes when it compiles, runs and matches the reference (``ok``) or when the op rejects it
with a ValueError before anything runs (``rejected``: :class:`simfuse.kernels._launch.KernelConfigError` for a
configuration the device cannot hold, such as too much shared memory).  Anything else is a FAIL: a compile error
that is not turned into a clear rejection, a wrong result, a NaN.

Writes ``--out``/gpu_check.csv (one row per class), gpu_check_timing.csv and log.txt; prints a summary last.
Exit status 1 when any class FAILs.  ``--quick`` checks fewer classes (CPU/interpreter smoke).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
import time
import traceback
from pathlib import Path

import torch

import simfuse.kernels as sk
from simfuse.kernels.timing import graph_bench

LOG: list[str] = []
ROWS: list[dict] = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


def rel(out, ref):
    out = out.detach().cpu().double()
    if torch.isnan(out).any():
        return float("nan")
    return float((out - ref).norm() / max(ref.norm(), 1e-30))


TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}
DN = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def check(family, cfg_desc, fn, tol):
    """fn() -> relative error.  Records ok / rejected / FAIL."""
    t0 = time.time()
    from simfuse.kernels import _launch
    try:
        err = fn()
        status = "ok" if err == err and err <= tol else "FAIL-wrong"
        note = f"rel_err={err:.3g}"
    except ValueError as e:  # includes KernelConfigError: rejected before launch
        status, note = "rejected", f"{type(e).__name__}: {str(e)[:240]}"
    except Exception as e:  # noqa: BLE001
        status, note = "FAIL-error", f"{type(e).__name__}: {str(e).splitlines()[0][:240] if str(e) else ''}"
        LOG.append(traceback.format_exc()[-1500:])
    comp = {}
    for k in ("embedding_kernel", "gemv_kernel", "gemm_kernel"):
        if k.startswith(family):
            comp = dict(_launch.LAST_COMPILED.pop(k, {}) or {}) if status == "ok" else {}
    ROWS.append(dict(family=family, config=cfg_desc, status=status, note=note, n_regs=comp.get("n_regs", ""),
                     n_spills=comp.get("n_spills", ""), shared_bytes=comp.get("shared", ""),
                     seconds=round(time.time() - t0, 2)))
    if status != "ok":
        log(f"  {family} {cfg_desc}: {status} {note}")


def emb_case(dev, gen, cfg, dtype, dim, world=2, fused=True, mode="sum"):
    rows, bags = 777, 2 * 37 * world  # odd sizes; some empty bags, repeated indices
    w = [torch.randn(rows, dim, device=dev, generator=gen).to(dtype) for _ in range(world)]
    lens = [torch.randint(0, 9, (bags,), device=dev, generator=gen) for _ in range(world)]
    for ln in lens:
        ln[3] = 0
        ln[5] = 40
    of = [torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), ln.cumsum(0)]) for ln in lens]
    ix = [torch.randint(0, rows, (int(o[-1]),), device=dev, generator=gen) for o in of]
    grp = sk.EmulatedGroup(world, dev)
    ref = sk.embedding_reference(w, ix, of, mode=mode)
    if fused:
        out = sk.embedding_all_to_all(grp, w, ix, of, mode=mode, config=cfg)
        return max(rel(o, r) for o, r in zip(out, ref, strict=False))
    out = sk.embedding_compute(grp, w, ix, of, mode=mode, config=cfg)
    full = [sk.embedding_reference([w[r]], [ix[r]], [of[r]], mode=mode)[0] for r in range(world)]
    return max(rel(o, f) for o, f in zip(out, full, strict=False))


def gemv_case(dev, gen, cfg, dtype, n=300, k=520, tokens=1, world=2, fused=True):
    xs = [torch.randn(tokens, k, device=dev, generator=gen).to(dtype) for _ in range(world)]
    ws = [torch.randn(n, k, device=dev, generator=gen).to(dtype) for _ in range(world)]
    grp = sk.EmulatedGroup(world, dev)
    if fused:
        ref = sk.gemv_reference(xs, ws)
        return max(rel(o, ref) for o in sk.gemv_all_reduce(grp, xs, ws, config=cfg))
    outs = sk.gemv_compute(grp, xs, ws, config=cfg)
    return max(rel(o, sk.gemv_reference([x], [w])) for o, x, w in zip(outs, xs, ws, strict=False))


def gemm_case(dev, gen, cfg, dtype, m=200, n=300, k=136, world=2, fused=True):
    a = [torch.randn(m, k, device=dev, generator=gen).to(dtype) for _ in range(world)]
    b = [(torch.randn(k, n, device=dev, generator=gen) / k ** 0.5).to(dtype) for _ in range(world)]
    grp = sk.EmulatedGroup(world, dev)
    if fused:
        counts = [[m // world + (1 if s < m % world else 0) for s in range(world)] for _ in range(world)]
        dr, dw, recv = sk.moe_routing(counts)
        dr, dw = [t.to(dev) for t in dr], [t.to(dev) for t in dw]
        ref = sk.gemm_reference(a, b, dr, dw, recv)
        outs = sk.gemm_all_to_all(grp, a, b, dr, dw, recv, config=cfg)
        return max(rel(o[:nr], r) for o, r, nr in zip(outs, ref, recv, strict=False))
    outs = sk.gemm_compute(grp, a, b, config=cfg)
    return max(rel(o, x.cpu().double() @ y.cpu().double()) for o, x, y in zip(outs, a, b, strict=False))


def classes(dev, gen, quick):
    p2 = lambda lo, hi: [2 ** i for i in range(lo, hi + 1)]  # noqa: E731
    # embedding: every bags_per_program x num_warps the check accepts (1..64), unroll, dims, dtypes, modes
    for bags in p2(0, 2) if quick else p2(0, 6):
        for nw in (1, 4) if quick else p2(0, 4):
            c = sk.EmbeddingConfig(bags_per_program=bags, num_warps=nw, unroll=2)
            yield "embedding", f"bags={bags};warps={nw};unroll=2;fp32;dim=128;fused", \
                lambda c=c: emb_case(dev, gen, c, torch.float32, 128), 1e-5
    if not quick:
        for u in (1, 4, 16, 64):
            c = sk.EmbeddingConfig(bags_per_program=8, num_warps=4, unroll=u)
            yield "embedding", f"bags=8;warps=4;unroll={u};fp32;dim=64;fused", \
                lambda c=c: emb_case(dev, gen, c, torch.float32, 64), 1e-5
        for dim in (1, 8, 16, 100, 1024, 2048):
            c = sk.EmbeddingConfig(bags_per_program=8, num_warps=8)
            yield "embedding", f"bags=8;warps=8;fp32;dim={dim};fused", \
                lambda c=c, dim=dim: emb_case(dev, gen, c, torch.float32, dim), 1e-5
        c = sk.EmbeddingConfig(bags_per_program=64, num_warps=16)
        yield "embedding", "bags=64;warps=16;fp32;dim=1024;fused", \
            lambda c=c: emb_case(dev, gen, c, torch.float32, 1024), 1e-5
        for dtype in (torch.float16, torch.bfloat16):
            for bags in (8, 64):
                c = sk.EmbeddingConfig(bags_per_program=bags, num_warps=4)
                for fused in (True, False):
                    yield "embedding", f"bags={bags};warps=4;{DN[dtype]};dim=64;{'fused' if fused else 'compute'}", \
                        lambda c=c, dtype=dtype, fused=fused: emb_case(dev, gen, c, dtype, 64, fused=fused), TOL[dtype]
        c = sk.EmbeddingConfig(bags_per_program=32, num_warps=8)
        yield "embedding", "bags=32;warps=8;fp32;dim=128;mean;compute", \
            lambda c=c: emb_case(dev, gen, c, torch.float32, 128, fused=False, mode="mean"), 1e-5
    # GEMV: tile x stages x dtype (fp32's large tiles need fewer stages), warps, split-K, vec, tokens, scope
    tiles = ((16, 16), (64, 128), (128, 128)) if quick else \
        ((16, 16), (64, 128), (128, 128), (128, 256), (256, 128), (256, 256), (512, 512), (1024, 1024))
    for dtype in (torch.float32,) if quick else (torch.float32, torch.bfloat16):
        for bn, bk in tiles:
            for st in (3,) if quick else (1, 2, 3, 4):
                c = sk.GemvConfig(block_n=bn, block_k=bk, split_k=2, num_warps=4, num_stages=st)
                yield "gemv", f"bn={bn};bk={bk};split=2;warps=4;stages={st};{DN[dtype]};tokens=4;fused", \
                    lambda c=c, dtype=dtype: gemv_case(dev, gen, c, dtype, tokens=4), TOL[dtype]
    if not quick:
        for nw in (1, 2, 8, 16):
            c = sk.GemvConfig(block_n=128, block_k=128, split_k=4, num_warps=nw)
            yield "gemv", f"bn=128;bk=128;split=4;warps={nw};bf16;tokens=1;fused", \
                lambda c=c: gemv_case(dev, gen, c, torch.bfloat16), TOL[torch.bfloat16]
        for sp in (1, 8, 64):
            c = sk.GemvConfig(block_n=64, block_k=64, split_k=sp)
            yield "gemv", f"bn=64;bk=64;split={sp};bf16;tokens=16;fused", \
                lambda c=c: gemv_case(dev, gen, c, torch.bfloat16, tokens=16), TOL[torch.bfloat16]
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for vec in (False, True):
                for scope in ("sys", "gpu"):
                    c = sk.GemvConfig(block_n=32, block_k=256, split_k=2, vec=vec, scope=scope)
                    for fused in (True, False):
                        yield "gemv", (f"bn=32;bk=256;split=2;vec={vec};scope={scope};{DN[dtype]};tokens=1;"
                                       f"{'fused' if fused else 'compute'}"), \
                            lambda c=c, dtype=dtype, fused=fused: gemv_case(dev, gen, c, dtype, fused=fused), TOL[dtype]
    # GEMM: tile x stages x dtype, even, group_m, warps, scope
    tiles = ((16, 16, 16), (64, 64, 32)) if quick else \
        ((16, 16, 16), (64, 64, 32), (128, 128, 64), (128, 256, 64), (256, 128, 64), (256, 256, 64), (128, 128, 256))
    for dtype in (torch.float32,) if quick else (torch.bfloat16, torch.float32):
        for bm, bn, bk in tiles:
            for st in (3,) if quick else (1, 3, 4):
                c = sk.GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=st, num_warps=8 if bm * bn >= 16384
                                  else 4)
                yield "gemm", f"bm={bm};bn={bn};bk={bk};stages={st};{DN[dtype]};fused", \
                    lambda c=c, dtype=dtype: gemm_case(dev, gen, c, dtype), TOL[dtype]
    if not quick:
        for dtype in (torch.float16, torch.bfloat16):
            for even in (False, True):
                for scope in ("sys", "gpu"):
                    c = sk.GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, even=even, scope=scope)
                    for fused in (True, False):
                        yield "gemm", (f"bm=128;bn=256;bk=64;even={even};scope={scope};{DN[dtype]};"
                                       f"{'fused' if fused else 'compute'};m=512;n=512;k=256"), \
                            lambda c=c, dtype=dtype, fused=fused: gemm_case(dev, gen, c, dtype, 512, 512, 256,
                                                                            fused=fused), TOL[dtype]
        for nw in (1, 2, 16):
            for gm in (1, 16):
                c = sk.GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=nw, group_m=gm)
                yield "gemm", f"bm=64;bn=64;bk=64;warps={nw};group_m={gm};bf16;fused", \
                    lambda c=c: gemm_case(dev, gen, c, torch.bfloat16), TOL[torch.bfloat16]


def bench(fn, reps=40, nsets=4):
    """Median seconds per call of fn(i) over ``nsets`` input sets, in a CUDA graph (after 0.3 s of launches:
    an idle H200 sits at 345 MHz until its clocks ramp up)."""
    def run():
        for i in range(nsets):
            fn(i)
    return graph_bench(run, reps=reps, per_call=nsets, warm_s=0.3).median_s


def timing(dev, gen):
    rows = []

    def add(what, t, metric, value):
        rows.append(dict(shape=what, median_us=round(t * 1e6, 2), metric=metric, value=round(value, 3)))
        log(f"  {what}: {t * 1e6:.2f} us, {value:.3f} {metric}")

    x = torch.randn(2**28, device=dev, generator=gen)
    y = torch.empty_like(x)
    t = bench(lambda i: y.copy_(x))
    add("copy 1 GiB fp32", t, "TB/s (read+write)", 2 * x.numel() * 4 / t / 1e12)
    x = y = None
    g1 = sk.EmulatedGroup(1, dev)
    rows_t = 4 * 2**20
    w = [torch.randn(rows_t, 128, device=dev, generator=gen)]
    sets = [([torch.randint(0, rows_t, (16384 * 32,), device=dev, generator=gen)],
             [torch.arange(16385, device=dev) * 32]) for _ in range(4)]
    to = [torch.tensor([0, rows_t], device=dev, dtype=torch.int64)]
    by = 16384 * 32 * 128 * 4
    for cfg in (sk.EmbeddingConfig(8, 8, 2), sk.EmbeddingConfig(32, 8, 2)):
        t = bench(lambda i: sk.embedding_compute(g1, w, *sets[i], to, config=cfg, validate=False))
        add(f"embedding compute fp32 dim128 16384x32 bags_per_program={cfg.bags_per_program}", t, "TB/s rows", by / t / 1e12)
    import torch.nn.functional as F
    t = bench(lambda i: F.embedding_bag(sets[i][0][0], w[0], sets[i][1][0][:-1], mode="sum"))
    add("torch embedding_bag fp32 dim128 16384x32", t, "TB/s rows", by / t / 1e12)
    w = sets = None
    for n, k in ((28672, 8192), (8192, 8192)):
        sets = [([torch.randn(1, k, device=dev, generator=gen).to(torch.bfloat16)],
                 [torch.randn(n, k, device=dev, generator=gen).to(torch.bfloat16)]) for _ in range(4)]
        wsp = sk.Workspace(g1)
        cfg = sk.GemvConfig(block_n=128, block_k=128, split_k=4, num_warps=4, num_stages=3)
        t = bench(lambda i: sk.gemv_compute(g1, *sets[i], config=cfg, workspace=wsp))
        add(f"gemv compute bf16 {n}x{k}", t, "TB/s weights", n * k * 2 / t / 1e12)
        t = bench(lambda i: torch.mv(sets[i][1][0], sets[i][0][0][0]))
        add(f"torch mv bf16 {n}x{k}", t, "TB/s weights", n * k * 2 / t / 1e12)
        sets = None
    for bn, bk, st in ((128, 256, 2), (128, 256, 3), (128, 128, 3)):
        n, k = 8192, 8192
        sets = [([torch.randn(1, k, device=dev, generator=gen)], [torch.randn(n, k, device=dev, generator=gen)])
                for _ in range(4)]
        wsp = sk.Workspace(g1)
        cfg = sk.GemvConfig(block_n=bn, block_k=bk, split_k=4, num_stages=st)
        try:
            t = bench(lambda i: sk.gemv_compute(g1, *sets[i], config=cfg, workspace=wsp))
            add(f"gemv compute fp32 {n}x{k} tile {bn}x{bk} stages {st}", t, "TB/s weights", n * k * 4 / t / 1e12)
        except ValueError as e:
            log(f"  gemv fp32 {bn}x{bk} stages {st}: rejected: {e}")
        sets = None
    for m, n, k in ((4096, 4096, 4096), (2048, 7168, 4096)):
        sets = [([torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)],
                 [(torch.randn(k, n, device=dev, generator=gen) / k ** 0.5).to(torch.bfloat16)]) for _ in range(4)]
        cfg = sk.GemmConfig(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)
        t = bench(lambda i: sk.gemm_compute(g1, *sets[i], config=cfg))
        add(f"gemm compute bf16 {m}x{n}x{k}", t, "TFLOP/s", 2 * m * n * k / t / 1e12)
        t = bench(lambda i: torch.matmul(sets[i][0][0], sets[i][1][0]))
        add(f"torch.matmul bf16 {m}x{n}x{k}", t, "TFLOP/s", 2 * m * n * k / t / 1e12)
        sets = None
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip the remaining classes after this (reported)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    import triton
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (interpreter)"
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    log(f"gpu_check: {name}; {date}; torch {torch.__version__}; triton {triton.__version__}")
    gen = torch.Generator(device=dev).manual_seed(5)
    t0 = time.time()
    skipped = 0
    for fam, desc, fn, tol in classes(dev, gen, a.quick):
        if time.time() - t0 > a.budget_s:
            skipped += 1
            ROWS.append(dict(family=fam, config=desc, status="skipped-time", note="", n_regs="", n_spills="",
                             shared_bytes="", seconds=0))
            continue
        check(fam, desc, fn, tol)
    if skipped:
        log(f"{skipped} classes skipped: --budget-s {a.budget_s} exceeded")
    log(f"checked {len(ROWS)} classes in {time.time() - t0:.1f}s")
    with open(out / "gpu_check.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROWS[0]) + ["device", "date"])
        w.writeheader()
        w.writerows(dict(r, device=name, date=date) for r in ROWS)
    if dev.type == "cuda" and not a.no_timing:
        log("timing (CUDA graph over 4 input sets, median of 40 replays):")
        try:
            trow = timing(dev, gen)
            with open(out / "gpu_check_timing.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(trow[0]) + ["device", "date"])
                w.writeheader()
                w.writerows(dict(r, device=name, date=date) for r in trow)
        except Exception:  # noqa: BLE001
            log(traceback.format_exc())
    by = {}
    for r in ROWS:
        by.setdefault((r["family"], r["status"]), 0)
        by[(r["family"], r["status"])] += 1
    log("SUMMARY " + "; ".join(f"{f} {s}: {n}" for (f, s), n in sorted(by.items())))
    fails = [r for r in ROWS if r["status"].startswith("FAIL")]
    log("GPU CHECK: " + ("all classes ok or rejected before launch" if not fails else f"{len(fails)} FAIL"))
    (out / "log.txt").write_text("\n".join(LOG) + "\n")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
