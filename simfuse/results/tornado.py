"""The tornado plot of a sensitivity table (``sensitivity.csv`` of ``uncertainty=inputs``).

One panel per group (e.g. per node count of a sweep), one bar per input: from the metric at the input's least
favourable value to the most favourable, the others at their nominal values; a vertical line marks the point
estimate.  Inputs are ordered by swing, the largest at the top.  Built on a private Figure (no pyplot state)
and saved atomically, as every figure of :mod:`simfuse.results.plots`.
"""

from __future__ import annotations

from pathlib import Path

from .plots import _figure, save_figure

#: Most inputs shown per panel (the table keeps them all).
MAX_BARS = 12


def _label(row) -> str:
    lo, hi = row["value_at_min"], row["value_at_max"]
    return f"{row['input']}  ({lo} .. {hi})" if str(lo) != str(hi) else f"{row['input']}  ({row['range']})"


def plot_tornado(df, path: Path | str, *, group: str | None = None, title: str | None = None) -> Path:
    """Draw ``df`` (rows of :meth:`simfuse.uncertainty.InputAnalysis.sensitivity_rows`, optionally with a
    ``group`` column such as ``nodes``) to ``path``."""
    groups = [(None, df)] if group is None or group not in df else list(df.groupby(group, sort=True))
    n_rows = max(min(len(g), MAX_BARS) for _, g in groups) if len(df) else 1
    width = 7.5 * len(groups) if len(groups) <= 2 else 6.0 * len(groups)
    fig = _figure(max(width, 7.5), 1.4 + 0.42 * n_rows)
    metric = df["metric"].iloc[0] if len(df) else "speedup"
    for k, (key, g) in enumerate(groups):
        ax = fig.add_subplot(1, len(groups), k + 1)
        g = g.sort_values(["swing", "input"], ascending=[False, True]).head(MAX_BARS).iloc[::-1]
        if not len(g):
            ax.text(0.5, 0.5, "no input ranges", ha="center", va="center", transform=ax.transAxes)
            continue
        point = float(g["metric_nominal"].iloc[0])
        y = range(len(g))
        lo, hi = g["metric_min"].to_numpy(float), g["metric_max"].to_numpy(float)
        ax.barh(list(y), hi - lo, left=lo, height=0.6, color="#4c72b0", alpha=0.85,
                label=f"{metric}: least to most favourable value")
        ax.axvline(point, color="black", lw=1, label=f"nominal inputs ({point:.3f})")
        if metric == "speedup":
            ax.axvline(1.0, color="grey", lw=0.8, ls=":", label="no gain (1.0)")
        ax.set_yticks(list(y))
        ax.set_yticklabels([_label(r) for _, r in g.iterrows()], fontsize=7)
        ax.set_xlabel(metric)
        if key is not None:
            ax.set_title(f"{group} = {key}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    how = ("one input at a time" if (df.get("method", "oat") == "oat").all()
           else "mean of the draws at each input's low and high quarter")
    fig.suptitle(title or f"What moves the {metric} ({how})", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)
