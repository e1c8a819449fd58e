"""The README's headline table, generated from the committed projection CSVs.

Usage:
    python experiments/headline.py [--dir experiments/results/dlrm_projection] [--readme README.md]

Prints the table (speedup at the nominal inputs, with the p10-p90 of the input draws, per node count, for H100
and H200 nodes under strong and weak scaling) and the top drivers; with ``--readme`` it rewrites the block
between ``<!-- headline:start -->`` and ``<!-- headline:end -->`` in that file.  ``tests/experiments/
test_headline.py`` checks that the README's block is exactly what this script makes of the committed CSVs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- headline:start -->", "<!-- headline:end -->"


def _cell(r) -> str:
    lo, hi = r["speedup_p10"], r["speedup_p90"]
    if pd.isna(lo) or pd.isna(hi):
        return f"{r['speedup']:.2f}"
    return f"{r['speedup']:.2f} ({lo:.2f}-{hi:.2f})"


def headline_table(table: pd.DataFrame) -> str:
    """A markdown table: one row per node count, one column per (GPU, scaling)."""
    cols = [(s, g) for s in ("strong", "weak") for g in sorted(set(table["gpu"]))
            if ((table["scaling"] == s) & (table["gpu"] == g)).any()]
    head = "| nodes (GPUs) | " + " | ".join(f"{g}, {s}" for s, g in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for n in sorted(set(table["nodes"])):
        cells = []
        for s, g in cols:
            r = table[(table["scaling"] == s) & (table["gpu"] == g) & (table["nodes"] == n)]
            cells.append(_cell(r.iloc[0]) if len(r) else "")
        lines.append(f"| {n} ({n * 8:,}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def drivers_text(sens: pd.DataFrame, top: int = 3) -> str:
    """The top one-at-a-time drivers of the speedup per GPU and node count, as markdown bullets."""
    lines = []
    for (gpu, n), g in sens.groupby(["gpu", "nodes"], sort=True):
        g = g.sort_values("rank").head(top)
        items = "; ".join(f"`{r['input']}` {r['metric_min']:.2f}-{r['metric_max']:.2f}" for _, r in g.iterrows())
        lines.append(f"- {gpu}, {n} nodes: {items}")
    return "\n".join(lines) + "\n"


def block(directory: Path) -> str:
    table = pd.read_csv(directory / "projection.csv")
    text = headline_table(table)
    sens_path = directory / "sensitivity.csv"
    if sens_path.exists():
        text += ("\nTop drivers (strong scaling; the speedup with each input at its least and most favourable "
                 "value, the others nominal):\n\n" + drivers_text(pd.read_csv(sens_path)))
    return text


def rewrite(readme: Path, text: str) -> str:
    src = readme.read_text(encoding="utf-8")
    if START not in src or END not in src:
        raise SystemExit(f"{readme}: no {START} ... {END} block")
    head, rest = src.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + "\n" + text + END + tail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=str(ROOT / "experiments/results/dlrm_projection"))
    p.add_argument("--readme", default=None)
    args = p.parse_args(argv)
    text = block(Path(args.dir))
    if args.readme:
        from simfuse.results.io import atomic_write_text

        atomic_write_text(args.readme, rewrite(Path(args.readme), text))
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
