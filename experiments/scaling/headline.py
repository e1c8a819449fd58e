"""The README's headline table, generated from the committed projection CSVs.

Usage:
    python experiments/scaling/headline.py [--dir experiments/results/dlrm_projection] [--readme README.md]

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

ROOT = Path(__file__).resolve().parents[2]
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


def rewrite(readme: Path, text: str, name: str = "headline", src: str | None = None) -> str:
    """``readme``'s text with the block ``<!-- name:start -->`` ... ``<!-- name:end -->`` replaced by ``text``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    src = readme.read_text(encoding="utf-8") if src is None else src
    if start not in src or end not in src:
        from simfuse.errors import SpecError

        raise SpecError(str(readme), name, f"no {start} ... {end} block")
    head, rest = src.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + text + end + tail


def _md(df: pd.DataFrame, floats: dict[str, str]) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(format(r[c], floats[c]) if c in floats and pd.notna(r[c]) else str(r[c])
                                      for c in cols) + " |")
    return "\n".join(lines) + "\n"


def results_blocks(root: Path) -> dict[str, str]:
    """The generated blocks of docs/results.md, from the committed CSVs (a block whose CSV is absent is left
    out)."""
    res = root / "experiments/results"
    out = {}
    proj = res / "dlrm_projection"
    if (proj / "projection.csv").exists():
        out["headline"] = block(proj)
        t = pd.read_csv(proj / "projection.csv")
        t = t[["gpu", "scaling", "nodes", "global_batch", "baseline_ms", "fused_ms", "speedup", "speedup_p10",
               "speedup_p90"]]
        out["projection"] = _md(t, {"baseline_ms": ".3f", "fused_ms": ".3f", "speedup": ".3f",
                                    "speedup_p10": ".3f", "speedup_p90": ".3f"})
    wf = res / "paper_waterfall"
    if (wf / "waterfall.csv").exists():
        w = pd.read_csv(wf / "waterfall.csv")[["step", "label", "change", "baseline_ms", "fused_ms", "speedup",
                                              "delta_speedup"]]
        out["waterfall"] = _md(w, {"baseline_ms": ".3f", "fused_ms": ".3f", "speedup": ".3f",
                                   "delta_speedup": "+.3f"})
    if (wf / "transport_whatif.csv").exists():
        out["transport"] = _md(pd.read_csv(wf / "transport_whatif.csv"),
                               {"net_overhead_us": ".3f", "baseline_ms": ".3f", "fused_ms": ".3f", "speedup": ".3f"})
    if (wf / "hugectr_fused.csv").exists():
        out["hugectr"] = _md(pd.read_csv(wf / "hugectr_fused.csv"),
                             {"baseline_ms": ".3f", "fused_ms": ".3f", "speedup": ".3f"})
    return out


def check_args(args) -> None:
    """Every argument checked before anything is read or written (a SpecError naming it): ``--dir`` holds
    projection.csv, ``--readme`` and ``--results`` are existing files in writable directories."""
    from simfuse.arguments import check_out_writable
    from simfuse.errors import SpecError

    if not (Path(args.dir) / "projection.csv").is_file():
        raise SpecError("<argument>", "--dir", f"no projection.csv in {args.dir!r}")
    for flag, path in (("--readme", args.readme), ("--results", args.results)):
        if path is not None and not Path(path).is_file():
            raise SpecError("<argument>", flag, f"no such file: {path!r}")
        check_out_writable(path, flag, is_dir=False)


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "headline.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=str(ROOT / "experiments/results/dlrm_projection"))
    p.add_argument("--readme", default=None)
    p.add_argument("--results", default=None, help="docs/results.md: rewrite its generated blocks too")
    args = p.parse_args(argv)
    check_args(args)
    text = block(Path(args.dir))
    from simfuse.results.io import atomic_write_text

    writes = []  # every file's new text is made before any is written (a bad block leaves both untouched)
    if args.readme:
        writes.append((args.readme, rewrite(Path(args.readme), text)))
    if args.results:
        src = Path(args.results).read_text(encoding="utf-8")
        for name, body in results_blocks(ROOT).items():
            src = rewrite(Path(args.results), body, name, src)
        writes.append((args.results, src))
    for path, new in writes:
        atomic_write_text(path, new)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
