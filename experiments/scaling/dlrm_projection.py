"""The DLRM projection: what fusing embedding pooling with its All-to-All buys MLPerf DLRM-DCNv2 training, with
its band and its drivers, on H100 and H200 nodes, strong and weak scaling, 8 to 1,024 nodes.

Usage:
    python experiments/scaling/dlrm_projection.py [--out experiments/results/dlrm_projection] [--draws 16]
        [--topologies h100_nvl8_ib_ndr,h200_nvl8_ib_ndr] [--scaling strong,weak] [--nodes 8..1024]
        [--oat-nodes 128,1024] [--workers 2] [--demo | --tiny]

Every point runs ``models/dlrm_dcnv2_mlperf.yaml`` (planned sharding, each mode on the faster of both modes'
plans) with ``uncertainty=inputs``: ``--draws`` Latin hypercube draws of the input ranges the model and topology
files declare, joint with the kernel residuals, give the p10/p50/p90 band; at ``--oat-nodes`` one-at-a-time runs
add the tornado (which input moves the speedup most).  Strong scaling holds the global batch at 131,072
(2^17, so it splits over every power-of-two GPU count); weak scaling holds MLPerf's 16-node per-GPU batch, 1,056.

Writes DIR/projection.csv (one row per GPU, scaling and node count: both modes' times, the speedup and its band,
the top drivers by rank correlation), DIR/sensitivity.csv (the one-at-a-time table at --oat-nodes),
DIR/projection.png (speedup against nodes with p10-p90 bands), DIR/tornado.png and DIR/headline.md (the table
the README shows, made by experiments/scaling/headline.py).  Finished points are reused when rerun (each series is a
simfuse sweep under DIR/<topology>__<scaling>/).  ``--demo`` is what ``make demo`` runs: strong scaling only,
8 draws, 8 to 1,024 nodes; ``--tiny`` is the smoke configuration of the tests.  Weak scaling runs at
``--weak-nodes`` (128 to 1,024 by default): at 1,056 per GPU its smaller node counts are the slowest points to
simulate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.results.io import atomic_write_df, atomic_write_text  # noqa: E402
from simfuse.sweeps import parse_nodes, run_sweep  # noqa: E402
from simfuse.workloads.run import run_point  # noqa: E402

STRONG_GLOBAL_BATCH = 131072
WEAK_BATCH_PER_GPU = 1056  # MLPerf DLRM-DCNv2 DGX H100 submissions at 16 nodes (docs/sources.md S53)
GPU = {"h100_nvl8_ib_ndr": "H100", "h200_nvl8_ib_ndr": "H200"}
HEARTBEAT_S = 30.0  # with series side by side, a progress line this often while none finishes


def scaling_settings(scaling: str, gb: int, bpg: int) -> dict:
    return {"global_batch": str(gb)} if scaling == "strong" else {"batch_per_gpu": str(bpg)}


def _series(model: Path, topo: Path, scaling: str, nodes: list[int], args, out: Path) -> pd.DataFrame:
    settings = {"uncertainty": "inputs", "uncertainty_draws": str(args.draws), "sensitivity": "rank",
                **scaling_settings(scaling, args.global_batch, args.batch_per_gpu)}
    return run_sweep(str(model), str(topo), nodes, out / f"{topo.stem}__{scaling}", workers=args.workers,
                     progress=not args.quiet, plots=False, settings=settings)


def _series_alone(model: Path, topo: Path, scaling: str, nodes: list[int], args, out: Path,
                  workers: int) -> tuple[pd.DataFrame, float]:
    """One series in a worker process, its points spread over ``workers`` processes of its own, no progress line;
    returns its table and its wall time (s)."""
    t = time.perf_counter()
    df = _series(model, topo, scaling, nodes, argparse.Namespace(**{**vars(args), "workers": workers, "quiet": True}),
                 out)
    return df, time.perf_counter() - t


def _all_series(model: Path, jobs: list, args, out: Path, t0: float) -> list[pd.DataFrame]:
    """Every series' table, in ``jobs`` order.  With several workers and several series, the series run side by
    side, one per worker process (each its points in turn): a series' slowest point (8 nodes: 64 ranks
    simulated one by one) then overlaps the other series' points, where running the series one after the other,
    their points spread over the workers, left a worker idle behind each slowest point."""
    def done(scaling, topo_name, seconds):
        print(f"{GPU.get(topo_name, topo_name)} {scaling}: done in {seconds:.0f} s "
              f"({time.perf_counter() - t0:.0f} s in all)", flush=True)

    if args.workers < 2 or len(jobs) < 2:
        frames = []
        for scaling, topo_name, series_nodes in jobs:
            t_series = time.perf_counter()
            frames.append(_series(model, ROOT / "topologies" / f"{topo_name}.yaml", scaling, series_nodes, args, out))
            done(scaling, topo_name, time.perf_counter() - t_series)
        return frames
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    procs = min(args.workers, len(jobs))
    inner = max(1, args.workers // procs)  # more workers than series: each series spreads its points over the rest
    pool = ProcessPoolExecutor(max_workers=procs)
    try:
        futs = {pool.submit(_series_alone, model, ROOT / "topologies" / f"{topo_name}.yaml", scaling, series_nodes,
                            args, out, inner): i for i, (scaling, topo_name, series_nodes) in enumerate(jobs)}
        frames: list = [None] * len(jobs)
        pending = set(futs)
        while pending:
            finished, pending = wait(pending, timeout=HEARTBEAT_S, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = futs[fut]
                frames[i], seconds = fut.result()  # a series' error is raised here, the others cancelled below
                done(jobs[i][0], jobs[i][1], seconds)
            if pending and not finished and not args.quiet:  # a line every HEARTBEAT_S while nothing finishes
                # the executor marks one queued call more than it has workers as running: name the first procs
                running = [f for f in sorted(pending, key=futs.get) if f.running()][:procs]
                names = ", ".join(f"{GPU.get(jobs[futs[f]][1], jobs[futs[f]][1])} {jobs[futs[f]][0]}" for f in running)
                queued = len(pending) - len(running)
                print(f"running: {names}" + (f"; {queued} series queued" if queued else "")
                      + f" ({time.perf_counter() - t0:.0f} s in all)", flush=True)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # fail at once, not after the queued series
        raise
    pool.shutdown()
    return frames


def _oat(model: Path, topo: Path, scaling: str, n: int, args) -> list[dict]:
    settings = {"uncertainty": "inputs", "uncertainty_draws": str(args.draws), "sensitivity": "oat",
                **scaling_settings(scaling, args.global_batch, args.batch_per_gpu)}
    rows = run_point(str(model), str(topo), n, settings=settings, workers=args.workers)
    fused = next(r for r in rows if r["mode"] == "fused")
    sens = json.loads(fused["sensitivity_json"])
    for r in sens:
        r.update({"gpu": GPU.get(topo.stem, topo.stem), "topology": topo.stem, "scaling": scaling, "nodes": n})
    return sens


def projection_rows(df: pd.DataFrame, topo: str, scaling: str) -> list[dict]:
    """One row per node count of a sweep's results (both modes)."""
    out = []
    for n, g in df.groupby("nodes", sort=True):
        b = g[g["mode"] == "baseline"].iloc[0]
        f = g[g["mode"] == "fused"].iloc[0]
        row = {"gpu": GPU.get(topo, topo), "topology": topo, "scaling": scaling, "nodes": int(n),
               "gpus": int(f["gpus"]), "global_batch": int(f["global_batch"]),
               "baseline_ms": b["iteration_time_s"] * 1e3, "fused_ms": f["iteration_time_s"] * 1e3,
               "speedup": f["speedup"], "speedup_p10": f.get("speedup_p10"), "speedup_p50": f.get("speedup_p50"),
               "speedup_p90": f.get("speedup_p90"), "baseline_p50_ms": b.get("iteration_time_p50_s", float("nan")) * 1e3,
               "fused_p50_ms": f.get("iteration_time_p50_s", float("nan")) * 1e3}
        for i in (1, 2, 3):
            row[f"driver{i}"] = f.get(f"driver{i}", "")
        out.append(row)
    return out


