"""Calibration profiles: load (validated), apply to a topology, build the cost model.

A profile is the YAML file ``simfuse calibrate`` writes (format: docs/calibration.md).  A topology file
references it with ``calibration: PATH``; :func:`cost_model_for` then returns a
:class:`~simfuse.costs.calibrated.CalibratedCostModel` and :func:`apply_to_topology` the topology with the
fitted fabric and launch parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..costs.analytic import PER_CU_BW_HEADROOM, RooflineCostModel
from ..costs.base import CostModel
from ..costs.calibrated import CalibratedCostModel, KernelFit
from ..errors import SpecError, short_repr
from ..spec import TopologySpec
from ..spec._fields import Fields, load_yaml_mapping
from .fit import COLLECTIVE_FACTORS

FORMAT_VERSION = 1
LEVELS = ("scale_up", "scale_out")


@dataclass(frozen=True)
class FabricFit:
    """Alpha-beta parameters of one fabric level (from the collective named in ``collective``)."""

    level: str
    collective: str
    ranks: int
    hosts: int
    alpha_s: float
    beta_bytes_per_s: float  # nccl-tests bus bandwidth per GPU


@dataclass
class CalibrationProfile:
    """A loaded, validated profile.  ``data`` is the mapping as read (for tools that want every detail)."""

    source: str
    data: dict
    compute_units: int | None = None
    kernel_launch_latency_s: float | None = None
    kernels: list[KernelFit] = field(default_factory=list)
    fused_slowdown: list[dict] = field(default_factory=list)
    fabric: dict[str, FabricFit] = field(default_factory=dict)
    points: list[dict] = field(default_factory=list)
    #: (kernel, variant, dtype) -> wave model fitted to a timing campaign (``wave_kernels`` in the file)
    wave_fits: dict = field(default_factory=dict)
    #: (family, dtype) -> :class:`~simfuse.costs.calibrated.DenseFit` from profiler traces (``dense`` in the file)
    dense: dict = field(default_factory=dict)

    def kernel_fits(self) -> dict[tuple[str, str, str], KernelFit]:
        return {(k.kernel, k.variant, k.dtype): k for k in self.kernels}

    def fused_slowdown_map(self) -> dict[tuple[str, str], float]:
        """(kernel, dtype) -> median fused/compute makespan ratio over the measured shapes (the fitted model is
        an effective per-workgroup time for makespans, so the makespan ratio is the consistent slowdown)."""
        by: dict[tuple[str, str], list[float]] = {}
        for item in self.fused_slowdown:
            by.setdefault((item["kernel"], item["dtype"]), []).append(float(item["makespan_ratio"]))
        out = {}
        for key, vals in by.items():
            vals.sort()
            m = len(vals)
            out[key] = vals[m // 2] if m % 2 else 0.5 * (vals[m // 2 - 1] + vals[m // 2])
        return out


#: Keys whose value may be null (a dropped term); list them in ``reject_unknown(extra_allowed=...)``.
OPTIONAL_RATES = ("bw_bytes_per_s", "flops_per_s", "beta_bytes_per_s")


def _opt_rate(f: Fields, key: str) -> float | None:
    """A positive rate, or ``None`` when the key is absent or null."""
    return f.number(key, positive=True) if f.has(key) else None


def profile_from_dict(data: dict, source: str = "<memory>") -> CalibrationProfile:
    """Validate a profile mapping; errors name ``source`` and the dotted key."""
    root = Fields(data, source)
    version = root.integer("simfuse_calibration")
    if version != FORMAT_VERSION:
        raise SpecError(source, "simfuse_calibration", f"unsupported profile version {version} (expected "
                                                       f"{FORMAT_VERSION})")
    prof = CalibrationProfile(source=source, data=data)
    dev = root.sub("device", required=False)
    if dev.has("compute_units"):
        prof.compute_units = dev.integer("compute_units", min_value=1)
    if dev.has("kernel_launch_latency_s"):
        lat = dev.sub("kernel_launch_latency_s")
        prof.kernel_launch_latency_s = lat.number("value", min_value=0.0)
    dev.sub("host_launch_overhead_s", required=False)
    kernels = root.list("kernels", [])
    for i, item in enumerate(kernels):
        k = Fields(item, source, f"kernels[{i}]")
        fit = KernelFit(
            kernel=k.string("kernel"), variant=k.string("variant"), dtype=k.string("dtype"),
            overhead_s=k.number("overhead_s", min_value=0.0),
            bw_bytes_per_s=_opt_rate(k, "bw_bytes_per_s"),
            flops_per_s=_opt_rate(k, "flops_per_s"),
            slots=k.integer("slots", min_value=1, max_value=2**26),
            launch_latency_s=k.number("launch_latency_s", min_value=0.0),
            bw_headroom=k.number("bw_headroom", PER_CU_BW_HEADROOM, min_value=1.0),
        )
        if fit.overhead_s == 0 and fit.bw_bytes_per_s is None and fit.flops_per_s is None:
            raise SpecError(source, k.name("overhead_s"), "all terms of the workgroup model are zero")
        _quality(k, "fit")
        pf = k.sub("program_fit", required=False)
        if pf.data:
            pf.number("overhead_s", min_value=0.0)
            _opt_rate(pf, "bw_bytes_per_s")
            _opt_rate(pf, "flops_per_s")
            pf.number("bw_headroom", PER_CU_BW_HEADROOM, min_value=1.0)
            _quality(pf, "fit")
            pf.reject_unknown(extra_allowed=OPTIONAL_RATES)
        k.sub("launch_latency_fit", required=False)
        k.sub("host_launch_overhead_s", required=False)
        k.sub("dispatch_gap_s", required=False)
        k.sub("slots_fit", required=False)
        k.integer("runs", 0, min_value=0)
        k.reject_unknown(extra_allowed=OPTIONAL_RATES)
        prof.kernels.append(fit)
    seen = set()
    for fit in prof.kernels:
        key = (fit.kernel, fit.variant, fit.dtype)
        if key in seen:
            raise SpecError(source, "kernels", f"duplicate entry for {key}")
        seen.add(key)
    for i, item in enumerate(root.list("fused_slowdown", [])):
        s = Fields(item, source, f"fused_slowdown[{i}]")
        s.string("kernel")
        s.string("dtype")
        s.number("wg_time_ratio", positive=True)
        s.number("makespan_ratio", positive=True)
        prof.fused_slowdown.append(dict(item))
    fab = root.sub("fabric", required=False)
    for level in list(fab.data):
        if level not in LEVELS:
            raise SpecError(source, fab.name(level), f"unknown fabric level; expected one of {', '.join(LEVELS)}")
        lv = fab.sub(level)
        use = lv.string("use", choices=tuple(COLLECTIVE_FACTORS))
        ranks = lv.integer("ranks", min_value=2)
        hosts = lv.integer("hosts", min_value=1)
        colls = lv.sub("collectives")
        if use not in colls.data:
            raise SpecError(source, lv.name("use"), f"collective {use!r} not under {colls.name('')[:-1]}")
        chosen = None
        for cname in list(colls.data):
            if cname not in COLLECTIVE_FACTORS:
                raise SpecError(source, colls.name(cname), "unknown collective")
            c = colls.sub(cname)
            alpha = c.number("alpha_s", min_value=0.0)
            beta = _opt_rate(c, "beta_bytes_per_s") or math.inf  # absent: the byte term vanished
            c.integer("ranks", min_value=2)
            c.list("sources", [])
            _quality(c, "fit")
            c.reject_unknown(extra_allowed=OPTIONAL_RATES)
            if cname == use:
                chosen = (alpha, beta)
        lv.reject_unknown()
        if chosen is not None:  # always set: ``use`` was checked to be among the collectives
            prof.fabric[level] = FabricFit(level, use, ranks, hosts, chosen[0], chosen[1])
    for i, item in enumerate(root.list("points", [])):
        p = Fields(item, source, f"points[{i}]")
        kind = p.string("kind", choices=("kernel", "collective"))
        p.string("quantity", "time", choices=("time", "makespan"))
        p.number("measured_s", positive=True)
        if kind == "kernel":
            for key in ("kernel", "variant", "dtype"):
                p.string(key)
            p.string("shape", "")
            p.integer("grid", min_value=1, max_value=2**26)
            p.number("flops", min_value=0.0)
            p.number("bytes", min_value=0.0)
        else:
            p.string("level", choices=LEVELS)
            p.string("collective", choices=tuple(COLLECTIVE_FACTORS))
            p.integer("ranks", min_value=2)
            p.number("size_bytes", min_value=0.0)
        prof.points.append(dict(item))
    for i, item in enumerate(root.list("wave_kernels", [])):
        wf = _wave_fit(item, source, f"wave_kernels[{i}]")
        key = (wf.kernel, wf.variant, wf.dtype)
        if key in prof.wave_fits:
            raise SpecError(source, "wave_kernels", f"duplicate entry for {key}")
        prof.wave_fits[key] = wf
    prof.dense = _dense_fits(root.sub("dense", required=False), source)
    root.reject_unknown(extra_allowed=("generator", "created_utc", "sources", "torch_ops", "notes", "wave_kernels"))
    return prof


def _wave_fit(item, source: str, where: str):
    from ..costs.calibrated import WaveFit, sigma

    w = Fields(item, source, where)
    for key in ("kernel", "variant", "dtype"):
        w.string(key)
    w.integer("slots", min_value=1)
    w.integer("cus", 132, min_value=1)
    w.number("launch_s", min_value=0.0)
    for key in ("slots_by_dim", "slots_by_layout"):  # resident programs per row width / compiled layout
        if w.has(key):
            m = w.sub(key)
            for k in list(m.data):
                m.integer(k, min_value=1)
    if w.has("latency_by_layout"):  # per compiled layout, a factor on the dependent-step chain (sixth pass)
        m = w.sub("latency_by_layout")
        for k in list(m.data):
            m.number(k, positive=True)
    terms = w.sub("terms")
    for t in list(terms.data):
        tt = terms.sub(t)
        kind = tt.string("sigma")
        try:
            sigma(kind, 1, 2)
        except (KeyError, ValueError) as exc:
            raise SpecError(source, tt.name("sigma"), f"unknown occupancy scaling {kind!r}") from exc
        tt.number("s_per_unit", min_value=0.0)
    try:
        return WaveFit.from_dict(dict(item))
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(source, where, f"malformed wave model: {exc}") from exc


def _dense_fits(d: Fields, source: str) -> dict:
    """The ``dense:`` section (simfuse.calibrate.dense): validated fits keyed by (family, dtype)."""
    from ..costs.calibrated import DenseFit
    from ..units import DTYPE_BYTES

    out: dict = {}
    if not d.data:
        return out
    d.string("model", "")
    d.string("note", "")
    d.list("sources", [])
    d.sub("skipped", required=False)
    for i, item in enumerate(d.list("fits", [])):
        f = Fields(item, source, f"dense.fits[{i}]")
        fam = f.string("family", choices=("gemm", "elementwise", "embedding_bag"))
        dtype = f.string("dtype")
        gemm = fam == "gemm"
        model = f.string("model", "saturating", choices=("saturating", "terms") if gemm else ("saturating",))
        if model == "terms":
            fit = _dense_terms(f, dtype)
        else:
            f.string("x", "min_m_n" if gemm else "bytes", choices=("min_m_n",) if gemm else ("bytes",))
            peak = f.number("peak_flops_per_s" if gemm else "peak_bytes_per_s", positive=True)
            half = f.number("m_half" if gemm else "bytes_half", min_value=0.0)
            lo = f.number("m_min" if gemm else "x_min", positive=True)
            hi = f.number("m_max" if gemm else "x_max", positive=True)
            if hi < lo:
                raise SpecError(source, f.name("m_max" if gemm else "x_max"), "below the minimum")
            fit = DenseFit(fam, dtype, peak, half, lo, hi)
        _quality(f, "fit")
        _dense_cv(f)
        f.list("kernels", [])
        f.list("samples", [])
        f.string("note", "")
        f.reject_unknown()
        if dtype not in DTYPE_BYTES:
            continue  # a dtype the workloads never use (int64 indices, bool masks ...): read, never applied
        key = (fam, dtype)
        if key in out:
            raise SpecError(source, f.name("family"), f"duplicate dense fit for {key}")
        out[key] = fit
    d.reject_unknown()
    return out


def _dense_terms(f: Fields, dtype: str):
    """A shape-aware GEMM fit (``model: terms``): per-call, per-byte and per-FLOP coefficients and ranges."""
    from ..costs.calibrated import GEMM_FLOP_TERMS, DenseFit

    kind = f.string("flop_term", choices=GEMM_FLOP_TERMS)
    tile = f.list("tile", max_items=2)
    if len(tile) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096 for v in tile):
        raise SpecError(f.source, f.name("tile"), f"expected [tile_m, tile_n], integers in 1..4096, got {short_repr(tile)}")
    cus = f.integer("cus", min_value=1, max_value=100_000)
    coef = [f.number(k, min_value=0.0) for k in ("s_per_call", "s_per_byte", "s_per_flop")]
    ranges = []
    for dim in ("m", "n", "k"):
        lo, hi = f.number(f"{dim}_min", positive=True), f.number(f"{dim}_max", positive=True)
        if hi < lo:
            raise SpecError(f.source, f.name(f"{dim}_max"), "below the minimum")
        ranges += [lo, hi]
    return DenseFit("gemm", dtype, 0.0, 0.0, ranges[0], ranges[1], "terms", *coef, kind, (tile[0], tile[1]), cus,
                    tuple(ranges))


def _dense_cv(f: Fields) -> None:
    q = f.sub("cv", required=False)
    if q.data:
        q.string("method", "leave-shape-out", choices=("leave-shape-out",))
        q.string("selected", "")
        for k in ("rel_residual_rms", "rel_residual_max", "nested_rel_residual_rms", "nested_rel_residual_max"):
            q.number(k, min_value=0.0)
        c = q.sub("candidates", required=False)
        for k in list(c.data):
            c.number(k, min_value=0.0)
        q.reject_unknown()


def _quality(f: Fields, key: str) -> None:
    q = f.sub(key, required=False)
    if q.data:
        q.number("rel_residual_rms", min_value=0.0)
        q.number("rel_residual_max", min_value=0.0)
        q.integer("points", min_value=0)
        q.reject_unknown()


def load_profile(path: str | Path) -> CalibrationProfile:
    """Load and validate a calibration profile YAML; errors name the file and the key."""
    return profile_from_dict(load_yaml_mapping(path), source=str(path))


def apply_to_topology(spec: TopologySpec, profile: CalibrationProfile) -> TopologySpec:
    """The topology with the profile's fitted parameters (unfitted fields keep the topology's values).

    * ``device.kernel_launch_latency_s`` <- the measured launch latency of queued kernels;
    * ``scale_up.latency_s`` / ``scale_out.latency_s`` <- alpha of the level's chosen collective;
    * bandwidth: the fitted bus bandwidth beta (per GPU) becomes ``bw x efficiency`` with ``efficiency = beta /
      bw``.  For scale-out the per-GPU beta is converted to per-NIC with the GPUs per node *of the logs*
      (``ranks / hosts``), which share ``min(nics_per_node, G)`` NICs.

    Wherever a profile is applied, a link is never raised above its line rate: a fitted rate above the topology's
    line rate (beyond :data:`~simfuse.profile.bounds.LINE_RATE_TOLERANCE`, measurement noise) and a fitted
    latency above :data:`~simfuse.profile.bounds.MAX_ALPHA_S` raise :class:`SpecError` naming the profile
    and the level (the profile was measured on other hardware, or its alpha-beta fit is not physical); within the
    tolerance the efficiency is 1."""
    from .bounds import MAX_ALPHA_S, per_nic_rate

    overrides: dict[str, float | str] = {}
    if profile.kernel_launch_latency_s is not None:
        overrides["device.kernel_launch_latency_s"] = profile.kernel_launch_latency_s
    src = getattr(profile, "source", "<profile>")
    for level in ("scale_up", "scale_out"):
        fit = profile.fabric.get(level)
        if fit is None:
            continue
        if fit.alpha_s > MAX_ALPHA_S[level]:
            raise SpecError(str(src), f"fabric.{level}", f"fitted latency {fit.alpha_s * 1e6:.4g} us is above the "
                            f"physical bound {MAX_ALPHA_S[level] * 1e6:g} us of {level}: not applied")
        overrides[f"{level}.latency_s"] = fit.alpha_s
        if level == "scale_up":
            nominal, fitted = spec.scale_up.bw_bytes_per_s, fit.beta_bytes_per_s
        else:
            g = max(1, fit.ranks // max(1, fit.hosts))
            nominal = spec.scale_out.nic_bw_bytes_per_s
            fitted = per_nic_rate(fit.beta_bytes_per_s, g, spec.scale_out.nics_per_node)
        overrides.update(_bw_overrides(src, level, nominal, fitted))
    return spec.with_overrides(overrides)


def _bw_overrides(src, level: str, nominal: float, fitted: float) -> dict[str, float]:
    from .bounds import LINE_RATE_TOLERANCE

    if not math.isfinite(fitted):
        return {}
    if fitted > nominal * (1 + LINE_RATE_TOLERANCE):
        unit = "per NIC" if level == "scale_out" else "per GPU"
        raise SpecError(str(src), f"fabric.{level}", f"fitted rate {fitted / 1e9:.4g} GB/s {unit} is above the "
                        f"topology's line rate {nominal / 1e9:.4g} GB/s: the profile was not measured on this "
                        "topology (or its fit is not one link's rate); not applied")
    return {f"{level}.efficiency": min(1.0, fitted / nominal)}


def cost_model_for(spec: TopologySpec, *, extrapolate: bool = False,
                   profile: CalibrationProfile | None = None) -> CostModel:
    """Calibrated cost model when ``spec.calibration`` names a profile, otherwise the roofline.

    By default a fit is used only near the shapes it was traced on (see
    :data:`~simfuse.costs.calibrated.EXTRAPOLATION_FACTOR`), the roofline elsewhere; ``extrapolate=True`` uses
    the fits everywhere (``simfuse validate`` does, and flags the points outside the traced range).  ``profile``:
    the profile ``spec.calibration`` names, when the caller has loaded it already (read from the file otherwise)."""
    if not spec.calibration:
        return RooflineCostModel(spec.device)
    if profile is None:
        profile = load_profile(spec.calibration)
    calibrated_spec = apply_to_topology(spec, profile)
    from ..costs.calibrated import EXTRAPOLATION_FACTOR

    return CalibratedCostModel.from_profile(profile, RooflineCostModel(calibrated_spec.device),
                                            extrapolation=None if extrapolate else EXTRAPOLATION_FACTOR)
