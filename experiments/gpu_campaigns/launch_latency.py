"""Measure the per-kernel launch cost of back-to-back kernels on the GPU (``device.kernel_launch_latency_us``),
and summarise the table anywhere.

simfuse charges every kernel a launch latency before its first workgroup starts.  For a kernel queued behind
another one (what a training step is: a CUDA graph, or eager launches the host issues ahead of the GPU) that is
the device-side gap between back-to-back kernels plus a trivial kernel's own ramp and retire -- the quantity the
H200 calibration profile measured from the end gaps of queued Triton launches
(``simfuse.calibrate.build.queued_launch_latency_s``: 2.2 us).  This script measures it directly, for any GPU:

* ``graph``: ``N`` trivial kernels captured in one CUDA graph, replayed between CUDA events
  (``simfuse.kernels.timing.graph_bench``, the method of every other measurement script); seconds per kernel;
* ``queued``: the same ``N`` kernels launched eagerly behind a ``torch.cuda._sleep`` that keeps the GPU busy
  until the host has queued them all, timed from an event after the sleep: the device-bound rate of eager
  launches;
* ``single``: one kernel between two events after a synchronize (what a lone launch costs; not used by simfuse).

Kernels: ``torch_add1`` (``x.add_(1)`` on one element: one block), ``triton_store`` with 1, 132 and 1,056
programs (one store each), and ``torch_add_16mb`` (a bandwidth-bound add over 16 MiB, as a sanity row: its
per-kernel time is its makespan plus the gap).

Measure (GPU): ``python experiments/gpu_campaigns/launch_latency.py measure OUT.csv``.
Summary (anywhere): ``python experiments/gpu_campaigns/launch_latency.py summary CSV...`` prints the two estimates simfuse
uses, each the median over the trivial one-block kernels (``torch_add1``, ``triton_store`` x1) and every table
given: ``queued`` -> ``device.kernel_launch_latency_us`` (eager launches), ``graph`` ->
``device.graph_launch_latency_us`` (kernels replayed from a CUDA graph).  On the lent H100 SXM (2026-12-06) the
two differ by 2x (2.04 vs 1.07 us), so they are two fields, not one.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.errors import SimfuseError  # noqa: E402

#: kernels per graph / per queued burst: enough that the events' own cost (about 1 us) is under 1% per kernel
N_KERNELS = 500
REPS = 20
#: what the summary averages: trivial one-block kernels (no bandwidth, no waves)
TRIVIAL = ("torch_add1", "triton_store_1")
FIELDS = ["gpu", "kernel", "mode", "programs", "n_kernels", "per_kernel_median_s", "per_kernel_p10_s",
          "per_kernel_p90_s", "reps", "torch", "triton", "date"]


def _kernels():
    """(name, programs, launch()) for each measured kernel."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def store_one(p_ptr):
        tl.store(p_ptr + tl.program_id(0), 1.0)

    x1 = torch.zeros(1, device="cuda")
    big = torch.zeros(4 * 1024 * 1024, device="cuda")  # 16 MiB fp32
    buf = torch.zeros(1056, device="cuda")
    out = [("torch_add1", 1, lambda: x1.add_(1.0)),
           ("torch_add_16mb", 0, lambda: big.add_(1.0))]
    for g in (1, 132, 1056):
        out.append((f"triton_store_{g}", g, lambda g=g: store_one[(g,)](buf)))
    return out


def _queued(launch, n: int, reps: int) -> list[float]:
    """Per-kernel seconds of ``n`` eager launches queued behind a sleep kernel."""
    import torch

    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(60_000_000)  # ~30 ms at 2 GHz: the host queues the n launches meanwhile
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n):
            launch()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3 / n)
    return ts


def _single(launch, reps: int) -> list[float]:
    import torch

    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    return ts


