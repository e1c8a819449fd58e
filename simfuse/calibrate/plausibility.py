"""Plausibility of a fabric fit: refuse what cannot be physical before it reaches a profile.

``simfuse calibrate`` maps each nccl-tests log onto one level's alpha-beta parameters (see
:func:`simfuse.calibrate.build.fabric_section`, applied by :func:`simfuse.profile.apply_to_topology`).
That mapping is only meaningful when the log's bus bandwidth is one link's bandwidth; for hierarchical collectives
it is not, and the result was silently impossible (a 2-node H100 all-reduce set the NIC to 196 GB/s).  The checks
here need no simulator internals:

1. **points per parameter**: at least :data:`MIN_POINTS_PER_PARAMETER` distinct non-zero message sizes for each
   of the fit's two parameters (latency, bandwidth): a one-row log gives no bandwidth;
2. **latency without bandwidth**: a fit whose byte term vanished (sizes too small to see a bandwidth);
3. **fit quality**, the limits of ``simfuse fit-fabric`` (:mod:`.fabric_fit`): the maximum relative residual
   over the log's sizes of 64 MiB and more at most :data:`MAX_REL_RESIDUAL_LARGE`, over every size at most
   :data:`MAX_REL_RESIDUAL_ALL`;
4. **line rate of the mapped parameter** (with a topology): the bandwidth the profile would give the link
   (per NIC for scale-out: ``busbw x G / min(nics_per_node, G)`` with ``G`` the GPUs per node *of the log*, which
   share that many NICs; per GPU for scale-up) at most the topology's line rate;
5. **line rate of the measurement itself** (with a topology): for every row of >= :data:`BOUND_MIN_BYTES`, the
   bytes a node (scale-out) or GPU (scale-up) must move at least -- whatever the algorithm, in-network
   reduction (SHARP, NVLS) included -- divided by the measured time and by the NICs sharing it, at most the line
   rate.  A log faster than that was not run on this topology.
6. **latency bound**: a level's fitted latency (alpha: the whole collective's fixed cost) at most
   :data:`MAX_ALPHA_S` of its level -- the per-hop and per-collective bounds of :data:`.fabric_fit.BOUNDS`
   summed.

Lower bounds per node (scale-out; ``S`` nccl-tests' size, ``N`` nodes, ``G`` GPUs per node) or per GPU (scale-up,
``N`` = ranks, ``G`` = 1), bytes each way:

* all-reduce ``S`` (every node must export its whole reduced contribution and import the whole result);
* all-to-all ``G x S x (N - 1) / N``; all-gather and reduce-scatter ``S x (N - 1) / N``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import SpecError
from ..profile.bounds import LINE_RATE_TOLERANCE, MAX_ALPHA_S, per_nic_rate
from ..profile.fit import alpha_beta_time_s, profile_collective
from .nccl_tests import NcclTestLog

MIN_POINTS_PER_PARAMETER = 2
#: The alpha-beta fit has two parameters (latency, bandwidth).
FIT_PARAMETERS = 2
#: the residual limits of ``simfuse fit-fabric`` (one acceptance rule for both commands)
MAX_REL_RESIDUAL_LARGE = 0.15
MAX_REL_RESIDUAL_ALL = 0.5
LARGE_BYTES = 64 * 2**20
BOUND_MIN_BYTES = 1 << 20


class ImplausibleFit(SpecError):
    """A fit refused by :func:`check_fabric` (CLI exit code 2 unless ``--force``)."""


def min_bytes_each_way(collective: str, size_bytes: float, parts: int, gpus_per_part: int = 1) -> float:
    """Bytes one part (a node, or a GPU at scale-up) must send and receive at least (module docstring)."""
    if parts < 2 or size_bytes <= 0:
        return 0.0
    if collective == "all_reduce":
        return float(size_bytes)
    frac = (parts - 1) / parts
    if collective in ("all_to_all", "alltoall"):
        return gpus_per_part * size_bytes * frac
    if collective in ("all_gather", "reduce_scatter"):
        return size_bytes * frac
    return 0.0


def _gbs(x: float) -> str:
    return f"{x / 1e9:.3g} GB/s"


def check_fabric(profile: dict, logs: Sequence[NcclTestLog], topology=None) -> list[str]:
    """Reasons the profile's fabric section is implausible (empty if none).  ``topology``: a
    :class:`~simfuse.spec.TopologySpec` for the line-rate checks (skipped without one)."""
    problems: list[str] = []
    by_key: dict[tuple[str, str], list[NcclTestLog]] = {}
    for lg in logs:
        by_key.setdefault((lg.level, profile_collective(lg.collective)), []).append(lg)
    for level, lv in sorted(profile.get("fabric", {}).items()):
        for coll, c in sorted(lv.get("collectives", {}).items()):
            where = f"{level} {coll} ({c.get('ranks')} ranks, {', '.join(c.get('sources', [])) or '?'})"
            # only the logs the fit was made on: fabric_section keeps the largest rank count per level and
            # collective, and a fit of 8 ranks says nothing about the times of a 2-rank log
            ls = [lg for lg in by_key.get((level, coll), []) if c.get("ranks") in (None, lg.ranks)]
            sizes = {r.size_bytes for lg in ls for r in lg.rows if r.size_bytes > 0}
            need = MIN_POINTS_PER_PARAMETER * FIT_PARAMETERS
            if len(sizes) < need:
                problems.append(f"{where}: only {len(sizes)} distinct non-zero message size(s); a latency and "
                                f"bandwidth fit needs >= {need}")
            beta = c.get("beta_bytes_per_s")
            if beta is None or not math.isfinite(float(beta)):
                problems.append(f"{where}: latency without bandwidth (the byte term vanished: sizes too small "
                                "to show a bandwidth)")
            problems.extend(_residual_problems(where, coll, c, ls))
            alpha = c.get("alpha_s")
            if alpha is not None and float(alpha) > MAX_ALPHA_S.get(level, math.inf):
                problems.append(f"{where}: fitted latency {float(alpha) * 1e6:.4g} us above its physical bound "
                                f"{MAX_ALPHA_S[level] * 1e6:g} us (not a fabric property: one latency and one "
                                "bandwidth do not describe this log)")
            if topology is not None and beta is not None and math.isfinite(float(beta)):
                g = ls[0].gpus_per_node if ls else topology.scale_up.gpus_per_node
                problems.extend(_mapped_rate(where, level, float(beta), topology, g))
    if topology is not None:
        for lg in logs:
            p = _measured_rate(lg, topology)
            if p:
                problems.append(p)
    return problems


def _line_rate(level: str, topology) -> tuple[float, str]:
    if level == "scale_out":
        so = topology.scale_out
        return so.nic_bw_bytes_per_s, f"NIC line rate {_gbs(so.nic_bw_bytes_per_s)} " \
                                      f"({so.nic_bw_bytes_per_s * 8 / 1e9:.4g} Gb/s)"
    su = topology.scale_up
    return su.bw_bytes_per_s, f"scale-up line rate {_gbs(su.bw_bytes_per_s)} per GPU and direction"


def _residual_problems(where: str, coll: str, c: dict, logs: Sequence[NcclTestLog]) -> list[str]:
    """The fit-quality rule (module doc), from the logs' rows; without logs from the profile's recorded maximum."""
    alpha, beta = c.get("alpha_s"), c.get("beta_bytes_per_s")
    res_large, res_all = [], []
    if alpha is not None and logs:
        b = math.inf if beta is None else float(beta)
        for lg in logs:
            for r in lg.rows:
                if r.size_bytes <= 0 or r.time_s <= 0:
                    continue
                e = abs(alpha_beta_time_s(coll, lg.ranks, float(alpha), b, r.size_bytes) / r.time_s - 1.0)
                res_all.append(e)
                if r.size_bytes >= LARGE_BYTES:
                    res_large.append(e)
    else:
        rmax = (c.get("fit") or {}).get("rel_residual_max")
        res_all = [] if rmax is None else [float(rmax)]
    out = []
    if res_large and max(res_large) > MAX_REL_RESIDUAL_LARGE:
        out.append(f"{where}: poor fit, max relative residual {max(res_large):.0%} at >= 64 MiB > "
                   f"{MAX_REL_RESIDUAL_LARGE:.0%} (one latency and one bandwidth do not describe this log)")
    elif res_all and max(res_all) > MAX_REL_RESIDUAL_ALL:
        out.append(f"{where}: poor fit, max relative residual {max(res_all):.0%} > {MAX_REL_RESIDUAL_ALL:.0%} "
                   "(one latency and one bandwidth do not describe this log)")
    return out


def _mapped_rate(where: str, level: str, beta: float, topology, gpus_per_node: int) -> list[str]:
    rate, what = _line_rate(level, topology)
    if level == "scale_out":
        mapped = per_nic_rate(beta, gpus_per_node, topology.scale_out.nics_per_node)
        desc = f"bus bandwidth {_gbs(beta)} per GPU maps to {_gbs(mapped)} per NIC"
    else:
        mapped, desc = beta, f"bus bandwidth {_gbs(beta)} per GPU"
    if mapped > rate * (1 + LINE_RATE_TOLERANCE):
        return [f"{where}: {desc}, above the topology's {what} (a hierarchical collective's bus bandwidth "
                "is not one link's bandwidth)"]
    return []


def _measured_rate(lg: NcclTestLog, topology) -> str | None:
    level = lg.level
    rate, what = _line_rate(level, topology)
    if level == "scale_out":
        parts, per_part = int(lg.nodes or 1), lg.gpus_per_node
        lanes = float(topology.scale_out.nics_per_node)  # the weakest bound: every NIC of the node carries it
    else:
        parts, per_part, lanes = lg.ranks, 1, 1.0
    worst = None
    for r in lg.rows:
        if r.size_bytes < BOUND_MIN_BYTES:
            continue
        need = min_bytes_each_way(lg.collective, r.size_bytes, parts, per_part) / (lanes * r.time_s)
        if worst is None or need > worst[0]:
            worst = (need, r)
    if worst is not None and worst[0] > rate * (1 + LINE_RATE_TOLERANCE):
        need, r = worst
        unit = "NIC" if level == "scale_out" else "GPU"
        return (f"{lg.source}: line {r.line} ({r.size_bytes} B in {r.time_s * 1e6:.4g} us over {lg.ranks} ranks "
                f"on {lg.nodes} node(s)) needs at least {_gbs(need)} per {unit}, above the topology's {what}: "
                "the log was not measured on this topology (or the rank/node count is wrong)")
    return None


def refuse_or_warn(problems: Sequence[str], force: bool, source: str = "<calibration>") -> list[str]:
    """Raise :class:`ImplausibleFit` (one line: the first reason, and how many more) unless ``force``;
    with ``force`` return the warnings to print."""
    if not problems:
        return []
    if not force:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ImplausibleFit(source, "", f"implausible fabric fit refused: {problems[0]}{more}; "
                                         "pass --force to write it anyway")
    return [f"warning: applied with --force: {p}" for p in problems]


__all__ = ["BOUND_MIN_BYTES", "ImplausibleFit", "LINE_RATE_TOLERANCE", "MAX_ALPHA_S", "MAX_REL_RESIDUAL_ALL",
           "MAX_REL_RESIDUAL_LARGE", "per_nic_rate",
           "MIN_POINTS_PER_PARAMETER", "check_fabric", "min_bytes_each_way", "refuse_or_warn"]
