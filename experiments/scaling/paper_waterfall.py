"""From the paper's setting to the realistic projection, one change at a time: why simfuse's DLRM speedup at 128
nodes is not the paper's "up to 21%".

Usage:
    python experiments/scaling/paper_waterfall.py [--nodes 128] [--topology h100_nvl8_ib_ndr]
        [--out experiments/results/paper_waterfall] [--workers 2] [--tiny]

Starts from ``models/dlrm_dcnv2_paper_setting.yaml`` (table-wise, global batch 65,536, no ids' exchange; each
assumption stated in the file) and applies, in order, the changes that separate it from the projection's point
(``models/dlrm_dcnv2_mlperf.yaml`` at a global batch of 131,072 with its nominal inputs): planned sharding,
the projection's batch, the ids' exchange.  Each step changes one thing and records both modes' step times and
the speedup; the last step is checked against the realistic model run directly.  Then the fused speedup on the
HugeCTR-faithful configurations (NVIDIA's MLPerf submissions: their plans, fp16 exchange, uint32 ids, CUDA graph,
SHARP) at the node counts they were run at, and the transport what-if: the realistic model with the bulk
baseline posting its messages as the fused kernel does (GPU-initiated) instead of through NCCL's CPU proxy.
Writes DIR/waterfall.csv, DIR/waterfall.png, DIR/transport_whatif.csv, DIR/hugectr_fused.csv.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.fused.knobs import parse_execution  # noqa: E402
from simfuse.results.io import atomic_write_df  # noqa: E402
from simfuse.spec import load_workload  # noqa: E402
from simfuse.system import System  # noqa: E402
from simfuse.workloads.run import simulate_workload  # noqa: E402

#: (label, what changes, spec fields replaced) applied cumulatively to the paper setting
STEPS = (
    ("paper setting", "table-wise, global batch 65,536, no ids' exchange", {}),
    ("planned sharding", "the planner's sharding (each mode on the faster of both modes' plans)",
     {"placement": "planned"}),
    ("batch 131,072", "the projection's strong-scaling global batch", {"global_batch": 131072}),
    ("ids' exchange", "every sample's sparse ids sent to their shard holders, prefetched beside the step",
     {"input_dist": "prefetch"}),
)
HUGECTR = (("dlrm_dcnv2_mlperf_hugectr.yaml", 1), ("dlrm_dcnv2_mlperf_hugectr_8n.yaml", 8),
           ("dlrm_dcnv2_mlperf_hugectr_16n.yaml", 16))


def _run(spec, system, nodes, workers):
    res = simulate_workload(spec, system, nodes, execution=parse_execution({"uncertainty": "none"}),
                            workers=workers)
    b, f = res["baseline"].iteration_time_s, res["fused"].iteration_time_s
    return {"baseline_ms": b * 1e3, "fused_ms": f * 1e3, "speedup": b / f}


def waterfall(paper, realistic, system, nodes, workers, steps=STEPS) -> pd.DataFrame:
    rows, spec, prev = [], paper, None
    for i, (label, what, change) in enumerate(steps):
        spec = dataclasses.replace(spec, **change)
        r = _run(spec, system, nodes, workers)
        r.update({"step": i, "label": label, "change": what, "nodes": nodes, "topology": system.name,
                  "delta_speedup": r["speedup"] - prev if prev is not None else 0.0})
        prev = r["speedup"]
        rows.append(r)
    direct = _run(realistic, system, nodes, workers)
    rows.append({"step": len(steps), "label": "realistic (check)", "change": f"{realistic.name} run directly",
                 "nodes": nodes, "topology": system.name, **direct, "delta_speedup": direct["speedup"] - prev})
    cols = ["step", "label", "change", "nodes", "topology", "baseline_ms", "fused_ms", "speedup", "delta_speedup"]
    return pd.DataFrame(rows)[cols]


def plot_waterfall(df: pd.DataFrame, path: Path) -> None:
    from simfuse.results.plots import _figure, save_figure

    fig = _figure(7.5, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    steps = df[df["label"] != "realistic (check)"]
    base = 1.0
    for i, (_, r) in enumerate(steps.iterrows()):
        lo, hi = (1.0, r["speedup"]) if i == 0 else (min(base, r["speedup"]), max(base, r["speedup"]))
        color = "#4c72b0" if i == 0 else ("#55a868" if r["speedup"] >= base else "#c44e52")
        ax.bar(i, hi - lo, bottom=lo, color=color, width=0.6)
        ax.text(i, hi + 0.003, f"{r['speedup']:.3f}", ha="center", fontsize=8)
        base = r["speedup"]
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xticks(range(len(steps)))
    ax.set_xticklabels(steps["label"], fontsize=8)
    ax.set_ylabel("speedup (bulk-synchronous / fused)")
    ax.set_ylim(min(0.95, steps["speedup"].min() - 0.02), max(steps["speedup"].max() + 0.04, 1.05))
    n, topo = int(df["nodes"].iloc[0]), df["topology"].iloc[0]
    fig.suptitle(f"From the paper's setting to the realistic one: DLRM-DCNv2, {n} nodes, {topo}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def hugectr_rows(system, workers, tiny: bool) -> pd.DataFrame:
    rows = []
    for f, n in HUGECTR[:1] if tiny else HUGECTR:
        spec = load_workload(ROOT / "models" / f)
        if tiny:
            spec = dataclasses.replace(spec, global_batch=8 * 512)
        r = _run(spec, system, n, workers)
        rows.append({"model": spec.name, "nodes": n, "gpus": n * system.gpus_per_node,
                     "global_batch": spec.global_batch, "topology": system.name, **r})
    return pd.DataFrame(rows)


def transport_rows(realistic, system, node_counts, workers) -> pd.DataFrame:
    """The realistic model with the bulk baseline's messages posted as the fused kernel posts its puts
    (``collectives.net_overhead_us`` set to ``gpu_initiated.put_post_us``: a GPU-initiated bulk all-to-all, as
    NVSHMEM or NCCL's device API would run it) against NCCL's CPU proxy: how much of the speedup is the transport
    and how much the overlap."""
    t = system.nominal
    same = system.with_nominal(t.with_overrides({"collectives.net_overhead_s": t.gpu_initiated.put_post_s}))
    rows = []
    for n in node_counts:
        for label, sy in (("NCCL proxy (shipped)", system), ("GPU-initiated bulk", same)):
            rows.append({"nodes": n, "baseline_transport": label,
                         "net_overhead_us": sy.topology.collectives.net_overhead_s * 1e6,
                         **_run(realistic, sy, n, workers)})
    return pd.DataFrame(rows)


def check_args(args) -> None:
    """Every argument checked before any point runs (a SpecError naming it): the node count, the workers, both
    topology files and a writable ``--out``."""
    from simfuse.arguments import check_out_writable, check_workers
    from simfuse.checks import check_nodes
    from simfuse.spec import load_topology

    check_nodes(args.nodes)
    check_workers(args.workers)
    load_topology(ROOT / "topologies" / f"{args.topology}.yaml")
    load_topology(ROOT / "topologies" / f"{args.hugectr_topology}.yaml")
    check_out_writable(args.out)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "paper_waterfall.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--topology", default="h100_nvl8_ib_ndr")
    p.add_argument("--hugectr-topology", default="h100_nvl8_ib_ndr_sharp")
    p.add_argument("--out", default=str(ROOT / "experiments/results/paper_waterfall"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="smoke configuration: 2 nodes, small batches")
    args = p.parse_args(argv)
    check_args(args)
    out = Path(args.out)
    system = System.load(ROOT / "topologies" / f"{args.topology}.yaml")
    paper = load_workload(ROOT / "models/dlrm_dcnv2_paper_setting.yaml")
    realistic = dataclasses.replace(load_workload(ROOT / "models/dlrm_dcnv2_mlperf.yaml"), global_batch=131072)
    steps = STEPS
    if args.tiny:
        args.nodes = 2
        paper = dataclasses.replace(paper, global_batch=4096)
        realistic = dataclasses.replace(realistic, global_batch=8192)
        steps = tuple((lbl, what, {k: (8192 if k == "global_batch" else v) for k, v in ch.items()})
                      for lbl, what, ch in STEPS)
    df = waterfall(paper, realistic, system, args.nodes, args.workers, steps)
    atomic_write_df(df, out / "waterfall.csv")
    plot_waterfall(df, out / "waterfall.png")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    tr = transport_rows(realistic, system, [args.nodes] if args.tiny else sorted({args.nodes, 1024}), args.workers)
    atomic_write_df(tr, out / "transport_whatif.csv")
    print(tr.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    h = hugectr_rows(System.load(ROOT / "topologies" / f"{args.hugectr_topology}.yaml"), args.workers, args.tiny)
    atomic_write_df(h, out / "hugectr_fused.csv")
    print(h.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
