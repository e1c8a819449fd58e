"""Figures shared by the experiments and the CLI (matplotlib, Agg backend, no pyplot state).

Every function builds its own :class:`matplotlib.figure.Figure` (never ``pyplot``), so nothing leaks between
calls or threads, and saves it atomically: a temporary file in the target folder, then ``os.replace``.
Times in the data are seconds; axes show microseconds or milliseconds as labelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .io import atomic_write

__all__ = ["plot_speedup_vs_size", "plot_timeline", "plot_speedup_vs_nodes", "plot_breakdown", "save_figure"]

_DPI = 100


def _figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=_DPI)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: Path | str) -> Path:
    """Save ``fig`` to ``path`` (format from the suffix) through a temporary file and ``os.replace``."""
    path = Path(path)
    # fixed metadata: no creation date / software version, so re-running gives the same bytes
    meta = {"Software": None} if path.suffix.lower() in ("", ".png") else None
    fmt = path.suffix.lstrip(".") or "png"
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=_DPI, metadata=meta, format=fmt))
    return path


def _fmt_bytes(b: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b:g} B"


# -------------------------------------------------------------------------------------------------------
# fused-operator sweep
# -------------------------------------------------------------------------------------------------------
def plot_speedup_vs_size(df, path: Path | str, *, size_col: str = "comm_bytes_per_rank",
                         title: str | None = None) -> Path:
    """Speedup (baseline / fused time) against size, one panel per operator, one line per GPU configuration.

    ``df`` needs columns ``op``, ``nodes``, ``gpus_per_node``, ``speedup`` and ``size_col`` (default the
    per-rank collective buffer in bytes; log x axis).  Several rows at the same size (other parameters
    varied) are drawn as points and the line joins their mean.
    """
    ops = list(dict.fromkeys(df["op"]))
    n = max(1, len(ops))
    fig = _figure(4.6 * n, 3.8)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, op in zip(axes, ops, strict=False):
        sub = df[df["op"] == op]
        configs = sorted({(int(a), int(b)) for a, b in zip(sub["nodes"], sub["gpus_per_node"], strict=False)})
        cmap = _colors(len(configs))
        for color, (nodes, g) in zip(cmap, configs, strict=False):
            c = sub[(sub["nodes"] == nodes) & (sub["gpus_per_node"] == g)]
            x = c[size_col].to_numpy(dtype=float)
            y = c["speedup"].to_numpy(dtype=float)
            label = f"{nodes * g} GPUs ({nodes}x{g})" if nodes > 1 else f"{g} GPUs (1 node)"
            ax.scatter(x, y, s=9, color=color, alpha=0.45, linewidths=0)
            ux = np.unique(x)
            my = [float(np.mean(y[x == v])) for v in ux]
            ax.plot(ux, my, "-o", ms=3, lw=1.3, color=color, label=label)
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_title(op)
        ax.set_xlabel("per-rank collective buffer (bytes)" if size_col == "comm_bytes_per_rank" else size_col)
        ax.set_ylabel("speedup (baseline / fused)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, frameon=False)
        ticks = ax.get_xticks()
        ax.set_xticks(ticks)
        ax.set_xticklabels([_fmt_bytes(t) if t > 0 else "" for t in ticks], fontsize=7, rotation=30)
        if len(sub):
            lo, hi = float(sub[size_col].min()), float(sub[size_col].max())
            ax.set_xlim(lo / 1.5, hi * 1.5)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(v) for v in np.linspace(0.0, 0.9, max(1, n))]


# -------------------------------------------------------------------------------------------------------
# timeline (Gantt) of simulated runs
# -------------------------------------------------------------------------------------------------------
def _unpack(run):
    from .perfetto import unpack_run

    return unpack_run(run)


def _busy_links(net, max_links: int, names: Sequence[str] | None = None):
    """``[(name, t0[], t1[], utilisation[])]`` of the busiest links (by bytes carried), in link order, or of
    the links named in ``names`` (in that order; unknown or idle names are skipped)."""
    usage = (getattr(net, "usage", None) or []) if net is not None else []
    if not usage:
        return []
    t0 = np.array([u[0] for u in usage])
    t1 = np.array([u[1] for u in usage])
    loads = np.vstack([np.asarray(u[2], dtype=float) for u in usage])
    util = loads / np.asarray(net.capacity, dtype=float)[None, :]
    carried = (loads * (t1 - t0)[:, None]).sum(axis=0)
    busy = np.flatnonzero(carried > 0)
    if names is not None:
        index = {n: i for i, n in enumerate(net.names)}
        keep = [index[n] for n in names if n in index and carried[index[n]] > 0]
    else:
        keep = sorted(busy[np.argsort(-carried[busy], kind="stable")][:max_links].tolist())
    out = []
    for li in keep:
        on = loads[:, li] > 0
        out.append((net.names[li], t0[on], t1[on], np.clip(util[on, li], 0.0, 1.0)))
    return out


def plot_timeline(target, runs: Sequence[tuple], *, rank: int = 0, max_links: int = 6,
                  links: Sequence[str] | None = None, title: str | None = None):
    """Gantt chart of simulated runs, e.g. one baseline and one fused execution of an operator.

    ``runs``: ``(label, sim, net)`` (or ``(label, sim, fabric, net)``) with the recorder enabled and, for the
    link rows, ``record_usage=True`` on the network.  For each run and rank ``rank`` the rows are: compute
    (kernel records), bulk collectives, the fused operator's span, and one row per busy link (the ``max_links``
    busiest, or those named in ``links``) whose shade is the link's utilisation (load / capacity).  Overlap of compute and communication
    shows as link activity under the compute bar.  ``target`` is a matplotlib Axes (drawn into, returned) or
    a path (a figure is made and saved there; the path is returned).
    """
    from matplotlib.patches import Patch

    if hasattr(target, "broken_barh"):
        ax, fig, path = target, None, None
    else:
        path = Path(target)
        rows_guess = sum(3 + min(max_links, len(getattr(_unpack(r)[2], "names", []) or [])) for r in runs)
        fig = _figure(10.0, 1.2 + 0.32 * max(4, rows_guess))
        ax = fig.add_subplot(1, 1, 1)
    colors = {"kernel": "#4C72B0", "collective": "#DD8452", "fused": "#8172B3", "link": "#C44E52"}
    yticks, ylabels = [], []
    y = 0.0
    t_max = 0.0
    for run in runs:
        label, sim, net = _unpack(run)
        recs = [r for r in sim.recorder.records if int(r.rank) == rank] if sim is not None else []
        rows = [("compute", [r for r in recs if r.kind == "kernel"], "kernel"),
                ("collective", [r for r in recs if r.kind == "collective"], "collective"),
                ("fused op", [r for r in recs if r.kind == "fused"], "fused")]
        rows = [row for row in rows if row[1]]
        end_run = max([r.end_s for r in recs] + [0.0])
        for name, rr, kind in rows:
            spans = [(r.start_s * 1e6, max(r.end_s - r.start_s, 0.0) * 1e6) for r in rr]
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colors[kind], alpha=0.9)
            yticks.append(y)
            ylabels.append(f"{label}: {name}")
            y += 1
        for lname, t0, t1, u in _busy_links(net, max_links, links):
            spans = list(zip((t0 * 1e6).tolist(), ((t1 - t0) * 1e6).tolist(), strict=False))
            shades = [(0.77, 0.31, 0.32, 0.15 + 0.85 * float(v)) for v in u]
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=shades, linewidth=0)
            yticks.append(y)
            ylabels.append(f"{label}: {lname}")
            end_run = max(end_run, float(t1.max()) if len(t1) else 0.0)
            y += 1
        ax.axvline(end_run * 1e6, color="0.3", lw=0.8, ls=":")
        ax.text(end_run * 1e6, y - 0.5, f" {label} ends {end_run * 1e6:.1f} us", fontsize=7, va="center")
        t_max = max(t_max, end_run)
        ax.axhline(y - 0.5, color="0.7", lw=0.6)
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, t_max * 1e6 * 1.18 if t_max > 0 else 1)
    ax.set_xlabel("time (us)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=colors["kernel"], label="compute kernel"),
                       Patch(color=colors["collective"], label="bulk collective"),
                       Patch(color=colors["fused"], label="fused operator span"),
                       Patch(color=colors["link"], label="link busy (shade = utilisation)")],
              fontsize=7, loc="lower right")
    if title:
        ax.set_title(title, fontsize=9)
    if fig is None:
        return ax
    fig.tight_layout()
    return save_figure(fig, path)


# -------------------------------------------------------------------------------------------------------
# scaling figures (DLRM and others): node count on x
# -------------------------------------------------------------------------------------------------------
def _group_cols(df) -> list[str]:
    """Columns that split the lines: model, topology and the scaling mode (strong / weak / model, when the
    sweep's rows carry it), so strong and weak scaling runs show as separate lines."""
    return [c for c in ("model", "topology", "scaling") if c in df.columns and not df[c].isna().any()
            and df[c].nunique() > 1]  # a column with one value splits nothing (it belongs in the title)


def _context(df) -> str:
    """``model on topology`` (``, scaling``) for the columns that have a single value (they go in the title)."""
    one = {c: str(df[c].iloc[0]) for c in ("model", "topology", "scaling") if c in df.columns and len(df)
           and df[c].nunique() == 1 and not df[c].isna().any()}
    parts = [one[c] for c in ("model",) if c in one]
    if "topology" in one:
        parts.append(("on " if parts else "") + one["topology"])
    if one.get("scaling") in ("strong", "weak"):
        parts.append(f"({one['scaling']} scaling)")
    return " ".join(parts)


def _group_label(key, cols) -> str:
    if not cols:
        return ""
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(str(k) for k in key)


def _with_speedup(df):
    """Fused rows with a ``speedup`` column (computed from the baseline row of the same config if absent)."""
    cols = _group_cols(df)
    keys = cols + ["nodes"]
    fused = df[df["mode"] == "fused"].copy()
    if "speedup" not in fused.columns or fused["speedup"].isna().all():
        base = df[df["mode"] == "baseline"][keys + ["iteration_time_s"]].rename(
            columns={"iteration_time_s": "_base_s"})
        fused = fused.merge(base, on=keys, how="left")
        fused["speedup"] = fused["_base_s"] / fused["iteration_time_s"]
    return fused


def plot_speedup_vs_nodes(df, path: Path | str, *, title: str | None = None) -> Path:
    """Left: speedup of fused over baseline against node count; right: iteration time of both.

    ``df`` columns: ``nodes``, ``gpus``, ``mode`` (``baseline``/``fused``), ``iteration_time_s``; ``speedup`` on
    fused rows (computed from the matching baseline row when missing); optional ``model`` and/or ``topology``
    columns draw one line per value; optional ``speedup_p10``/``speedup_p90`` and
    ``iteration_time_p10_s``/``iteration_time_p90_s`` draw prediction-interval bands (only where the interval has
    a width; a band is stretched to hold the point estimate drawn as the line, see :func:`_band`).  Markers:
    speedup diamonds, baseline squares, fused circles.
    """
    cols = _group_cols(df)
    fused = _with_speedup(df)
    fig = _figure(10.0, 4.0)
    ax1, ax2 = fig.subplots(1, 2)
    groups = list(fused.groupby(cols, sort=True)) if cols else [(None, fused)]
    colors = _colors(len(groups))
    for color, (key, g) in zip(colors, groups, strict=False):
        g = g.sort_values("nodes")
        lab = _group_label(key, cols) or "fused"
        ax1.plot(g["nodes"], g["speedup"], "-D", ms=4, color=color, label=f"{lab}: speedup" if cols else "speedup")
        band = _band(g, "speedup_p10", "speedup_p90", "speedup")
        if band is not None:
            ax1.fill_between(g["nodes"], *band, color=color, alpha=0.18, lw=0,
                             label=f"{lab}: p10-p90 (widened to the line)" if cols else
                             f"speedup p10-p90 {_interval_kind(df)}, widened to the line")
        sel = df[df["mode"] == "baseline"]
        fsel = df[df["mode"] == "fused"]
        if cols:
            kk = key if isinstance(key, tuple) else (key,)
            for c, v in zip(cols, kk, strict=False):
                sel = sel[sel[c] == v]
                fsel = fsel[fsel[c] == v]
        sel, fsel = sel.sort_values("nodes"), fsel.sort_values("nodes")
        prefix = f"{lab}: " if cols else ""
        ax2.plot(sel["nodes"], sel["iteration_time_s"] * 1e3, "--s", ms=4, color=color,
                 label=f"{prefix}baseline")
        ax2.plot(fsel["nodes"], fsel["iteration_time_s"] * 1e3, "-o", ms=4, color=color, label=f"{prefix}fused")
        for part, name in ((sel, "baseline"), (fsel, "fused")):
            band = _band(part, "iteration_time_p10_s", "iteration_time_p90_s", "iteration_time_s")
            if band is None:
                continue
            label = None if cols else f"{name} p10-p90 (widened to the line)"
            if name == "baseline":  # hatched, so that it reads apart from the fused band where they overlap
                ax2.fill_between(part["nodes"], band[0] * 1e3, band[1] * 1e3, facecolor="none", edgecolor=color,
                                 hatch="///", alpha=0.35, lw=0, label=label)
            else:
                ax2.fill_between(part["nodes"], band[0] * 1e3, band[1] * 1e3, color=color, alpha=0.15, lw=0,
                                 label=label)
    ax1.axhline(1.0, color="0.5", lw=0.8, ls="--")
    nodes = sorted(set(int(v) for v in df["nodes"]))
    gpus = {int(n): int(gv) for n, gv in zip(df["nodes"], df["gpus"], strict=False)}
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        node_ticks(ax, nodes, gpus)
    t = df["iteration_time_s"].astype(float)
    log_y = float(t.max()) / max(float(t.min()), 1e-300) > 10  # log only where times span a decade or more
    if log_y:
        ax2.set_yscale("log")
        ax2.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        y0, y1 = ax2.get_ylim()
        # label minor ticks (2, 5 x 10^k) only when the axis spans less than about two decades; else they collide
        minor = (matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else "")
                 if y1 / max(y0, 1e-300) < 100 else matplotlib.ticker.NullFormatter())
        ax2.yaxis.set_minor_formatter(minor)
    ax1.set_ylabel("speedup (baseline time / fused time)")
    ax2.set_ylabel("iteration time (ms, log scale)" if log_y else "iteration time (ms)")
    ax1.set_title("speedup of fused over baseline", fontsize=9)
    ax2.set_title("iteration time", fontsize=9)
    ctx = _context(df)
    if title is None and ctx:
        title = f"{ctx}: speedup and iteration time against node count"
    _title(fig, title or "speedup and iteration time against node count")
    _legend_below(fig, [ax1, ax2])
    return save_figure(fig, path)