def plot_projection(table: pd.DataFrame, path: Path) -> None:
    from simfuse.results.plots import _figure, save_figure

    series = list(table.groupby(["scaling", "gpu"], sort=True))
    fig = _figure(7.5, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    colors = {"H100": "#4c72b0", "H200": "#dd8452"}
    for (scaling, gpu), g in series:
        g = g.sort_values("nodes")
        ls = "-" if scaling == "strong" else "--"
        c = colors.get(gpu, None)
        lo = g[["speedup_p10", "speedup"]].min(axis=1)
        hi = g[["speedup_p90", "speedup"]].max(axis=1)
        ax.fill_between(g["nodes"], lo, hi, color=c, alpha=0.15, lw=0)
        ax.plot(g["nodes"], g["speedup"], ls, marker="o", ms=3, color=c,
                label=f"{gpu}, {scaling} scaling (band: p10-p90 of the input draws, widened to the line)")
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(table["nodes"])))
    ax.set_xticklabels([str(n) for n in sorted(set(table["nodes"]))])
    ax.set_xlabel("nodes (8 GPUs each)")
    ax.set_ylabel("speedup (bulk-synchronous / fused step)")
    ax.legend(fontsize=7)
    fig.suptitle("MLPerf DLRM-DCNv2: fused embedding + All-to-All, planned sharding", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def check_args(args) -> tuple[list[int], list[int], list[int] | None]:
    """Every argument checked before any point runs (a SpecError naming it): the node lists, the scalings, the
    model and topology files, the draws/batch settings, the workers and a writable ``--out``; returns the strong,
    the oat and the weak node lists (None: the strong ones)."""
    from simfuse.arguments import check_out_writable, check_setting, check_workers
    from simfuse.errors import SpecError
    from simfuse.fused.knobs import parse_execution
    from simfuse.spec import load_topology, load_workload

    nodes = parse_nodes(args.nodes)
    oat_nodes = parse_nodes(args.oat_nodes, "--oat-nodes") if args.oat_nodes else []
    weak_nodes = parse_nodes(args.weak_nodes, "--weak-nodes") if args.weak_nodes else None
    for scaling in args.scaling.split(","):
        if scaling not in ("strong", "weak"):
            raise SpecError("<argument>", "--scaling", f"unknown scaling {scaling!r}; expected strong, weak or both")
        settings = {"uncertainty": "inputs", "uncertainty_draws": str(args.draws),
                    **scaling_settings(scaling, args.global_batch, args.batch_per_gpu)}
        for key, flag in (("uncertainty_draws", "--draws"), ("global_batch", "--global-batch"),
                          ("batch_per_gpu", "--batch-per-gpu")):
            if key in settings:
                check_setting(key, settings[key], flag)
        parse_execution(settings)
    check_workers(args.workers)
    load_workload(args.model)
    for topo_name in args.topologies.split(","):
        load_topology(ROOT / "topologies" / f"{topo_name}.yaml")
    check_out_writable(args.out)
    return nodes, oat_nodes, weak_nodes


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "dlrm_projection.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(ROOT / "models/dlrm_dcnv2_mlperf.yaml"))
    p.add_argument("--topologies", default="h100_nvl8_ib_ndr,h200_nvl8_ib_ndr")
    p.add_argument("--scaling", default="strong,weak")
    p.add_argument("--nodes", default="8,16,32,64,128,256,512,1024")
    p.add_argument("--weak-nodes", default="128,256,512,1024",
                   help="node counts of the weak-scaling series (its small node counts run at 1,056 per GPU "
                        "on uneven placements, the slowest points to simulate)")
    p.add_argument("--oat-nodes", default="128,1024")
    p.add_argument("--draws", type=int, default=16)
    p.add_argument("--global-batch", type=int, default=STRONG_GLOBAL_BATCH)
    p.add_argument("--batch-per-gpu", type=int, default=WEAK_BATCH_PER_GPU)
    p.add_argument("--out", default=str(ROOT / "experiments/results/dlrm_projection"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--demo", action="store_true",
                   help="make demo: strong scaling, 8, 16, 128, 256, 512 and 1,024 nodes, 8 draws, no tornado")
    p.add_argument("--tiny", action="store_true", help="smoke configuration: synthetic model, 1-2 nodes")
    args = p.parse_args(argv)
    if args.demo:
        args.scaling, args.draws, args.oat_nodes, args.nodes = "strong", 8, "", "8,16,128,256,512,1024"
    if args.tiny:
        args.model, args.topologies, args.nodes, args.oat_nodes = (str(ROOT / "models/dlrm_synthetic.yaml"),
                                                                   "h100_nvl8_ib_ndr", "1,2", "2")
        args.draws, args.global_batch, args.batch_per_gpu, args.weak_nodes = 4, 4096, 256, ""
    nodes, oat_nodes, weak_nodes = check_args(args)
    out = Path(args.out)
    model = Path(args.model)
    jobs = [(scaling, topo_name, nodes if scaling == "strong" or weak_nodes is None else weak_nodes)
            for scaling in args.scaling.split(",") for topo_name in args.topologies.split(",")]
    t0 = time.perf_counter()
    frames = _all_series(model, jobs, args, out, t0)
    rows, sens = [], []
    for (scaling, topo_name, _n), df in zip(jobs, frames, strict=True):
        rows += projection_rows(df, topo_name, scaling)
    for scaling, topo_name, _n in jobs:
        for n in oat_nodes:
            if scaling == "strong" and n in nodes:
                sens += _oat(model, ROOT / "topologies" / f"{topo_name}.yaml", scaling, n, args)
    if sens:
        print(f"one-at-a-time runs done ({time.perf_counter() - t0:.0f} s in all)", flush=True)
    table = pd.DataFrame(rows)
    atomic_write_df(table, out / "projection.csv")
    plot_projection(table, out / "projection.png")
    if sens:
        from simfuse.results.tornado import plot_tornado

        st = pd.DataFrame(sens)
        atomic_write_df(st, out / "sensitivity.csv")
        st = st.assign(panel=st["gpu"] + ", " + st["nodes"].astype(str) + " nodes")
        plot_tornado(st, out / "tornado.png", group="panel",
                     title="What moves the speedup (strong scaling; one input at a time)")
    from headline import headline_table  # experiments/scaling/headline.py

    atomic_write_text(out / "headline.md", headline_table(table))
    print(headline_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
