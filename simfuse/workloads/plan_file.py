"""Forced sharding plans in and out: :func:`load_plan` (a plan CSV, e.g. a ``plan.csv`` from ``simfuse run``, or
a TorchRec plan) and :func:`write_plans` (``plan.csv``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import SpecError
from .placement import Unit
from .planner import (
    SHARDINGS,
    Plan,
    TablePlan,
    _context,
    _memory_per_rank,
    _option_cost_alone,
    _option_for,
    estimate_plan,
    parse_ranks,
)


def load_plan(path, spec, system, nodes: int, gpus_per_node: int, mode: str) -> Plan:
    """A plan from a CSV (``table``, ``sharding``, ``ranks``; optional ``mode``: rows of the other mode are
    skipped), e.g. a ``plan.csv`` written by ``simfuse run``, or from a TorchRec plan (its printed text, its JSON
    form or a ``ShardingPlan`` object: simfuse/workloads/torchrec_plan.py; the format is detected by content).
    Every table exactly once; shard ``i`` of a table on the ``i``-th rank listed (``grid``: column shard ``j``
    on the ``j``-th run of ``g`` ranks, each run the ranks of one node, e.g. ``8-15;0-7``).  Errors name the file
    and the field (with the CSV line)."""
    import pandas as pd

    from .torchrec_plan import plan_rows

    n, g = nodes * gpus_per_node, gpus_per_node
    torchrec = plan_rows(path, spec, n, g)
    skipped = 0  # rows of the other mode
    if torchrec is not None:
        src, rows_ = torchrec
        df = pd.DataFrame([(t, k, ";".join(map(str, r)), w) for t, k, r, w in rows_],
                          columns=["table", "sharding", "ranks", "where"])
    else:
        src = str(path)
        import io

        from ..io_limits import read_text

        text = read_text(path, "plan", what="plan file", errors="replace")  # a regular file, size capped
        try:
            df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        except (ValueError, pd.errors.ParserError) as exc:
            raise SpecError(src, "", f"cannot read the plan as CSV (table, sharding, ranks): "
                                     f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
        df.columns = [str(c).strip() for c in df.columns]  # "table, sharding, ranks" as typed
        for col in ("table", "sharding", "ranks"):
            if col not in df.columns:
                raise SpecError(src, col, "missing column (needs table, sharding, ranks)")
        df = df.assign(where=[f"line {i}" for i in df.index + 2])
        if "mode" in df.columns:
            modes = df["mode"].str.strip()
            bad = ~modes.isin(("", "baseline", "fused"))
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise SpecError(src, f"mode ({df['where'].iloc[i]})",
                                f"unknown mode {modes.iloc[i][:40]!r}; expected baseline, fused or empty (both)")
            skipped = int((~modes.isin(("", mode))).sum())
            df = df[modes.isin(("", mode))]
    ctx = _context(spec, system, n, g, mode)
    T, D = len(spec.tables), spec.dim
    per_rank: list[list[Unit]] = [[] for _ in range(n)]
    tables: dict[int, TablePlan] = {}
    for row in df.itertuples(index=False):
        where = row.where
        name = str(row.table).strip()
        t = _table_index(name, T)
        if t is None:
            raise SpecError(src, f"table ({where})", f"unknown table {name[:40]!r}; expected t0..t{T - 1}")
        if t in tables:
            raise SpecError(src, f"table ({where})", f"table t{t} is given twice")
        kind = str(row.sharding).strip()
        if kind not in SHARDINGS:
            raise SpecError(src, f"sharding ({where})", f"unknown {kind[:40]!r}; expected one of "
                                                           f"{', '.join(SHARDINGS)}")
        ranks = parse_ranks(row.ranks, n, src, f"ranks ({where})")
        k = len(ranks)
        tab = spec.tables[t]
        fld = f"ranks ({where})"
        if kind == "table_wise" and k != 1:
            raise SpecError(src, fld, f"table_wise needs exactly one rank, got {k}")
        if kind == "data_parallel" and sorted(ranks) != list(range(n)):
            raise SpecError(src, fld, "data_parallel replicates the table on every rank (write all)")
        if kind == "column_wise" and D % k:
            raise SpecError(src, fld, f"column_wise over {k} ranks: dim {D} is not divisible by {k}")
        if kind == "table_row_wise" and (k % g or len({r // g for r in ranks}) != k // g):
            # whole nodes: one node (TorchRec's table-row-wise) or several, each reducing its row shards' partial
            # sums inside the node and sending them on the rails (HugeCTR's hierarchical embedding with a table
            # on several nodes, docs/hugectr_baseline.md)
            raise SpecError(src, fld, f"table_row_wise needs the {g} ranks of one node (or of several whole nodes)")
        if kind == "grid":
            _check_grid_ranks(ranks, g, D, src, fld)
        rows = tab.rows if kind in ("table_wise", "column_wise", "data_parallel") else math.ceil(tab.rows / k)
        dim = D // k if kind == "column_wise" else D
        pooling = tab.pooling / k if kind in ("row_wise", "table_row_wise") else tab.pooling
        if kind == "grid":  # k / g column shards of D g / k columns, each row-sharded over the g GPUs of a node
            rows, dim, pooling = math.ceil(tab.rows / g), D // (k // g), tab.pooling / g
        for i, r in enumerate(ranks):
            per_rank[r].append(Unit(t, rows, pooling, i, k, kind, dim))
        tables[t] = TablePlan(t, kind, ranks, rows, dim, ctx.storage(rows, dim), float("nan"))
    missing = [t for t in range(T) if t not in tables]
    if missing:
        other = (f"; {skipped} row(s) were skipped as rows of the other mode (this run is {mode}; an empty mode "
                 "applies to both)") if skipped else ""
        raise SpecError(src, "table", f"no row for table t{missing[0]} (every table needs one{other})")
    mem = _memory_per_rank(per_rank, spec)
    over = np.flatnonzero(mem > ctx.budget * (1 + 1e-9))
    if len(over):
        r = int(over[0])
        raise SpecError(src, "ranks", f"rank {r} holds {mem[r] / 1e9:.2f} GB of tables and optimizer state, over "
                                      f"its embedding budget of {ctx.budget / 1e9:.2f} GB")
    est = estimate_plan(spec, system, per_rank, nodes, g, mode)
    plan = Plan(mode, n, g, [tables[t] for t in range(T)], per_rank, est, "forced", {"forced": est}, src)
    for tp in plan.tables:
        tp.estimated_cost_s = _option_cost_alone(ctx, _option_for(ctx, per_rank[tp.ranks[0]], tp.table))
    return plan


def _check_grid_ranks(ranks, g: int, D: int, src: str, fld: str) -> None:
    """A grid table's ranks: ``k`` runs of ``g``, run ``i`` (column shard ``i``) the ranks of one node (the
    nodes are distinct: a run holds every rank of its node and no rank is listed twice), ``D`` divisible by
    ``k``."""
    k, rem = divmod(len(ranks), g)
    if rem or not k:
        raise SpecError(src, fld, f"grid needs whole nodes: a multiple of the {g} GPUs per node, got {len(ranks)} "
                                  "ranks")
    for i in range(k):
        run = ranks[i * g:(i + 1) * g]
        if len({r // g for r in run}) != 1:
            raise SpecError(src, fld, f"grid column shard {i}: ranks {list(run)} are not the {g} ranks of one node "
                                      "(list each node's ranks together)")
    if D % k:
        raise SpecError(src, fld, f"grid over {k} nodes: dim {D} is not divisible by {k}")


def _table_index(name: str, T: int) -> int | None:
    s = name[1:] if name.startswith("t") else name
    if not (s.isascii() and s.isdigit()) or len(s.lstrip("0")) > 9:  # not 't²', not a 5,000-digit name
        return None
    t = int(s)
    return t if 0 <= t < T else None


def write_plans(out: Path, plans: dict) -> Path:
    """``plan.csv`` (atomic) with the plans of every mode."""
    import pandas as pd

    from ..results.io import atomic_write_df

    # the mode a plan ran in (a mode may run the plan made for the other one: simfuse.workloads.run)
    df = pd.concat([p.to_frame().assign(mode=m) for m, p in plans.items()], ignore_index=True)
    return atomic_write_df(df, Path(out) / "plan.csv")
