"""Refit the shipped H200 profile's ``wave_kernels`` on the training campaigns, write the cross-validation outputs,
and (a separate, later stage) predict the held-out test campaign with the frozen shipped models.

    python experiments/calibration/h200_wave_refit.py fit    # fit on TRAIN; write profiles/h200_calibration.yaml's
                                                 # wave_kernels + sources and cv/ (campaign_cv.*, validate_campaign.txt)
    python experiments/calibration/h200_wave_refit.py test   # predict TEST with the wave models the shipped profile holds
                                                 # (no refit); write cv/heldout5/

Issue 12, sixth pass: TRAIN is v1, its repeat, v2, v3, v4, v5 and the former held-out campaigns heldout2, heldout3
and heldout4 (test sets of earlier passes, looked at then: training data now); TEST is heldout5 (seed 2029, three
times heldout4's shapes per family, every shape on two fresh allocations), predicted once after the models were
frozen.  (Fifth pass: TRAIN without v5 and heldout4, TEST heldout4; its report is in cv/heldout4_fifth_pass/.)  Only ``wave_kernels``, ``created_utc`` and the
campaign entries of ``sources`` of the profile change; the rest of it (classic fits, dense, points) is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN_DIR = ROOT / "experiments/results/h200_campaign"
TRAIN = ("campaign.csv.gz", "repeat/campaign.csv.gz", "v2/campaign.csv.gz", "v3/campaign.csv.gz",
         "v4/campaign.csv.gz", "v5/campaign.csv.gz", "heldout2/campaign.csv.gz", "heldout3/campaign.csv.gz",
         "heldout4/campaign.csv.gz")
TEST = "heldout5/campaign.csv.gz"
PROFILE = ROOT / "profiles/h200_calibration.yaml"


def _rel(p: Path) -> str:
    """``p`` relative to the repository (the script runs from there: main() changes into it)."""
    return str(Path(p).resolve().relative_to(ROOT))


def fit(out_cv: Path) -> None:
    from simfuse.calibrate.build import _sha256, write_yaml_atomic
    from simfuse.calibrate.validate import campaign_validation
    from simfuse.calibrate.wavefit import fit_campaign, read_campaign
    from simfuse.cli.calibrate import print_campaign_summary

    paths = [Path(_rel(CAMPAIGN_DIR / c)) for c in TRAIN]
    rows = []
    for p in paths:
        rows.extend(read_campaign(p))
    t0 = time.time()
    fits = fit_campaign(rows)
    print(f"fitted {len(fits)} families on {len(rows)} rows in {time.time() - t0:.0f} s", file=sys.stderr)
    summary = campaign_validation(paths, out_cv, fits=fits)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_campaign_summary(summary, _rel(out_cv))
    (out_cv / "validate_campaign.txt").write_text(buf.getvalue())
    print(buf.getvalue())
    prof = yaml.safe_load(PROFILE.read_text())
    from simfuse.calibrate.build import WAVE_MAX_CV_MEDIAN

    prof["created_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    prof["sources"] = [s for s in prof["sources"] if s.get("format") != "kernel_campaign"] + [
        {"path": _rel(p), "format": "kernel_campaign", "sha256": _sha256(p), "items": len(read_campaign(p))}
        for p in paths]
    prof["wave_kernels"] = [w.to_dict() for w in fits if w.cv.get("median_abs", 0.0) <= WAVE_MAX_CV_MEDIAN]
    write_yaml_atomic(PROFILE, prof)


def test(out: Path) -> None:
    from simfuse.calibrate.validate import campaign_validation
    from simfuse.cli.calibrate import print_campaign_summary
    from simfuse.profile.load import load_profile

    fits = [w for _, w in sorted(load_profile(PROFILE).wave_fits.items())]
    summary = campaign_validation([_rel(CAMPAIGN_DIR / c) for c in TRAIN], out, heldout=_rel(CAMPAIGN_DIR / TEST),
                                  fits=fits)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_campaign_summary(summary, _rel(out))
    (out / "validate_campaign.txt").write_text(buf.getvalue())
    print(buf.getvalue())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("fit", "test"))
    a = ap.parse_args()
    import os

    os.chdir(ROOT)  # file names in the outputs relative to the repository
    if a.stage == "fit":
        fit(CAMPAIGN_DIR / "cv")
    else:
        test(CAMPAIGN_DIR / "cv/heldout5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
