"""Node-count sweeps: a local process pool by default, a Dask distributed cluster with ``scheduler``.

Every finished point is written to ``DIR/points/<key>.json`` at once, so an interrupted sweep rerun with the
same inputs reuses the points already done (the key hashes the contents of the model and topology files and of
the calibration profile the topology references, the node count, GPUs per node, mode and simulation mode).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import pandas as pd

from .errors import SpecError
from .results.io import atomic_write_df, atomic_write_text
from .spec import load_topology, load_workload
from .workloads.run import run_point


def parse_nodes(text: str) -> list[int]:
    """``1,2,4`` or ``8..1024`` (powers of two) into a sorted list of node counts."""
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split(".."))
                v = lo
                while v <= hi:
                    out.add(v)
                    v *= 2
            else:
                out.add(int(part))
        except ValueError:
            raise SpecError("<argument>", "--nodes", f"cannot parse {part!r} (use 1,2,4 or 8..1024)") from None
    if not out or min(out) < 1:
        raise SpecError("<argument>", "--nodes", "node counts must be positive integers")
    return sorted(out)


def _digest(*paths: str) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes())
    return h.hexdigest()[:16]


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.total, self.done = total, 0
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc="sweep", unit="point", file=sys.stderr)
            except ImportError:
                self.bar = None

    def update(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label)
            self.bar.update(1)
        elif self.enabled:
            print(f"[{self.done}/{self.total}] {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_sweep(model: str, topology: str, nodes: list[int], out: Path | str, *, gpus_per_node: int | None = None,
              mode: str = "both", sim_mode: str = "auto", workers: int | None = None, scheduler: str | None = None,
              progress: bool = True, plots: bool = True, settings: dict | None = None) -> pd.DataFrame:
    """Run every node count, write ``results.csv`` (and figures), return the table."""
    spec = load_workload(model)          # validate before starting anything
    topo = load_topology(topology)
    out = Path(out)
    points_dir = out / "points"
    points_dir.mkdir(parents=True, exist_ok=True)
    # the key covers every input file, the calibration profile the topology references included
    digest = _digest(model, topology, *([topo.calibration] if topo.calibration else []))
    g = gpus_per_node or topo.scale_up.gpus_per_node
    settings = dict(sorted((settings or {}).items()))
    if settings:  # the execution settings are part of the key
        digest += "-" + hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:8]
    todo, rows = [], []
    for n in nodes:
        key = f"{spec.name}-{digest}-n{n}-g{g}-{mode}-{sim_mode}"
        path = points_dir / f"{key}.json"
        if path.exists():
            try:
                rows.extend(json.loads(path.read_text()))
                continue
            except (json.JSONDecodeError, OSError):
                path.unlink()
        todo.append((n, path))
    bar = _Progress(len(todo), progress)

    def finish(n, path, result_rows):
        atomic_write_text(path, json.dumps(result_rows))
        rows.extend(result_rows)
        bar.update(f"{n} nodes")

    try:
        if scheduler:
            try:
                from distributed import Client
            except ImportError:
                raise SpecError("<argument>", "--scheduler", "needs the 'sweep' extra (dask[distributed])") from None
            client = Client(scheduler)
            try:
                futs = {client.submit(run_point, model, topology, n, g, mode, sim_mode, settings, pure=False): (n, p)
                        for n, p in todo}
                from distributed import as_completed as d_as_completed

                for fut in d_as_completed(futs):
                    n, p = futs[fut]
                    finish(n, p, fut.result())
            finally:
                client.close()
        elif (workers or 1) > 1 and len(todo) > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futs = {pool.submit(run_point, model, topology, n, g, mode, sim_mode, settings): (n, p) for n, p in todo}
                for fut in as_completed(futs):
                    n, p = futs[fut]
                    finish(n, p, fut.result())
        else:
            for n, p in todo:
                finish(n, p, run_point(model, topology, n, g, mode, sim_mode, settings))
    finally:
        bar.close()
    df = pd.DataFrame(rows).sort_values(["nodes", "mode"], kind="stable").reset_index(drop=True)
    df = df.drop(columns=[c for c in ("wall_s",) if c in df.columns])
    atomic_write_df(df, out / "results.csv")
    if plots and len(df):
        from .results.plots import plot_breakdown, plot_speedup_vs_nodes

        if "fused" in set(df["mode"]) and "baseline" in set(df["mode"]):
            plot_speedup_vs_nodes(df, out / "speedup_vs_nodes.png")
        plot_breakdown(df, out / "breakdown.png")
    if os.environ.get("SIMFUSE_SWEEP_KEEP_POINTS", "1") == "0":
        for p in points_dir.glob("*.json"):
            p.unlink()
    return df
