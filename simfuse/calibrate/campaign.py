"""Kernel campaign rows (``experiments/gpu_campaigns/trace_campaign.py``'s CSV: one row per measured launch configuration) read,
merged and turned into fit points for :mod:`.wavefit`; the occupancy a configuration gets on an H100/H200."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..costs.calibrated import CUS, features
from ..errors import SpecError
from ..units import DTYPE_BYTES


def occupancy_slots(n_regs: float, shared_bytes: float, num_warps: int, cus: int = CUS) -> int:
    """Programs resident at once on an H100/H200 (65,536 registers, 64 warps, 32 blocks, 228 KiB shared memory
    per SM; registers allocated per warp in units of 256, 1 KiB of shared memory reserved per block)."""
    warps = max(1, int(num_warps))
    per_sm = min(32, 64 // warps)
    if n_regs and n_regs > 0:
        regs_per_warp = math.ceil(n_regs * 32 / 256) * 256
        per_sm = min(per_sm, (65536 // regs_per_warp) // warps)
    if shared_bytes and shared_bytes > 0:
        per_sm = min(per_sm, 233472 // (int(shared_bytes) + 1024))
    return max(1, per_sm) * cus



# ------------------------------------------------------------------------------------------------ campaign rows
@dataclass(frozen=True)
class Point:
    kernel: str
    variant: str
    dtype: str
    grid: int
    slots: int
    feats: dict
    axes: dict
    time_s: float


#: columns every campaign row needs (experiments/gpu_campaigns/trace_campaign.py writes them; the rest default to 0)
#: the kernel families and dtypes a campaign may hold (the bundled kernels')
CAMPAIGN_KERNELS = ("embedding_all_to_all", "gemv_all_reduce", "gemm_all_to_all")
CAMPAIGN_DTYPES = ("fp32", "bf16", "fp16")
CAMPAIGN_COLUMNS = ("kernel", "variant", "dtype", "grid", "num_warps", "flops_per_wg", "bytes_per_wg", "median_s")
#: numeric columns read from a campaign row (missing or empty ones count as 0)
_CAMPAIGN_NUMBERS = ("world", "dim", "pooling", "bags", "m", "n", "k", "tokens", "grid", "bags_per_wg", "block_m",
                     "block_n", "block_k", "split_k", "num_warps", "num_stages", "table_rows", "flops_per_wg",
                     "bytes_per_wg", "n_regs", "n_spills", "shared_bytes")


def _number_below(text, bound: float) -> bool:
    try:
        return float(text) < bound
    except (TypeError, ValueError):
        return False


def read_campaign(path: str | Path) -> list[dict]:
    """The rows of a campaign file (CSV, optionally gzip-compressed), checked: the :data:`CAMPAIGN_COLUMNS`
    present, ``median_s`` a finite positive time and every numeric column a finite number >= 0 (a
    :class:`~simfuse.errors.SpecError` naming the file, the line and the column otherwise)."""
    from ..io_limits import read_bytes

    src = str(path)
    raw = read_bytes(path, "campaign", what="campaign file")  # a regular file, size and gzip ratio capped
    try:
        rows = list(csv.DictReader(io.StringIO(raw.decode())))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SpecError(src, "", f"not a readable campaign file ({type(exc).__name__}: {exc})") from None
    if not rows:
        raise SpecError(src, "", "no campaign rows (an empty or header-only file)")
    missing = [c for c in CAMPAIGN_COLUMNS if c not in rows[0]]
    if missing:
        raise SpecError(src, missing[0], f"missing campaign column(s) {', '.join(missing)}")
    header = list(rows[0])
    for line, r in enumerate(rows, start=2):
        if None in r or any(r.get(c) is None for c in header):  # more or fewer fields than the header
            raise SpecError(src, f"line {line}", f"the row has {len([v for v in r.values() if v is not None])} "
                                                 f"fields, the header {len(header)} (a cut-off or malformed file)")
        if r["kernel"] not in CAMPAIGN_KERNELS:
            raise SpecError(src, f"line {line}: kernel", f"unknown {r['kernel'][:40]!r}; expected one of "
                                                         f"{', '.join(CAMPAIGN_KERNELS)}")
        if r["variant"] not in ("compute", "fused"):
            raise SpecError(src, f"line {line}: variant", f"unknown {r['variant'][:40]!r}; expected compute or fused")
        if r["dtype"] not in CAMPAIGN_DTYPES:
            raise SpecError(src, f"line {line}: dtype", f"unknown {r['dtype'][:40]!r}; expected one of "
                                                        f"{', '.join(CAMPAIGN_DTYPES)}")
        if _number_below(r.get("world"), 1.0):  # (a word or a negative is refused by the number check below)
            raise SpecError(src, f"line {line}: world", f"must be >= 1 (emulated ranks), got {r['world'][:40]!r}")
        for c in _CAMPAIGN_NUMBERS + ("median_s",):
            v = r.get(c)
            if v is None or v == "":
                if c in CAMPAIGN_COLUMNS:
                    raise SpecError(src, f"line {line}: {c}", "empty")
                continue
            try:
                x = float(v)
            except ValueError:
                raise SpecError(src, f"line {line}: {c}", f"expected a number, got {v[:40]!r}") from None
            if not math.isfinite(x) or x < 0 or (c == "median_s" and x <= 0):
                raise SpecError(src, f"line {line}: {c}", f"must be a finite number {'> 0' if c == 'median_s' else '>= 0'}, "
                                                          f"got {v[:40]!r}")
    return rows


def is_campaign(text_head: str) -> bool:
    first = text_head.splitlines()[0] if text_head else ""
    return all(c in first.split(",") for c in ("kernel", "variant", "bags_per_wg", "median_s", "grid"))


SHAPE_KEY = ("kernel", "variant", "dtype", "world", "dim", "pooling", "bags", "m", "n", "k", "tokens", "bags_per_wg",
             "block_m", "block_n", "block_k", "split_k", "num_warps", "num_stages", "table_rows")



def table_rows(row: dict) -> int:
    """Rows per embedding table of a campaign row: its ``table_rows`` column, or for campaigns before v2 (no such
    column) the rule those used (``experiments/gpu_campaigns/trace_campaign.py`` ``Campaign.embedding``): about 512 MiB a table,
    ``clip(512 MiB / (dim x element bytes), 1 Mi, 16 Mi)`` rows; 0 for other kernels."""
    if row.get("kernel") != "embedding_all_to_all":
        return 0
    given = str(row.get("table_rows") or "").strip()
    if given and float(given) > 0:
        return int(float(given))
    dim = int(float(row.get("dim") or 0))
    eb = DTYPE_BYTES.get(str(row.get("dtype")), 4)
    return int(min(16 * 2**20, max(2**20, 512 * 2**20 // max(1, dim * eb))))


def with_table_rows(rows: Iterable[dict]) -> list[dict]:
    """Campaign rows with ``table_rows`` filled in (:func:`table_rows`), so that repeats of one shape from v1 and v2
    campaigns (and fresh-allocation repeats, ``alloc``) merge, and different table sizes do not."""
    return [dict(r, table_rows=table_rows(r)) for r in rows]


def merge_repeats(rows: Iterable[dict]) -> list[dict]:
    """Rows of several campaign runs -> one row per shape with the median of the runs' medians (repeats agree
    within 1-2% for GEMM/GEMV but only within ~7% median, 30% p90 for the short embedding launches)."""
    by: dict[tuple, list[dict]] = {}
    for r in with_table_rows(rows):
        by.setdefault(tuple(str(r.get(c, "")) for c in SHAPE_KEY), []).append(r)
    out = []
    for group in by.values():
        t = sorted(float(r["median_s"]) for r in group)
        m = len(t)
        med = t[m // 2] if m % 2 else 0.5 * (t[m // 2 - 1] + t[m // 2])
        out.append(dict(group[0], median_s=med, repeats=m))
    return out


#: Embedding configurations whose compiled kernel spills more registers than this are not fitted: the model has no
#: local-memory term (the v2 campaign's 16 bags x 2-4 warps at dim 1,024 spill 66-1,482 registers and run 1.1-10x
#: slower than the same bags at 8 warps; the v1 grid's dim-1,024 kernels spill 6-8 and are fitted).
MAX_FIT_SPILLS = 32


def spills_too_much(row: dict) -> bool:
    """Whether a campaign row is an embedding configuration that spills beyond :data:`MAX_FIT_SPILLS`."""
    return row.get("kernel") == "embedding_all_to_all" and float(row.get("n_spills") or 0) > MAX_FIT_SPILLS


def acc_limits(rows: Iterable[dict]) -> dict[tuple[str, str, str], float]:
    """Per embedding family: the largest accumulator tile per thread (``acc_per_thread`` of
    :func:`simfuse.costs.calibrated.embedding_layout`) below the smallest one of any configuration that spilled
    beyond :data:`MAX_FIT_SPILLS` -- the tiles every measured configuration of which compiled without (much)
    spilling.  The cost model refuses larger tiles (``WaveFit.max_acc_per_thread``).  Conservative: on the H200
    campaigns some 128-element fp32 tiles did not spill (2 warps) while others did (4 warps, 46-66 spills), so 128
    is refused for all.  A family with no spilling configuration gets the largest fitted tile."""
    merged = merge_repeats(rows)
    pts = campaign_points(merged, keep_spilling=True)
    fitted: dict[tuple[str, str, str], list[float]] = {}
    spilled: dict[tuple[str, str, str], list[float]] = {}
    for r, p in zip(merged, pts, strict=True):
        if p.kernel != "embedding_all_to_all":
            continue
        (spilled if spills_too_much(r) else fitted).setdefault((p.kernel, p.variant, p.dtype), []).append(
            p.feats.get("acc_per_thread", 0.0))
    out = {}
    for key, accs in fitted.items():
        low = min(spilled.get(key, [math.inf]))
        ok = [a for a in accs if a < low]
        out[key] = max(ok) if ok else min(accs)
    return out


def campaign_points(rows: Iterable[dict], keep_spilling: bool = False) -> list[Point]:
    """Campaign rows -> fit points (repeats merged); spilling embedding configurations (:func:`spills_too_much`)
    are left out unless ``keep_spilling``."""
    pts = []
    for r in merge_repeats(rows):
        k = r["kernel"]
        if not keep_spilling and spills_too_much(r):
            continue

        def num(c, r=r):
            return float(r.get(c) or 0)
        if k == "embedding_all_to_all":
            shape = {"dim": num("dim"), "pooling": num("pooling"), "rows": num("table_rows"),
                     "num_warps": num("num_warps")}
            axes = {"dim": num("dim"), "pooling": num("pooling"), "bags": num("bags"), "table_rows": num("table_rows"),
                    "bags_per_wg": num("bags_per_wg"), "num_warps": num("num_warps")}
        elif k == "gemv_all_reduce":
            kk = num("flops_per_wg") / (2.0 * max(1.0, num("tokens")) * num("block_n"))
            shape = {"tokens": num("tokens"), "rows_per_wg": num("block_n"), "k_per_wg": kk,
                     "reduce_slots": max(1.0, num("split_k")) * (max(1.0, num("world")) if r["variant"] == "fused"
                                                                 else 1.0)}
            axes = {"n": num("n"), "k": num("k")}
        else:
            shape = {"k": num("k")}
            axes = {"m": num("m"), "n": num("n"), "k": num("k")}
        slots = occupancy_slots(num("n_regs"), num("shared_bytes"), int(num("num_warps")))
        if k == "gemv_all_reduce":
            axes.update(split_k=num("split_k"), programs_per_sm=float(math.ceil(min(num("grid"), slots) / CUS - 1e-9)))
        pts.append(Point(k, r["variant"], r["dtype"], int(num("grid")), slots,
                         features(k, num("flops_per_wg"), num("bytes_per_wg"), shape, r["dtype"]), axes,
                         num("median_s")))
    return pts