def _band(df, lo_col: str, hi_col: str, point_col: str):
    """``(lower, upper)`` arrays of a prediction-interval band, or None where there is nothing to draw (no
    columns, no interval: NaN, or an interval of zero width everywhere).  The band is ``[min(p10, point),
    max(p90, point)]``: it always holds the point estimate drawn as the line (a ``bound`` interval has the point at
    one edge when every residual moves the time one way; a Monte Carlo one can miss it: docs/calibration.md)."""
    if not {lo_col, hi_col, point_col} <= set(df.columns):
        return None
    lo, hi = df[lo_col].to_numpy(dtype=float), df[hi_col].to_numpy(dtype=float)
    point = df[point_col].to_numpy(dtype=float)
    lo, hi = np.minimum(lo, point), np.maximum(hi, point)  # (NaN stays NaN: no band at that point)
    width = hi - lo
    if not np.isfinite(width).any() or not (width[np.isfinite(width)] > 0).any():
        return None
    return lo, hi


def _interval_kind(df) -> str:
    """What the bands cover, for the legend: the kernel cost model's residuals (``bound`` / ``mc``), else the
    method named in the ``uncertainty`` column."""
    methods = sorted(set(df["uncertainty"].dropna()) - {"none"}) if "uncertainty" in df.columns else []
    if not methods or set(methods) <= {"bound", "mc"}:
        return "(kernel-model residuals)"
    return f"({', '.join(methods)})"


