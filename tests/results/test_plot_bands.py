"""Sweep figures (simfuse/results/plots.py): a p10-p90 band always holds the point estimate drawn as the line; no
band is named in the legend unless one is drawn; speedup and fused have different markers; titles are wrapped to
the figure's width (never clipped)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simfuse.results import plots


def _frame(with_interval: bool) -> pd.DataFrame:
    """Fused and baseline rows at 8..32 nodes; the speedup's point estimate is the interval's p90 (as a bound
    interval gives when every residual slows the fused kernels) and the fused time sits above its p90 at 32 nodes
    (as a Monte Carlo interval can)."""
    rows = []
    for i, n in enumerate((8, 16, 32)):
        base, fused = 5e-3, 4.4e-3 + 1e-5 * i
        sp = base / fused
        rows.append({"model": "m", "topology": "t", "nodes": n, "gpus": 8 * n, "mode": "baseline",
                     "iteration_time_s": base, "compute_time_s": 3.7e-3, "exposed_comm_time_s": base - 3.7e-3})
        rows.append({"model": "m", "topology": "t", "nodes": n, "gpus": 8 * n, "mode": "fused",
                     "iteration_time_s": fused, "compute_time_s": 3.8e-3, "exposed_comm_time_s": fused - 3.8e-3,
                     "speedup": sp})
        if with_interval:
            rows[-2].update(uncertainty="bound", iteration_time_p10_s=base * 0.97, iteration_time_p50_s=base,
                            iteration_time_p90_s=base * 1.03)
            rows[-1].update(uncertainty="bound", iteration_time_p10_s=fused * 0.98, iteration_time_p50_s=fused,
                            iteration_time_p90_s=fused * (0.995 if n == 32 else 1.1),
                            speedup_p10=sp * 0.92, speedup_p50=sp * 0.98, speedup_p90=sp)
        else:
            for r in rows[-2:]:
                r.update(uncertainty="none", iteration_time_p10_s=np.nan, iteration_time_p50_s=np.nan,
                         iteration_time_p90_s=np.nan)
            rows[-1].update(speedup_p10=np.nan, speedup_p50=np.nan, speedup_p90=np.nan)
    return pd.DataFrame(rows)


@pytest.fixture
def captured(monkeypatch):
    figs = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figs.append(fig) or path)
    return figs


def _bands(ax):
    """The y-extent of every fill_between band of ``ax`` at each x it spans: ``[{x: (lo, hi)}]``."""
    from matplotlib.collections import PolyCollection

    out = []
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        v = coll.get_paths()[0].vertices
        ext = {}
        for x, y in v:
            lo, hi = ext.get(float(x), (np.inf, -np.inf))
            ext[float(x)] = (min(lo, y), max(hi, y))
        out.append(ext)
    return out


def test_bands_hold_the_point_estimate(captured):
    df = _frame(with_interval=True)
    plots.plot_speedup_vs_nodes(df, "unused.png")
    ax1, ax2 = captured[0].axes[:2]
    fused = df[df["mode"] == "fused"].set_index("nodes")
    (sp_band,) = _bands(ax1)
    for n, (lo, hi) in sp_band.items():
        assert lo <= fused.loc[int(n), "speedup"] <= hi
    time_bands = _bands(ax2)
    assert len(time_bands) == 2
    # one of the two is the fused band: the fused time lies inside it at every node count
    fused_band = next(b for b in time_bands if all(
        b[float(n)][0] <= fused.loc[n, "iteration_time_s"] * 1e3 <= b[float(n)][1] for n in fused.index))
    assert fused_band[32.0][1] >= fused.loc[32, "iteration_time_s"] * 1e3  # stretched to hold the point above p90


def test_no_band_named_without_one_drawn(captured):
    plots.plot_speedup_vs_nodes(_frame(with_interval=False), "unused.png")
    fig = captured[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("p10" in lab for lab in labels)
    assert not _bands(fig.axes[0]) and not _bands(fig.axes[1])


def test_zero_width_interval_draws_no_band():
    df = _frame(with_interval=False)
    df["speedup_p10"] = df["speedup_p90"] = df["speedup"]
    assert plots._band(df[df["mode"] == "fused"], "speedup_p10", "speedup_p90", "speedup") is None


def test_speedup_and_fused_have_different_markers(captured):
    plots.plot_speedup_vs_nodes(_frame(with_interval=True), "unused.png")
    leg = captured[0].legends[0]
    markers = {t.get_text(): h.get_marker() for t, h in zip(leg.get_texts(), leg.legend_handles, strict=True)
               if hasattr(h, "get_marker")}
    assert markers["speedup"] != markers["fused"] and markers["fused"] != markers["baseline"]


@given(lo=st.lists(st.floats(0.5, 2.0), min_size=1, max_size=6), data=st.data())
def test_band_contains_point_property(lo, data):
    n = len(lo)
    hi = [a + data.draw(st.floats(0.0, 1.0)) for a in lo]
    point = data.draw(st.lists(st.floats(0.1, 3.0), min_size=n, max_size=n))
    df = pd.DataFrame({"p10": lo, "p90": hi, "x": point})
    band = plots._band(df, "p10", "p90", "x")
    if band is None:  # zero width everywhere: nothing drawn, the point is the whole interval
        assert all(a == b == p for a, b, p in zip(lo, hi, point, strict=True))
        return
    assert np.all(band[0] <= np.asarray(point)) and np.all(np.asarray(point) <= band[1])
    assert np.all(band[0] <= np.asarray(lo)) and np.all(band[1] >= np.asarray(hi))


def test_long_titles_are_wrapped_inside_the_figure(captured):
    df = _frame(with_interval=True)
    df["model"] = "a_model_with_a_rather_long_name_for_a_small_figure"
    plots.plot_breakdown(df, "unused.png")
    fig = captured[0]
    title = fig._suptitle
    assert "\n" in title.get_text()
    renderer = fig.canvas.get_renderer()
    box = title.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
