"""Node-count ticks and legends of the scaling figures stay readable from 1 to 1,024+ nodes."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.figure import Figure

from simfuse.results.plots import node_ticks, plot_breakdown, plot_speedup_vs_nodes

matplotlib.use("Agg")


@pytest.mark.parametrize("hi", [8, 1024, 4096])
def test_node_ticks_every_count_few_labels(hi):
    nodes = [2**i for i in range(hi.bit_length())]
    ax = Figure().add_subplot()
    ax.set_xscale("log", base=2)
    node_ticks(ax, nodes, {n: 8 * n for n in nodes})
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert list(ax.get_xticks()) == nodes  # a tick at every node count
    shown = [lab for lab in labels if lab]
    assert 2 <= len(shown) <= 8 and labels[0] and labels[-1]
    assert f"{hi:,}\n({8 * hi:,} GPUs)" in labels


def test_scaling_figures_put_legends_off_the_axes(tmp_path):
    import pandas as pd

    rows = [{"nodes": n, "gpus": 8 * n, "mode": m, "iteration_time_s": t, "compute_time_s": 0.005,
             "exposed_comm_time_s": t - 0.005}
            for n in (8, 64, 1024) for m, t in (("baseline", 0.02 + n * 1e-5), ("fused", 0.015 + n * 1e-5))]
    df = pd.DataFrame(rows)
    assert plot_speedup_vs_nodes(df, tmp_path / "s.png").stat().st_size > 0
    assert plot_breakdown(df, tmp_path / "b.png").stat().st_size > 0
