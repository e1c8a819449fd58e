"""Benchmark: where the vectorised max-min solver overtakes the plain-Python one (``NUMPY_MIN_ENTRIES``).

Random rate problems of ``--links-per-group`` links a group (distinct links drawn from ``--links``, integer
flow-count weights 1..4, capacities 1e9..1e11 B/s), as the flow network sees them.  For each problem size it
times, per solve, the plain-Python fill with the problem's layout kept (:class:`simfuse.network.flows._Layout`
built once, as :class:`~simfuse.network.flows.FlowNetwork` keeps it for recurring sets of bundles), the same with
the layout built every time, and the vectorised fill (:func:`simfuse.network.flows._fill_numpy`), and checks
that all three give the same rates bit for bit.  The crossover (the first size from which numpy is no slower)
is what ``NUMPY_MIN_ENTRIES`` should sit near.

Usage: python experiments/bench/bench_fill_threshold.py [--entries 96,...] [--links 40] [--repeat 5] [--out FILE.csv]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.network import flows  # noqa: E402


def problem(rng: np.random.Generator, n_entries: int, n_links: int, per_group: int):
    """A random rate problem of about ``n_entries`` entries, as plain lists (and the capacities as an array)."""
    n_groups = max(1, n_entries // per_group)
    e_group, e_link = [], []
    for g in range(n_groups):
        for lk in rng.choice(n_links, size=min(per_group, n_links), replace=False).tolist():
            e_group.append(g)
            e_link.append(int(lk))
    e_w = rng.integers(1, 5, size=len(e_link)).astype(float).tolist()
    caps = rng.uniform(1e9, 1e11, size=n_links)
    return caps, e_group, e_link, e_w, n_groups


def _best_s(fn, repeat: int, number: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def time_problem(caps, g, lk, w, ng, repeat: int) -> tuple[float, float, float]:
    """Seconds per solve: Python with the layout kept, Python building it, numpy (from the network's lists, as
    :func:`simfuse.network.flows._solve` converts them); raises when the three disagree on a rate."""
    cap_l = caps.tolist()
    lay = flows._Layout(cap_l, g, lk, w, ng)

    def kept():
        return flows._fill(lay, g, w, ng)

    def built():
        return flows._fill(flows._Layout(cap_l, g, lk, w, ng), g, w, ng)

    def vectorised():
        return flows._fill_numpy(caps, np.asarray(g, dtype=np.int64), np.asarray(lk, dtype=np.int64),
                                 np.asarray(w, dtype=float), ng)

    if not kept() == built() == vectorised().tolist():
        raise SystemExit(f"solvers disagree at {len(lk)} entries")
    number = max(1, 20_000 // len(lk))
    return tuple(_best_s(fn, repeat, number) for fn in (kept, built, vectorised))


def check_args(args) -> list[int]:
    """Every argument checked before any timing (a SpecError naming it); returns the entry counts."""
    from simfuse.arguments import check_out_writable
    from simfuse.errors import SpecError

    def count(value, flag: str, hi: int = 10**7) -> int:
        if not 1 <= value <= hi:
            raise SpecError("<argument>", flag, f"must be an integer in 1..{hi}, got {value}")
        return value

    try:
        entries = [int(x) for x in args.entries.split(",")]
    except ValueError:
        raise SpecError("<argument>", "--entries", f"cannot parse {args.entries[:60]!r} (use 96,192,...)") from None
    entries = [count(n, "--entries") for n in entries]
    count(args.links, "--links", 10**6)
    count(args.links_per_group, "--links-per-group", args.links)
    count(args.problems, "--problems", 10**4)
    count(args.repeat, "--repeat", 10**4)
    if args.seed < 0:
        raise SpecError("<argument>", "--seed", f"must be >= 0, got {args.seed}")
    check_out_writable(args.out, is_dir=False)
    return entries


def main(argv=None) -> int:
    from simfuse.arguments import script_main

    return script_main(_main, argv, "bench_fill_threshold.py")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", default="96,192,288,384,480,576,672,768,960,1200")
    p.add_argument("--links", type=int, default=40)
    p.add_argument("--links-per-group", type=int, default=3)
    p.add_argument("--problems", type=int, default=5, help="random problems per size (times are their mean)")
    p.add_argument("--repeat", type=int, default=5, help="best of this many timings per problem")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    entries = check_args(args)
    rng = np.random.default_rng(args.seed)
    rows = []
    for n in entries:
        kept_s = built_s = numpy_s = 0.0
        for _ in range(args.problems):
            caps, g, lk, w, ng = problem(rng, n, args.links, args.links_per_group)
            times = time_problem(caps, g, lk, w, ng, args.repeat)
            kept_s += times[0] / args.problems
            built_s += times[1] / args.problems
            numpy_s += times[2] / args.problems
        rows.append((len(lk), kept_s, built_s, numpy_s))
        print(f"{len(lk):6d} entries: python (layout kept) {kept_s * 1e6:8.1f} us, python (layout built) "
              f"{built_s * 1e6:8.1f} us, numpy {numpy_s * 1e6:8.1f} us", flush=True)
    for label, col in (("layout kept", 1), ("layout built", 2)):
        cross = next((r[0] for r in rows if r[3] <= r[col]), None)
        print(f"numpy no slower than python ({label}) from: {cross if cross is not None else 'beyond the sizes run'}"
              f" entries")
    print(f"NUMPY_MIN_ENTRIES = {flows.NUMPY_MIN_ENTRIES}")
    if args.out:
        import pandas as pd

        from simfuse.results.io import atomic_write_df

        atomic_write_df(pd.DataFrame(rows, columns=["entries", "python_layout_kept_s", "python_layout_built_s",
                                                    "numpy_s"]), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
