"""Fabric calibration by simulation: fit a topology's fabric so that the simulator reproduces an nccl-tests log.

The alpha-beta mapping of :mod:`.build` reads a log's bus bandwidth as one link's bandwidth, which is wrong for
hierarchical collectives (a 2-node all-reduce would set the NIC to 196 GB/s).  Here the simulator runs the
algorithm NCCL ran (``--algorithm`` / ``--protocol``, else ``NCCL_ALGO`` / ``NCCL_PROTO`` when the log says,
otherwise the tuner's choice for each size on the nominal topology, then refitted with the fitted topology's own
choices until they agree: the written file must reproduce the log with the algorithms its users' runs will pick)
on the whole system, and the terms of the level the log exercises are fitted:

* ``efficiency`` of that level's links (the achievable fraction of line rate), bounded to ``(0, 1]``, so a link
  is never faster than the topology's line rate;
* ``latency_s`` of that level (per hop);
* one overhead: for a one-node log the per-collective software overhead ``collectives.launch_s`` (``sync_s`` is
  folded into it and set to 0); for a multi-node all-to-all the proxy's per-peer post cost
  ``collectives.net_overhead_s`` (charged per off-node peer only); other multi-node logs fit none.  A scale-out
  fit therefore never changes a single-node collective: everything it writes is paid only across nodes.

Every term is bounded by physics and sources (:data:`BOUNDS`); a fit that needs a term at its bound is refused
with that reason (the 3.5 ms "per-collective overhead" of a badly fitted log is not a fabric property).

Method: for a given efficiency the simulated time of size ``i`` is ``t0_i + sum_j k_ij * x_j`` over the linear
terms ``x_j`` (latency, overhead), ``k_ij`` their sensitivities on the critical path at that efficiency (finite
differences).  Terms whose sensitivities do not vary across sizes are not separable from each other: latency
keeps the topology's value and the overhead is fitted.  The efficiency is searched on a log grid refined by
golden section; the linear terms come from a box-constrained weighted least squares on relative residuals.

Acceptance (otherwise :class:`~simfuse.errors.SpecError`, exit 2, unless ``force``): at least
:data:`MIN_POINTS_PER_PARAMETER` distinct sizes per parameter, the log not faster than line rate allows
(:func:`.plausibility.min_bytes_each_way`), no term at its bound, and a maximum relative residual of at most
:data:`MAX_REL_RESIDUAL_LARGE` over sizes of :data:`LARGE_BYTES` and more and at most
:data:`MAX_REL_RESIDUAL_ALL` overall.  ``simfuse calibrate`` applies the same residual limits
(:mod:`.plausibility`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..collectives import REGISTRY, run_collective
from ..collectives.groups import world
from ..collectives.tuner import Tuner
from ..errors import SpecError
from ..names import canonical_collective
from ..spec import TopologySpec
from .nccl_tests import NcclTestLog, channel_minimums

FIT_PARAMETERS = 3
MIN_POINTS_PER_PARAMETER = 2
LARGE_BYTES = 64 * 2**20
MAX_REL_RESIDUAL_LARGE = 0.15
MAX_REL_RESIDUAL_ALL = 0.5
EFFICIENCY_MIN = 0.02
#: sizes the fit simulates at most (spread evenly in log); the residuals are reported at every size
MAX_FIT_POINTS = 12
#: refits with the fitted topology's own algorithm choices before giving up on a fixed point
MAX_CONSISTENCY_ROUNDS = 4
#: NCCL_ALGO spellings -> simfuse algorithms (None: not modelled here)
NCCL_ALGOS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree", "collnet": "collnet",
              "collnetdirect": "collnet", "collnetchain": "collnet", "pat": None}


#: bounds of the fitted terms (seconds), from physics and sources.  Latency per hop: NVLink / NVSwitch about 1 us
#: (ASTRA-sim's HGX-H100 validated 0.94 us), NCCL's NVLink latency constants under 1 us -> 5 us allows 5x; network
#: 1-3 us per IB / RoCE hop, NCCL's network latency constant for Simple 14 us (hwLat NET, src/graph/tuning.cc),
#: software transports (EFA, GPUDirect-TCPXO) a few tens of us at the smallest sizes of public logs -> 50 us.
#: Per-collective overhead: NCCL's base latencies 6.8-14 us (baseLat, tuning.cc) plus a kernel launch (2-4 us)
#: -> 50 us.  Proxy post cost per network message: getNetOverhead 1 us (x86), 2 us (AMD CPUs) -> 20 us.
BOUNDS = {"scale_up.latency_s": (0.0, 5e-6), "scale_out.latency_s": (0.0, 50e-6),
          "collectives.launch_s": (0.0, 50e-6), "collectives.net_overhead_s": (0.0, 20e-6)}


@dataclass
class FabricFitResult:
    """Fitted parameters, the algorithms simulated per size, and the residuals (relative, signed).
    ``overhead_field``: the topology field ``overhead_s`` was fitted to (None: no overhead fitted, the topology's
    kept)."""

    source: str
    level: str
    collective: str
    nodes: int
    gpus_per_node: int
    efficiency: float
    latency_s: float
    overhead_s: float
    algorithms: list[str]
    sizes_bytes: list[float]
    measured_s: list[float]
    simulated_s: list[float]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    overhead_field: str | None = "collectives.launch_s"

    @property
    def residuals(self) -> np.ndarray:
        return np.asarray(self.simulated_s) / np.asarray(self.measured_s) - 1.0

    def max_residual(self, min_bytes: float = 0.0) -> float:
        sel = np.asarray(self.sizes_bytes) >= min_bytes
        return float(np.max(np.abs(self.residuals[sel]))) if sel.any() else float("nan")

    def overrides(self) -> dict[str, float]:
        """Dotted-path topology overrides (:meth:`~simfuse.spec.TopologySpec.with_overrides`)."""
        return _overrides(self.level, self.efficiency, self.latency_s, self.overhead_s, self.overhead_field)

    def residual_text(self) -> str:
        """``"x% (all sizes), y% (>= 64 MiB)"``, ``n/a`` where the log has no such size."""
        def pct(v: float) -> str:
            return "n/a" if math.isnan(v) else f"{100 * v:.1f}%"
        return f"{pct(self.max_residual())} (all sizes), {pct(self.max_residual(LARGE_BYTES))} (>= 64 MiB)"

    def as_dict(self) -> dict:
        """JSON-safe: a residual over no sizes is None, not NaN."""
        def num(v: float) -> float | None:
            return None if math.isnan(v) else v
        return {"source": self.source, "level": self.level, "collective": self.collective, "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node, "efficiency": self.efficiency, "latency_s": self.latency_s,
                "overhead_s": self.overhead_s, "overhead_field": self.overhead_field,
                "max_rel_residual": num(self.max_residual()),
                "max_rel_residual_large": num(self.max_residual(LARGE_BYTES)), "problems": list(self.problems),
                "notes": list(self.notes),
                "points": [{"size_bytes": s, "algorithm": a, "measured_s": m, "simulated_s": t}
                           for s, a, m, t in zip(self.sizes_bytes, self.algorithms, self.measured_s,
                                                 self.simulated_s, strict=True)]}


def overhead_field(level: str, op: str) -> str | None:
    """The overhead a fit of this level and collective adjusts (module doc): None for scale-out collectives
    other than all-to-all."""
    if level == "scale_up":
        return "collectives.launch_s"
    return "collectives.net_overhead_s" if op == "all_to_all" else None


def _overrides(level: str, eff: float, lat: float, ovh: float, ovh_field: str | None = "collectives.launch_s"
               ) -> dict[str, float]:
    out = {f"{level}.efficiency": eff, f"{level}.latency_s": lat}
    if ovh_field == "collectives.launch_s":
        out.update({"collectives.launch_s": ovh, "collectives.sync_s": 0.0})
    elif ovh_field is not None:
        out[ovh_field] = ovh
    return out


def _algorithm_for_log(log: NcclTestLog, op: str, algorithm: str | None = None) -> str | None:
    algo = algorithm or log.env.get("NCCL_ALGO")
    field_name = "--algorithm" if algorithm else "NCCL_ALGO"
    if not algo:
        return None
    names = [a.strip().lower() for a in algo.split(",") if a.strip() and not a.strip().startswith("^")]
    if len(names) != 1:
        raise SpecError(log.source, field_name, f"{algo!r}: a single forced algorithm is needed to simulate it")
    name = NCCL_ALGOS.get(names[0], names[0])
    if name is None or name not in REGISTRY.get(op, {}):
        raise SpecError(log.source, field_name, f"the log ran {algo} for {op}, which simfuse does not model "
                        f"(simfuse's {op} algorithms: {', '.join(REGISTRY.get(op, {}))})")
    return name


def _protocol_for_log(log: NcclTestLog, protocol: str | None) -> str | None:
    from ..collectives.protocols import canonical_protocol

    proto = protocol or log.env.get("NCCL_PROTO")
    if not proto:
        return None
    names = [p.strip() for p in proto.split(",") if p.strip() and not p.strip().startswith("^")]
    if len(names) != 1:
        raise SpecError(log.source, "--protocol" if protocol else "NCCL_PROTO",
                        f"{proto!r}: a single forced protocol is needed to simulate it")
    return canonical_protocol(names[0], log.source, "--protocol" if protocol else "NCCL_PROTO")


def log_settings(log: NcclTestLog, topo: TopologySpec) -> tuple[TopologySpec, list[str]]:
    """``(topology, notes)``: ``topo`` with the channel minimums the log states (``NCCL_MIN_CTAS``,
    ``NCCL_MIN_NCHANNELS`` / ``NCCL_MIN_NRINGS``: what the run used, so they override the file's), and a note for
    each (:func:`~.nccl_tests.channel_minimums`, which refuses a value outside 1..MAX_CHANNELS naming the log and
    the setting)."""
    over = channel_minimums(log.env, log.source)
    notes = [f"{field_name} = {value}: the log's setting (it raises the channels the run used)"
             for field_name, value in over.items()]
    return (topo.with_overrides(over) if over else topo), notes


def _check_line_rate(log: NcclTestLog, topo: TopologySpec, op: str, level: str, sizes, meas) -> None:
    """Physics first: a log faster than line rate allows was not run on this topology."""
    from .plausibility import min_bytes_each_way

    nodes, g = int(log.nodes or 1), log.gpus_per_node
    line = (topo.scale_out.nic_bw_bytes_per_s * min(topo.scale_out.nics_per_node, g) if level == "scale_out"
            else topo.scale_up.bw_bytes_per_s)
    parts, per = (nodes, g) if level == "scale_out" else (log.ranks, 1)
    for s, t in zip(sizes, meas, strict=True):
        if s >= 2**20:
            need_bytes = min_bytes_each_way(op, s, parts, per)
            if need_bytes / t > line * 1.02:
                raise SpecError(log.source, "rows", f"{op} of {s / 2**20:.0f} MiB in {t * 1e6:.1f} us moves "
                                f"{need_bytes / t / 1e9:.0f} GB/s per {'node' if level == 'scale_out' else 'GPU'}"
                                f", above the topology's line rate {line / 1e9:.0f} GB/s")


def _box_lstsq(cols: np.ndarray, r: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, np.ndarray]:
    """min ||cols @ x - r|| with lo <= x <= hi, by enumerating which terms sit at a bound (a few terms)."""
    k = cols.shape[1]
    best = (math.inf, lo.copy())
    for states in itertools.product(("free", "lo", "hi"), repeat=k):
        x = np.where(np.array(states) == "hi", hi, lo).astype(float)
        free = [j for j, st in enumerate(states) if st == "free"]
        rr = r - cols @ x
        if free:
            x[free] = np.linalg.lstsq(cols[:, free], rr + cols[:, free] @ x[free], rcond=None)[0]
            if np.any(x < lo - 1e-15) or np.any(x > hi + 1e-15):
                continue
        err = float(np.sum((cols @ x - r) ** 2))
        if err < best[0] - 1e-30:
            best = (err, x)
    return best


class _Fitter:
    """The efficiency search and the bounded linear terms of one log (see the module doc)."""

    def __init__(self, topo, level, op, nodes, g, sizes, meas, protocol, ovh_field):
        self.topo, self.level, self.op, self.nodes, self.g = topo, level, op, nodes, g
        self.sizes, self.meas, self.protocol, self.ovh_field = sizes, meas, protocol, ovh_field
        self.w = 1.0 / meas
        self.lat_field = f"{level}.latency_s"
        self.nominal = {self.lat_field: getattr(topo, level).latency_s}
        if ovh_field is not None:
            self.nominal[ovh_field] = 0.0
        self.fields = list(self.nominal)

    def simulate(self, eff: float, values: dict, which) -> np.ndarray:
        lat = values.get(self.lat_field, self.nominal[self.lat_field])
        ovh = values.get(self.ovh_field, 0.0) if self.ovh_field else 0.0
        t = self.topo.with_overrides(_overrides(self.level, eff, lat, ovh, self.ovh_field))
        ss, aa = which
        return np.array([run_collective(t, self.nodes, self.op, float(s), algorithm=a, gpus_per_node=self.g,
                                        protocol=self.protocol if a and "/" not in a else None).time_s
                         for s, a in zip(ss, aa, strict=True)])

    def solve(self, eff: float, algs, ref: dict | None = None):
        """(error, values, fixed latency?) of the best bounded linear terms at this efficiency.  A per-peer post
        cost hides under the transfers until it dominates (the time is a maximum): its sensitivity is zero below
        that, so the terms are also linearised from inside its dominant range and the best simulated fit kept."""
        if ref is not None or self.ovh_field != "collectives.net_overhead_s":
            return self._solve(eff, algs, ref)
        best = None
        for v in (0.0, 2e-6, 8e-6):
            start = dict(self.nominal)
            start[self.ovh_field] = v
            _e, vals, fixed = self._solve(eff, algs, start)
            t = self.simulate(eff, vals, (self.sizes, algs))
            err = float(np.sum(((t - self.meas) * self.w) ** 2))
            if best is None or err < best[0]:
                best = (err, vals, fixed)
        return best

    def _solve(self, eff: float, algs, ref: dict | None = None):
        ref = dict(self.nominal if ref is None else ref)
        which = (self.sizes, algs)
        t_ref = self.simulate(eff, ref, which)
        cols = []
        for f in self.fields:
            step = dict(ref)
            step[f] += 1e-7
            cols.append((self.simulate(eff, step, which) - t_ref) / 1e-7)
        cols = np.stack(cols, axis=1)
        fixed_lat = len(self.fields) > 1 and float(np.ptp(cols[:, 0])) < 0.5 and float(np.ptp(cols[:, 1])) < 0.5
        use = [j for j in range(len(self.fields)) if not (fixed_lat and j == 0)]
        lo = np.array([BOUNDS[self.fields[j]][0] - ref[self.fields[j]] for j in use])
        hi = np.array([BOUNDS[self.fields[j]][1] - ref[self.fields[j]] for j in use])
        err, d = _box_lstsq(cols[:, use] * self.w[:, None], (self.meas - t_ref) * self.w, lo, hi)
        out = dict(ref)
        for j, dj in zip(use, d, strict=True):
            out[self.fields[j]] = ref[self.fields[j]] + float(dj)
        return err, out, fixed_lat

    def fit(self, algs) -> tuple[float, dict, bool]:
        grid = np.geomspace(EFFICIENCY_MIN, 1.0, 10)
        errs = [self.solve(float(e), algs)[0] for e in grid]
        i = int(np.argmin(errs))
        lo, hi = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
        phi = (math.sqrt(5) - 1) / 2
        a, b = lo + (1 - phi) * (hi - lo), lo + phi * (hi - lo)
        fa, fb = self.solve(a, algs)[0], self.solve(b, algs)[0]
        for _ in range(10):
            if fa <= fb:
                hi, b, fb = b, a, fa
                a = lo + (1 - phi) * (hi - lo)
                fa = self.solve(a, algs)[0]
            else:
                lo, a, fa = a, b, fb
                b = lo + phi * (hi - lo)
                fb = self.solve(b, algs)[0]
        eff = min([(errs[i], float(grid[i])), (fa, a), (fb, b)])[1]
        _err, values, fixed_lat = self.solve(eff, algs)
        for _ in range(3):  # re-linearise around the fitted terms (the time is only piecewise linear in them)
            _err, values, fixed_lat = self.solve(eff, algs, values)
        return float(eff), values, fixed_lat


def fit_fabric(log: NcclTestLog, topology: TopologySpec, *, force: bool = False, algorithm: str | None = None,
               protocol: str | None = None) -> FabricFitResult:
    """Fit the fabric level the log exercises (one node: scale-up; several: scale-out); see the module doc.
    ``algorithm`` / ``protocol``: what the log ran (NCCL_ALGO / NCCL_PROTO spellings), overriding the log's env."""
    op = canonical_collective(log.collective, log.source)
    if op not in REGISTRY:
        raise SpecError(log.source, "collective", f"a {op} log ({len(log.rows)} rows over {log.ranks} ranks): "
                        f"point-to-point or rooted results, which no simulated collective reproduces (fit-fabric "
                        f"fits {', '.join(sorted(REGISTRY))} logs)")
    nodes, g = int(log.nodes or 1), log.gpus_per_node
    if nodes * g != log.ranks:
        raise SpecError(log.source, "ranks", f"{log.ranks} ranks do not fill {nodes} nodes evenly")
    if log.ranks < 2:
        raise SpecError(log.source, "ranks", "a fabric fit needs at least 2 ranks")
    level = "scale_out" if nodes > 1 else "scale_up"
    ovh_field = overhead_field(level, op)
    n_params = 2 + (ovh_field is not None)
    rows = sorted((r for r in log.rows if r.size_bytes > 0 and r.time_s > 0), key=lambda r: r.size_bytes)
    by_size: dict[int, list[float]] = {}
    for r in rows:
        by_size.setdefault(int(r.size_bytes), []).append(r.time_s)
    repeated = {s: ts for s, ts in by_size.items() if len(ts) > 1}
    sizes = np.array([float(s) for s in by_size])
    meas = np.array([float(np.median(ts)) for ts in by_size.values()])  # a repeated size: its median time
    shown = ", ".join(f"{s:,} B x{len(ts)}" for s, ts in list(repeated.items())[:3]) + (", ..." if len(repeated) > 3
                                                                                      else "")
    size_notes = [f"{len(repeated)} size(s) appear more than once ({shown}): the median of their times fitted"
                  ] if repeated else []
    need = MIN_POINTS_PER_PARAMETER * n_params
    if len(sizes) < need:  # sizes are distinct (a repeated one is its median above)
        raise SpecError(log.source, "rows", f"{len(sizes)} distinct message sizes; a fit of "
                                            f"{n_params} parameters needs at least {need}")
    topo, setting_notes = log_settings(log, topology)
    if g > topo.scale_up.gpus_per_node:
        raise SpecError(log.source, "ranks", f"{log.ranks} ranks on {nodes} node(s) are {g} GPUs per node, but the "
                        f"topology's nodes hold {topo.scale_up.gpus_per_node} ({topo.source}: scale_up.gpus_per_node): "
                        "pass --nodes M if the log does not say how many nodes it ran on, or use a topology with "
                        "larger nodes")
    if g % min(topo.scale_out.nics_per_node, g):
        raise SpecError(log.source, "ranks", f"{g} GPUs per node do not share the topology's NICs evenly")
    _check_line_rate(log, topo, op, level, sizes, meas)
    forced = _algorithm_for_log(log, op, algorithm)
    proto = _protocol_for_log(log, protocol)
    if forced is None:
        tuner = Tuner(topo, nodes, g)
        algs = [tuner.choose(op, world(log.ranks), float(s), protocol=proto) for s in sizes]
    else:
        algs = [forced] * len(sizes)
    all_sizes, all_meas = sizes, meas
    keep = np.arange(len(sizes))
    if len(sizes) > MAX_FIT_POINTS:  # fit on sizes spread evenly in log; residuals are reported on all of them
        keep = np.unique(np.round(np.linspace(0, len(sizes) - 1, MAX_FIT_POINTS)).astype(int))
    fitter = _Fitter(topo, level, op, nodes, g, sizes[keep], meas[keep], proto, ovh_field)

    def choices(eff: float, values: dict) -> list[str]:
        """What the tuner runs at every size of the log on the topology with these values."""
        t = topo.with_overrides(_overrides(level, eff, values[fitter.lat_field], values.get(ovh_field, 0.0),
                                           ovh_field))
        tuner = Tuner(t, nodes, g)
        return [tuner.choose(op, world(log.ranks), float(s), protocol=proto) for s in all_sizes]

    all_algs = list(algs)
    consistent = True
    if forced is not None:
        eff, values, fixed_lat = fitter.fit([all_algs[i] for i in keep])
    else:
        # self-consistent: the fitted topology is what users run, and its tuner may pick other algorithms than
        # the nominal one did.  Refit with the fitted topology's choices until they stop changing.
        seen: list = []
        for _ in range(MAX_CONSISTENCY_ROUNDS):
            eff, values, fixed_lat = fitter.fit([all_algs[i] for i in keep])
            seen.append(tuple(all_algs))
            nxt = choices(eff, values)
            if nxt == all_algs:
                break
            all_algs = nxt
            if tuple(nxt) in seen:  # a cycle: keep the last fit, judged with its own choices below
                consistent = False
                break
        else:
            consistent = False
    fitter_all = _Fitter(topo, level, op, nodes, g, all_sizes, all_meas, proto, ovh_field)
    sim = fitter_all.simulate(eff, values, (all_sizes, all_algs))
    ovh = values.get(ovh_field, 0.0) if ovh_field else (topo.collectives.launch_s + topo.collectives.sync_s)
    res = FabricFitResult(log.source, level, op, nodes, g, float(eff), float(values[fitter.lat_field]), float(ovh),
                          list(all_algs), all_sizes.tolist(), all_meas.tolist(), sim.tolist(),
                          overhead_field=ovh_field)
    res.notes.extend(setting_notes + size_notes)
    _judge(res, values, fixed_lat, consistent, force)
    return res


def _judge(res: FabricFitResult, values: dict, fixed_lat: bool, consistent: bool, force: bool) -> None:
    """Notes and problems of a fit; raise unless ``force`` when there are problems."""
    if fixed_lat:
        res.notes.append("latency is not identifiable from this log (every size runs the same number of latency "
                         "hops): kept the topology's; the overhead absorbs the rest")
    if res.overhead_field is None:
        res.notes.append("scale-out fit: the per-collective overhead is the topology's (it is paid inside a node "
                         "too); efficiency and latency of the network were fitted")
    if not consistent:
        res.notes.append("the fitted topology's tuner keeps changing its algorithms from one refit to the next: the "
                         "residuals are those of the last fit with the algorithms it would run")
    for f, v in values.items():
        hi = BOUNDS[f][1]
        if v >= hi * (1 - 1e-6):
            res.problems.append(f"{f.replace('_s', '')} needs more than its physical bound {hi * 1e6:g} us "
                                "(module doc: not a fabric property; the log's setting or algorithm differs from "
                                "the one simulated)")
    big = res.max_residual(LARGE_BYTES)
    if not math.isnan(big) and big > MAX_REL_RESIDUAL_LARGE:
        res.problems.append(f"simulated times miss the log by up to {100 * big:.0f}% at >= 64 MiB "
                            f"(limit {100 * MAX_REL_RESIDUAL_LARGE:.0f}%)")
    if math.isnan(big):
        res.problems.append("the log has no sizes >= 64 MiB: the bandwidth is not pinned down")
    allr = res.max_residual()
    if allr > MAX_REL_RESIDUAL_ALL:
        res.problems.append(f"simulated times miss the log by up to {100 * allr:.0f}% at some size "
                            f"(limit {100 * MAX_REL_RESIDUAL_ALL:.0f}%)")
    if res.problems and not force:
        raise SpecError(res.source, "fit", "; ".join(res.problems) + " (use --force to apply it anyway)")


def calibrated_topology_yaml(topology_path: str, result: FabricFitResult) -> str:
    """The topology file's mapping with the fitted values, as YAML text with a header saying where they came
    from (the comments of the original file are not kept)."""
    import yaml

    from ..spec._fields import load_yaml_mapping

    data = load_yaml_mapping(topology_path)
    lvl = data.setdefault(result.level, {})
    lvl["efficiency"] = round(result.efficiency, 6)
    lvl["latency_us"] = round(result.latency_s * 1e6, 6)
    co = data.setdefault("collectives", {})
    if result.overhead_field == "collectives.launch_s":
        co["launch_us"] = round(result.overhead_s * 1e6, 6)
        co["sync_us"] = 0.0
    elif result.overhead_field == "collectives.net_overhead_s":
        co["net_overhead_us"] = round(result.overhead_s * 1e6, 6)
    data["name"] = f"{data.get('name', 'topology')}_fitted"
    dropped = _drop_fitted_ranges(data, result)
    cal = data.get("calibration")
    if isinstance(cal, str) and not Path(cal).is_absolute():  # keep the kernel profile reachable from anywhere
        data["calibration"] = str((Path(topology_path).resolve().parent / cal).resolve())
    head = [f"# {result.level} fitted by simulation (simfuse fit-fabric) to {result.source}:",
            f"#   {result.collective} on {result.nodes} nodes x {result.gpus_per_node} GPUs, algorithms "
            f"{', '.join(sorted(set(result.algorithms)))}",
            f"#   efficiency {result.efficiency:.4f}, latency {result.latency_s * 1e6:.3f} us, "
            + (f"{result.overhead_field.split('.')[1][:-2]} {result.overhead_s * 1e6:.3f} us"
               if result.overhead_field else "per-collective overhead kept (the topology's)"),
            f"#   max relative residual {result.residual_text()}"]
    head += [f"#   note: {n}" for n in result.notes]
    if dropped:
        head.append(f"#   input ranges of the fitted fields removed (the fit replaces them): {', '.join(dropped)}")
    head += [f"#   WARNING (applied with --force): {p}" for p in result.problems]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)


def _drop_fitted_ranges(data: dict, result) -> list[str]:
    """Remove the ``uncertain:`` entries of the fields a fit has just written (a fitted value need not lie in the
    file's old range, and the range described the unfitted estimate); the names removed."""
    block = data.get("uncertain")
    if not isinstance(block, dict):
        return []
    fitted = {f"{result.level}.efficiency", f"{result.level}.latency_us"}
    if result.overhead_field == "collectives.launch_s":
        fitted |= {"collectives.launch_us", "collectives.sync_us"}
    elif result.overhead_field == "collectives.net_overhead_s":
        fitted.add("collectives.net_overhead_us")
    dropped = [k for k in block if k in fitted]
    for k in dropped:
        del block[k]
    if not block:
        del data["uncertain"]
    return dropped