def node_ticks(ax, nodes: Sequence[int], gpus: dict[int, int] | None = None, max_labels: int = 8) -> None:
    """A tick at every node count; labels ``N`` (and the GPU count on a second line) on at most ``max_labels``
    of them, always the first and the last, and never two closer than their width on a log-2 axis (a label
    ``(8,192 GPUs)`` at 7 pt is ~0.7 in wide; 512 and 1,024 nodes sit one octave apart), so they stay readable
    from 1 to 1,024+ nodes whatever the spacing of the node counts."""
    nodes = sorted(int(n) for n in nodes)
    ax.set_xticks(nodes)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())

    def text(n: int) -> str:
        return f"{n:,}\n({gpus[n]:,} GPUs)" if gpus and n in gpus else f"{n:,}"

    fig = ax.get_figure()
    width_in = ax.get_position().width * fig.get_figwidth()
    lo, hi = ax.get_xlim() if len(nodes) > 1 else (nodes[0] / 2, nodes[0] * 2)
    span = max(math.log2(max(hi, 1e-9) / max(lo, 1e-9)), 1e-9)
    # label width (in) at 7 pt: ~0.06 in per character of the longer line, plus a gap
    def gap(a: int, b: int) -> float:  # octaves two adjacent labels need
        return (max(len(x) for x in (text(a) + "\n" + text(b)).split("\n")) * 0.06 + 0.12) / width_in * span

    step = max(1, -(-len(nodes) // max_labels))
    keep = [nodes[0]]
    for i, n in enumerate(nodes[1:], start=1):
        if i % step == 0 and math.log2(n / keep[-1]) >= gap(keep[-1], n):
            keep.append(n)
    if len(nodes) > 1 and keep[-1] != nodes[-1]:
        while len(keep) > 1 and math.log2(nodes[-1] / keep[-1]) < gap(keep[-1], nodes[-1]):
            keep.pop()
        keep.append(nodes[-1])
    labels = [text(n) if n in keep else "" for n in nodes]
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlabel("nodes (GPUs)" if gpus else "nodes")


def _title(fig, text: str, fontsize: float = 11.0) -> None:
    """A figure title wrapped to the figure's width (about 0.6 em per character), so it is never clipped."""
    import textwrap

    per_line = max(20, int(fig.get_figwidth() * 72 / (fontsize * 0.6)) - 4)
    fig.suptitle("\n".join(textwrap.wrap(text, per_line)) or text, fontsize=fontsize)


def _legend_below(fig, axes, ncol: int | None = None) -> None:
    """One legend under the axes (never on the data); duplicate labels merged."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=False):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if ncol is None:  # as many columns as fit the figure's width at 7 pt (about 0.055 in per character)
        widest = max((len(lab) for lab in labels), default=10)
        ncol = max(1, int(fig.get_figwidth() * 0.95 // (widest * 0.055 + 0.45)))
    fig.tight_layout(rect=(0, 0.1 + 0.04 * (len(labels) // (ncol + 1)), 1, 1))
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=min(ncol, len(labels)), fontsize=7, frameon=False)


def plot_breakdown(df, path: Path | str, *, title: str | None = None) -> Path:
    """Stacked bars per node count: compute and exposed communication, baseline and fused side by side.

    ``df`` columns: ``nodes``, ``mode``, ``compute_time_s``, ``exposed_comm_time_s`` (optional ``model`` /
    ``topology``: one panel per value).  Bars are in milliseconds.
    """
    cols = _group_cols(df)
    groups = list(df.groupby(cols, sort=True)) if cols else [(None, df)]
    n = len(groups)
    fig = _figure(max(5.0, 4.8 * n), 4.0)
    axes = fig.subplots(1, n, squeeze=False)[0]
    width = 0.38
    for ax, (key, g) in zip(axes, groups, strict=False):
        nodes = sorted(set(int(v) for v in g["nodes"]))
        x = np.arange(len(nodes))
        for off, mode, hatch in ((-width / 2, "baseline", ""), (width / 2, "fused", "//")):
            m = g[g["mode"] == mode].groupby("nodes")[["compute_time_s", "exposed_comm_time_s"]].mean()
            comp = np.array([m["compute_time_s"].get(v, np.nan) for v in nodes]) * 1e3
            comm = np.array([m["exposed_comm_time_s"].get(v, np.nan) for v in nodes]) * 1e3
            ax.bar(x + off, comp, width, color="#4C72B0", hatch=hatch, edgecolor="white",
                   label=f"{mode}: compute")
            ax.bar(x + off, comm, width, bottom=comp, color="#DD8452", hatch=hatch, edgecolor="white",
                   label=f"{mode}: exposed comm")
        ax.set_xticks(x)
        step = max(1, -(-len(nodes) // 10))
        ax.set_xticklabels([f"{v:,}" if i % step == 0 or i == len(nodes) - 1 else ""
                            for i, v in enumerate(nodes)], fontsize=7)
        ax.set_xlabel("nodes (left bar: baseline, right bar: fused)")
        ax.set_ylabel("time per iteration (ms)")
        ax.grid(True, axis="y", alpha=0.3)
        lab = _group_label(key, cols)
        if lab:
            ax.set_title(lab, fontsize=9)
    ctx = _context(df)
    _title(fig, title or (f"{ctx}: " if ctx else "") + "compute and exposed communication per iteration")
    _legend_below(fig, list(axes))
    return save_figure(fig, path)