def measure(out: str) -> None:
    import torch
    import triton

    from simfuse.kernels.timing import graph_bench, quantiles

    if not torch.cuda.is_available():
        raise SimfuseError("launch_latency.py measure needs a CUDA GPU (none found)")
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    common = {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    rows = []
    for name, programs, launch in _kernels():
        for _ in range(3):  # compile, and fill the caches
            launch()
        torch.cuda.synchronize()

        def burst(launch=launch):
            for _ in range(N_KERNELS):
                launch()

        t = graph_bench(burst, reps=REPS, per_call=N_KERNELS, warm_s=0.3)
        rows.append({**common, "kernel": name, "mode": "graph", "programs": programs, "n_kernels": N_KERNELS,
                     "per_kernel_median_s": t.median_s, "per_kernel_p10_s": t.p10_s, "per_kernel_p90_s": t.p90_s,
                     "reps": t.replays})
        for mode, ts, n in (("queued", _queued(launch, N_KERNELS, REPS), N_KERNELS),
                            ("single", _single(launch, REPS), 1)):
            med, p10, p90 = quantiles(ts)
            rows.append({**common, "kernel": name, "mode": mode, "programs": programs, "n_kernels": n,
                         "per_kernel_median_s": med, "per_kernel_p10_s": p10, "per_kernel_p90_s": p90,
                         "reps": len(ts)})
        for r in rows[-3:]:
            print(f"{r['kernel']:>16} {r['mode']:>7}: {r['per_kernel_median_s'] * 1e6:8.3f} us "
                  f"(p10 {r['per_kernel_p10_s'] * 1e6:.3f}, p90 {r['per_kernel_p90_s'] * 1e6:.3f})", flush=True)
    tmp = Path(out).with_suffix(".tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(out)


def read_table(path: str | Path) -> list[dict]:
    """The measured rows, validated: a clear error naming the file and field on a malformed table."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as e:
        raise SimfuseError(f"{path}: cannot read ({e.strerror})") from None
    if not rows:
        raise SimfuseError(f"{path}: no rows")
    missing = [f for f in ("gpu", "kernel", "mode", "per_kernel_median_s") if f not in rows[0]]
    if missing:
        raise SimfuseError(f"{path}: missing column(s) {', '.join(missing)}")
    for i, r in enumerate(rows, start=2):
        try:
            v = float(r["per_kernel_median_s"])
        except (TypeError, ValueError):
            raise SimfuseError(f"{path}:{i}: per_kernel_median_s is not a number: "
                               f"{r['per_kernel_median_s']!r}") from None
        if not v > 0:
            raise SimfuseError(f"{path}:{i}: per_kernel_median_s must be > 0, got {v}")
        r["per_kernel_median_s"] = v
    return rows


def launch_latency_estimate_s(rows: list[dict], mode: str) -> float:
    """The per-kernel launch latency of back-to-back kernels in ``mode`` (``queued``: eager launches the host
    keeps ahead of the GPU; ``graph``: replayed from a CUDA graph): the median of that mode's per-kernel times
    of the trivial one-block kernels (:data:`TRIVIAL`)."""
    vals = [r["per_kernel_median_s"] for r in rows if r["kernel"] in TRIVIAL and r["mode"] == mode]
    if not vals:
        raise SimfuseError(f"no {mode} rows of the trivial kernels {', '.join(TRIVIAL)}")
    return statistics.median(vals)


def summary(paths: list[str]) -> None:
    rows = [r for p in paths for r in read_table(p)]
    for gpu in sorted({r["gpu"] for r in rows}):
        rs = [r for r in rows if r["gpu"] == gpu]
        print(f"{gpu} ({len(paths)} table(s)):")
        for kernel in dict.fromkeys(r["kernel"] for r in rs):
            for mode in dict.fromkeys(r["mode"] for r in rs if r["kernel"] == kernel):
                v = [r["per_kernel_median_s"] * 1e6 for r in rs if r["kernel"] == kernel and r["mode"] == mode]
                print(f"  {kernel:>17} {mode:>7}: median {statistics.median(v):8.3f} us "
                      f"(runs {min(v):.3f}-{max(v):.3f}, {len(v)})")
        for mode, field in (("queued", "kernel_launch_latency_us"), ("graph", "graph_launch_latency_us")):
            print(f"  {field} ({mode}, median of {', '.join(TRIVIAL)}): "
                  f"{launch_latency_estimate_s(rs, mode) * 1e6:.3f} us")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time back-to-back kernels on the GPU")
    m.add_argument("out")
    s = sub.add_parser("summary", help="print the tables and the two launch-latency estimates")
    s.add_argument("csv", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "measure":
            measure(args.out)
        else:
            summary(args.csv)
    except SimfuseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
