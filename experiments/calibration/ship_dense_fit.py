"""Put the dense GEMM fits of a Kineto trace into a calibration profile, keeping only the families whose
leave-shape-out error is small enough; everything else in the profile stays as it is (byte for byte).

    python experiments/calibration/ship_dense_fit.py [--trace T.json.gz] [--profile P.yaml] [--max-cv-rms 0.15]

Defaults: the team's H200 trace with shapes (experiments/results/h200_traces/torch_profiler_dense_h200.json.gz)
into profiles/h200_calibration.yaml.  The fits are those of ``simfuse calibrate T --kind kineto``
(simfuse/calibrate/dense.py: candidate models selected by leave-shape-out error).  Only ``gemm`` families are
shipped (the element-wise fits are left out: not what this profile change is about); a family without a
cross-validated error, or above the threshold, is named in the section's ``note`` instead."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.calibrate.build import write_yaml_atomic  # noqa: E402
from simfuse.calibrate.dense import dense_section, read_dense_samples  # noqa: E402
from simfuse.profile.load import load_profile  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "experiments/results/h200_traces/torch_profiler_dense_h200.json.gz"))
    ap.add_argument("--profile", default=str(ROOT / "profiles/h200_calibration.yaml"))
    ap.add_argument("--max-cv-rms", type=float, default=0.15)
    args = ap.parse_args(argv)
    skipped: dict[str, int] = {}
    rel = os.path.relpath(args.trace, ROOT)
    section = dense_section(read_dense_samples(args.trace, skipped), [rel], skipped)
    keep, left = [], []
    for f in section["fits"]:
        cv = f.get("cv")
        name = f"{f['family']}/{f['dtype']}"
        if f["family"] != "gemm":
            left.append(f"{name} (not a GEMM: not shipped{_cv(cv)})")
        elif cv is None or cv["rel_residual_rms"] > args.max_cv_rms:
            left.append(f"{name} (leave-shape-out rms {_cv(cv, bare=True)} > {args.max_cv_rms:g})")
        else:
            keep.append(f)
    section["fits"] = keep
    section["note"] = (f"shipped: {', '.join(f['family'] + '/' + f['dtype'] for f in keep) or 'none'} "
                       f"(leave-shape-out rms <= {args.max_cv_rms:g}); left out: {'; '.join(left) or 'none'}")
    path = Path(args.profile)
    data = yaml.safe_load(path.read_text())
    with open(args.trace, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    data["sources"] = [s for s in data.get("sources", []) if s.get("path") != rel] + [
        {"path": rel, "format": "torch_profiler", "sha256": sha, "items": len(read_dense_samples(args.trace))}]
    data["dense"] = section
    write_yaml_atomic(path, data)
    load_profile(path)  # the written profile must load
    print(f"wrote {path}: {section['note']}")
    return 0


def _cv(cv, bare=False):
    if cv is None:
        return "none" if bare else ""
    v = f"{cv['rel_residual_rms']:.3g}"
    return v if bare else f"; leave-shape-out rms {v}"


if __name__ == "__main__":
    sys.exit(main())
