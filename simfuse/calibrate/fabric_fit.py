"""Fabric calibration by simulation: fit a topology's fabric so that the simulator reproduces an nccl-tests log.

The alpha-beta mapping of :mod:`.build` reads a log's bus bandwidth as one link's bandwidth, which is wrong for
hierarchical collectives (a 2-node all-reduce would set the NIC to 196 GB/s).  Here the simulator runs the
algorithm NCCL ran (``NCCL_ALGO`` when the log says, otherwise the tuner's choice for each size on the nominal
topology, then refitted with the fitted topology's own choices until they agree: the written file must
reproduce the log with the algorithms its users' runs will pick) on the whole system, and three parameters of the
level the log exercises are fitted:

* ``efficiency`` of that level's links (the achievable fraction of line rate), bounded to ``(0, 1]``, so a link
  is never faster than the topology's line rate;
* ``latency_s`` of that level (per hop);
* the per-collective software overhead ``collectives.launch_s`` (``sync_s`` is folded into it and set to 0).

Method: for a given efficiency the simulated time of size ``i`` is ``t0_i + k_i * latency + overhead``, where
``t0_i`` is the simulated time with no latency or overhead and ``k_i`` the number of latency hops on the critical
path at that efficiency (a finite difference; latency only delays steps).  When ``k_i`` is the same at every
size, latency and overhead are not separable: latency keeps the topology's value and the overhead is fitted.  The efficiency is searched on a log grid refined by golden section; latency and overhead
come from a non-negative weighted least squares on relative residuals.

Acceptance (otherwise :class:`~simfuse.errors.SpecError`, exit 2, unless ``force``): at least
:data:`MIN_POINTS_PER_PARAMETER` distinct sizes per parameter, the log not faster than line rate allows
(:func:`.plausibility.min_bytes_each_way`), and a maximum relative residual of at most
:data:`MAX_REL_RESIDUAL_LARGE` over sizes of :data:`LARGE_BYTES` and more (the issue's 15% at >= 64 MiB) and at
most :data:`MAX_REL_RESIDUAL_ALL` overall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..collectives import REGISTRY, run_collective
from ..collectives.groups import Tuner, world
from ..errors import SpecError
from ..names import canonical_collective
from ..spec import TopologySpec
from .nccl_tests import NcclTestLog

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


@dataclass
class FabricFitResult:
    """Fitted parameters, the algorithms simulated per size, and the residuals (relative, signed)."""

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

    @property
    def residuals(self) -> np.ndarray:
        return np.asarray(self.simulated_s) / np.asarray(self.measured_s) - 1.0

    def max_residual(self, min_bytes: float = 0.0) -> float:
        sel = np.asarray(self.sizes_bytes) >= min_bytes
        return float(np.max(np.abs(self.residuals[sel]))) if sel.any() else float("nan")

    def overrides(self) -> dict[str, float]:
        """Dotted-path topology overrides (:meth:`~simfuse.spec.TopologySpec.with_overrides`)."""
        return _overrides(self.level, self.efficiency, self.latency_s, self.overhead_s)

    def as_dict(self) -> dict:
        return {"source": self.source, "level": self.level, "collective": self.collective, "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node, "efficiency": self.efficiency, "latency_s": self.latency_s,
                "overhead_s": self.overhead_s, "max_rel_residual": self.max_residual(),
                "max_rel_residual_large": self.max_residual(LARGE_BYTES), "problems": list(self.problems),
                "notes": list(self.notes),
                "points": [{"size_bytes": s, "algorithm": a, "measured_s": m, "simulated_s": t}
                           for s, a, m, t in zip(self.sizes_bytes, self.algorithms, self.measured_s,
                                                 self.simulated_s, strict=True)]}


def _overrides(level: str, eff: float, lat: float, ovh: float) -> dict[str, float]:
    return {f"{level}.efficiency": eff, f"{level}.latency_s": lat, "collectives.launch_s": ovh,
            "collectives.sync_s": 0.0}


def _algorithm_for_log(log: NcclTestLog, op: str) -> str | None:
    algo = log.env.get("NCCL_ALGO")
    if not algo:
        return None
    names = [a.strip().lower() for a in algo.split(",") if a.strip() and not a.strip().startswith("^")]
    if len(names) != 1:
        raise SpecError(log.source, "NCCL_ALGO", f"{algo!r}: a single forced algorithm is needed to simulate it")
    name = NCCL_ALGOS.get(names[0], names[0])
    if name is None or name not in REGISTRY.get(op, {}):
        raise SpecError(log.source, "NCCL_ALGO", f"the log ran {algo} for {op}, which simfuse does not model")
    return name


def fit_fabric(log: NcclTestLog, topology: TopologySpec, *, force: bool = False) -> FabricFitResult:
    """Fit the fabric level the log exercises (one node: scale-up; several: scale-out); see the module doc."""
    from .plausibility import min_bytes_each_way

    op = canonical_collective(log.collective, log.source)
    nodes, g = int(log.nodes or 1), log.gpus_per_node
    if nodes * g != log.ranks:
        raise SpecError(log.source, "ranks", f"{log.ranks} ranks do not fill {nodes} nodes evenly")
    if log.ranks < 2:
        raise SpecError(log.source, "ranks", "a fabric fit needs at least 2 ranks")
    level = "scale_out" if nodes > 1 else "scale_up"
    rows = sorted((r for r in log.rows if r.size_bytes > 0 and r.time_s > 0), key=lambda r: r.size_bytes)
    sizes = np.array([float(r.size_bytes) for r in rows])
    meas = np.array([r.time_s for r in rows])
    need = MIN_POINTS_PER_PARAMETER * FIT_PARAMETERS
    if len(np.unique(sizes)) < need:
        raise SpecError(log.source, "rows", f"{len(np.unique(sizes))} distinct message sizes; a fit of "
                                            f"{FIT_PARAMETERS} parameters needs at least {need}")
    topo = topology
    if g % min(topo.scale_out.nics_per_node, g):
        raise SpecError(log.source, "ranks", f"{g} GPUs per node do not share the topology's NICs evenly")
    # physics first: a log faster than line rate allows was not run on this topology
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
    forced = _algorithm_for_log(log, op)
    if forced is None:
        tuner = Tuner(topo, nodes, g)
        algs = [tuner.choose(op, world(log.ranks), float(s)) for s in sizes]
    else:
        algs = [forced] * len(sizes)

    all_sizes, all_meas = sizes, meas
    keep = np.arange(len(sizes))
    if len(sizes) > MAX_FIT_POINTS:  # fit on sizes spread evenly in log; residuals are reported on all of them
        keep = np.unique(np.round(np.linspace(0, len(sizes) - 1, MAX_FIT_POINTS)).astype(int))
        sizes, meas = sizes[keep], meas[keep]

    def simulate(eff: float, lat: float, ovh: float, which) -> np.ndarray:
        t = topo.with_overrides(_overrides(level, eff, lat, ovh))
        ss, aa = which
        return np.array([run_collective(t, nodes, op, float(s), algorithm=a, gpus_per_node=g).time_s
                         for s, a in zip(ss, aa, strict=True)])

    delta = 1e-7
    w = 1.0 / meas
    nominal_lat = getattr(topo, level).latency_s

    def fit(fit_algs: list[str]):
        """(efficiency, latency, overhead, latency fixed?) fitted with these algorithms at the fit's sizes."""
        which = (sizes, fit_algs)

        def solve(eff: float, lat_ref: float | None = None):
            """Best (latency, overhead) for this efficiency: weighted least squares on relative residuals of the
            model linearised around ``lat_ref`` (the level's latency competes with the other level's in every
            step, so the time is only piecewise linear in it).  When every size runs the same number of latency
            hops, latency and overhead cannot be told apart: latency stays at ``lat_ref`` and only the overhead
            is fitted."""
            lat_ref = nominal_lat if lat_ref is None else lat_ref
            t_ref = simulate(eff, lat_ref, 0.0, which)
            hops = (simulate(eff, lat_ref + delta, 0.0, which) - t_ref) / delta
            r = (meas - t_ref) * w
            fixed_lat = float(np.ptp(hops)) < 0.5
            best = None
            # unknowns: d = latency - lat_ref (latency >= 0) and overhead >= 0
            options = [("ovh",), ()] if fixed_lat else [("d", "ovh"), ("d",), ("ovh",), ()]
            for cols in options:
                A = np.stack([hops * w if c == "d" else w for c in cols], axis=1) if cols else np.zeros((len(r), 0))
                x = np.linalg.lstsq(A, r, rcond=None)[0] if cols else np.zeros(0)
                vals = dict(zip(cols, x.tolist(), strict=True))
                if vals.get("ovh", 0.0) < 0 or lat_ref + vals.get("d", 0.0) < 0:
                    continue
                err = float(np.sum((A @ x - r) ** 2)) if cols else float(np.sum(r ** 2))
                if best is None or err < best[0]:
                    best = (err, (lat_ref + vals.get("d", 0.0), vals.get("ovh", 0.0)))
            return best[0], best[1], fixed_lat

        grid = np.geomspace(EFFICIENCY_MIN, 1.0, 10)
        errs = [solve(float(e))[0] for e in grid]
        i = int(np.argmin(errs))
        lo, hi = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
        phi = (math.sqrt(5) - 1) / 2
        a, b = lo + (1 - phi) * (hi - lo), lo + phi * (hi - lo)
        fa, fb = solve(a)[0], solve(b)[0]
        for _ in range(10):
            if fa <= fb:
                hi, b, fb = b, a, fa
                a = lo + (1 - phi) * (hi - lo)
                fa = solve(a)[0]
            else:
                lo, a, fa = a, b, fb
                b = lo + phi * (hi - lo)
                fb = solve(b)[0]
        cands = [(errs[i], float(grid[i])), (fa, a), (fb, b)]
        eff = min(cands)[1]
        _err, (lat, ovh), fixed_lat = solve(eff)
        for _ in range(3):  # re-linearise around the fitted latency
            if fixed_lat:
                break
            _err, (lat, ovh), fixed_lat = solve(eff, lat)
        return float(eff), float(lat), float(ovh), fixed_lat

    def choices(eff: float, lat: float, ovh: float) -> list[str]:
        """What the tuner runs at every size of the log on the topology with these values."""
        tuner = Tuner(topo.with_overrides(_overrides(level, eff, lat, ovh)), nodes, g)
        return [tuner.choose(op, world(log.ranks), float(s)) for s in all_sizes]

    all_algs = list(algs)
    consistent = True
    if forced is not None:
        eff, lat, ovh, fixed_lat = fit([all_algs[i] for i in keep])
    else:
        # self-consistent: the fitted topology is what users run, and its tuner may pick other algorithms than
        # the nominal one did (a slower fitted level favours algorithms that cross it less).  Refit with the
        # fitted topology's choices until they stop changing; the residuals are those of the fitted topology
        # with its own choices, the numbers a user of the written file gets.
        seen: list = []
        for _ in range(MAX_CONSISTENCY_ROUNDS):
            eff, lat, ovh, fixed_lat = fit([all_algs[i] for i in keep])
            seen.append(tuple(all_algs))
            nxt = choices(eff, lat, ovh)
            if nxt == all_algs:
                break
            all_algs = nxt
            if tuple(nxt) in seen:  # a cycle: keep the last fit, judged with its own choices below
                consistent = False
                break
        else:
            consistent = False
    sim = simulate(eff, lat, ovh, (all_sizes, all_algs))
    res = FabricFitResult(log.source, level, op, nodes, g, float(eff), float(lat), float(ovh), list(all_algs),
                          all_sizes.tolist(), all_meas.tolist(), sim.tolist())
    if fixed_lat:
        res.notes.append("latency is not identifiable from this log (every size runs the same number of latency "
                         "hops): kept the topology's; the overhead absorbs the rest")
    if not consistent:
        res.notes.append("the fitted topology's tuner keeps changing its algorithms from one refit to the next: the "
                         "residuals are those of the last fit with the algorithms it would run")
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
        raise SpecError(log.source, "fit", "; ".join(res.problems) + " (use --force to apply it anyway)")
    return res


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
    co["launch_us"] = round(result.overhead_s * 1e6, 6)
    co["sync_us"] = 0.0
    data["name"] = f"{data.get('name', 'topology')}_fitted"
    cal = data.get("calibration")
    if isinstance(cal, str) and not Path(cal).is_absolute():  # keep the kernel profile reachable from anywhere
        data["calibration"] = str((Path(topology_path).resolve().parent / cal).resolve())
    head = [f"# {result.level} fitted by simulation (simfuse fit-fabric) to {result.source}:",
            f"#   {result.collective} on {result.nodes} nodes x {result.gpus_per_node} GPUs, algorithms "
            f"{', '.join(sorted(set(result.algorithms)))}",
            f"#   efficiency {result.efficiency:.4f}, latency {result.latency_s * 1e6:.3f} us, per-collective "
            f"overhead {result.overhead_s * 1e6:.3f} us",
            f"#   max relative residual {100 * result.max_residual():.1f}% (all sizes), "
            f"{100 * result.max_residual(LARGE_BYTES):.1f}% (>= 64 MiB)"]
    head += [f"#   note: {n}" for n in result.notes]
    head += [f"#   WARNING (applied with --force): {p}" for p in result.problems]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)

