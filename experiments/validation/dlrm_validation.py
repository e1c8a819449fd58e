"""Simulated DLRM-DCNv2 step time against step times derived from NVIDIA's public MLPerf Training result logs.

A test of the model, never a fit: no simfuse parameter was set from these logs (the topologies, the calibration
profile and the model files predate this script and are used unchanged).  The derivation of a step time from a
log is in experiments/validation/mllog.py.  The logs are not redistributed: the per-run step times derived from them are
committed in experiments/results/dlrm_validation/derived_steps.csv, one row per run with its repository, commit,
path and git blob; ``--extract`` re-derives that CSV from mirrored repositories.

Usage:
    python experiments/validation/dlrm_validation.py [--out experiments/results/dlrm_validation] [--smoke]
    python experiments/validation/dlrm_validation.py --extract /work/.mirror   # re-derive derived_steps.csv from mirrored repos

Simulation: baseline (bulk-synchronous) mode, as the submissions run; two placements: ``planned`` (the sharding
planner, simfuse/workloads/planner.py) and ``table_wise``; the model file whose per-GPU batch matches the
submission (models/dlrm_dcnv2_mlperf*.yaml) on topologies/h100_nvl8_ib_ndr.yaml (H200 rows: h200_nvl8_ib_ndr).
A third column set, ``hugectr``: the HugeCTR execution the submissions run, every setting read from HugeCTR's
source and the submission's scripts (docs/hugectr_baseline.md): models/dlrm_dcnv2_mlperf_hugectr*.yaml (fp16
All-to-All payload and gradients, intra-iteration overlap, one grouped all-reduce, dense Adagrad), the submission's
own sharding plan (models/plans/hugectr_<round>_<n>n.csv, experiments/scaling/hugectr_plans.py) and, on several nodes, IB
SHARP (topologies/h100_nvl8_ib_ndr_sharp.yaml; the configs set NCCL_COLLNET_ENABLE=1).  ``--ablation`` also writes
ablation.csv: each HugeCTR setting added in turn to the ``planned`` baseline, and each removed from the full one.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "validation"))  # mllog

from mllog import MLLogError, RunSteps, parse_runs, step_times  # noqa: E402

from simfuse.errors import SpecError  # noqa: E402

DERIVED = ROOT / "experiments" / "results" / "dlrm_validation" / "derived_steps.csv"
#: columns of derived_steps.csv: the run's submission (round, folder), where its log is (repository, commit, path,
#: blob), what the log says (platform, global batch, train samples) and what we derived (windows, step_s)
DERIVED_COLUMNS = ("round", "config", "repository", "commit", "path", "blob", "platform", "global_batch",
                   "train_samples", "windows", "step_s")
#: v4.1's 1-node folders (eos_ngc24.04, h200_ngc24.04) are left out: their MLLOG lines are identical to v4.0's (the
#: same runs, listed again), so they would count twice.
#: (round, repository, commit of the mirrored snapshot, folder under NVIDIA/results, nodes, model, topology)
SUBMISSIONS = [
    ("v3.0", "mlcommons/training_results_v3.0", "63e326c400f5d8bb8c6070a9ab08332d4931152e",
     "dgxh100_ngc23.04_merlin_hugectr", 1, "dlrm_dcnv2_mlperf", "h100_nvl8_ib_ndr"),
    ("v3.0", "mlcommons/training_results_v3.0", "63e326c400f5d8bb8c6070a9ab08332d4931152e",
     "dgxh100_n8_ngc23.04_merlin_hugectr", 8, "dlrm_dcnv2_mlperf_8n", "h100_nvl8_ib_ndr"),
    ("v3.0", "mlcommons/training_results_v3.0", "63e326c400f5d8bb8c6070a9ab08332d4931152e",
     "dgxh100_n16_ngc23.04_merlin_hugectr", 16, "dlrm_dcnv2_mlperf_16n", "h100_nvl8_ib_ndr"),
    ("v3.1", "mlcommons/training_results_v3.1", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
     "eos_ngc23.09_merlin_hugectr", 1, "dlrm_dcnv2_mlperf", "h100_nvl8_ib_ndr"),
    ("v3.1", "mlcommons/training_results_v3.1", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
     "eos_n8_ngc23.09_merlin_hugectr", 8, "dlrm_dcnv2_mlperf_8n", "h100_nvl8_ib_ndr"),
    ("v3.1", "mlcommons/training_results_v3.1", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
     "eos_n16_ngc23.09_merlin_hugectr", 16, "dlrm_dcnv2_mlperf_16n", "h100_nvl8_ib_ndr"),
    ("v4.0", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "eos_ngc24.04_merlin_hugectr", 1, "dlrm_dcnv2_mlperf", "h100_nvl8_ib_ndr"),
    ("v4.0", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "eos_n8_ngc24.04_merlin_hugectr", 8, "dlrm_dcnv2_mlperf_8n", "h100_nvl8_ib_ndr"),
    ("v4.0", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "eos_n16_ngc24.04_merlin_hugectr", 16, "dlrm_dcnv2_mlperf_16n", "h100_nvl8_ib_ndr"),
    ("v4.0", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "h200_ngc24.04_merlin_hugectr", 1, "dlrm_dcnv2_mlperf", "h200_nvl8_ib_ndr"),
    ("v4.1", "mlcommons/training_results_v4.1", "b87b9e396f771345d4ef122ba33456304f15228d",
     "eos_n8_ngc24.06_merlin_hugectr", 8, "dlrm_dcnv2_mlperf_8n", "h100_nvl8_ib_ndr"),
    ("v4.1", "mlcommons/training_results_v4.1", "b87b9e396f771345d4ef122ba33456304f15228d",
     "eos_n16_ngc24.06_merlin_hugectr", 16, "dlrm_dcnv2_mlperf_16n", "h100_nvl8_ib_ndr"),
]
PLACEMENTS = ("planned", "table_wise")
TARGET = 0.15  # issue 11 item 6: within 15% at each point
PLANS = ROOT / "models" / "plans"


def hugectr_config(rnd: str, folder: str, nodes: int, model: str, topology: str) -> tuple[str, str, Path]:
    """(model, topology, plan file) of the HugeCTR column for a submission: the HugeCTR model file of the node
    count, the submission's plan, the SHARP variant of the H100 topology on several nodes."""
    hmodel = model.replace("dlrm_dcnv2_mlperf", "dlrm_dcnv2_mlperf_hugectr")
    htopo = "h100_nvl8_ib_ndr_sharp" if nodes > 1 and topology == "h100_nvl8_ib_ndr" else topology
    plat = "_h200" if topology.startswith("h200") else ""
    return hmodel, htopo, PLANS / f"hugectr_{rnd}{plat}_{nodes}n.csv"


#: the HugeCTR settings (docs/hugectr_baseline.md), in the order --ablation adds them to the planned baseline:
#: (label, what it changes: "plan" (the submission's plan), "topology" (SHARP) or a model-file field -> value)
HUGECTR_STEPS = [
    ("plan", "plan", None),
    ("embedding tables: Adagrad state, 60 GB", "embedding", {"optimizer_state_factor": 1.0, "memory_fraction": 0.75}),
    ("comm_dtype fp16", "embedding", {"comm_dtype": "fp16"}),
    ("key_dtype int32", "embedding", {"key_dtype": "int32"}),
    ("grad_dtype fp16", "root", {"grad_dtype": "fp16"}),
    ("dense_allreduce grouped", "root", {"dense_allreduce": "grouped"}),
    ("dense_optimizer adagrad", "root", {"dense_optimizer": "adagrad"}),
    ("schedule overlap", "root", {"schedule": "overlap"}),
    ("async_wgrad", "root", {"async_wgrad": True}),
    ("launch graph", "root", {"launch": "graph"}),
    ("SHARP", "topology", None),
]


def derive_rows(rnd: str, folder: str, repo: str, commit: str, logs: list[tuple[str, str, str]]) -> list[dict]:
    """One derived_steps.csv row per result log: ``logs`` holds (path in the repository, git blob, log text)."""
    rows = []
    for path, blob, text in logs:
        (run,) = parse_runs(text.splitlines(), f"github:{repo}@{commit}:{path}")
        r: RunSteps = step_times(run)
        rows.append({"round": rnd, "config": folder, "repository": repo, "commit": commit, "path": path,
                     "blob": blob, "platform": r.platform, "global_batch": r.global_batch,
                     "train_samples": r.train_samples, "windows": len(r.windows), "step_s": r.step_s})
    return rows


def write_derived(path: Path, rows: list[dict]) -> None:
    """derived_steps.csv, written whole or not at all (a temporary file renamed over it); floats in full
    precision (repr), so that the medians of a later run are those of the logs."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=DERIVED_COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in r.items()})
    os.replace(tmp, path)


def _git(git: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(git), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SpecError(str(git), " ".join(args), f"git failed: {r.stderr.strip() or r.returncode}")
    return r.stdout


def extract(mirror_root: Path, out: Path = DERIVED) -> None:
    """Re-derive derived_steps.csv from mirrored repositories (``<mirror_root>/<owner>+<name>/repo``, bare git)."""
    rows = []
    for rnd, repo, commit, folder, *_ in SUBMISSIONS:
        git = mirror_root / repo.replace("/", "+") / "repo"
        d = f"NVIDIA/results/{folder}/dlrm_dcnv2"
        ls = _git(git, "ls-tree", commit, d + "/")
        logs = []
        found = [ln for ln in ls.splitlines() if re.search(r"/result_\d+\.txt$", ln)]
        for line in sorted(found, key=lambda s: int(s.rsplit("result_", 1)[1].split(".")[0])):
            meta, path = line.split("\t")
            blob = meta.split()[2]
            text = _git(git, "cat-file", "blob", blob)
            logs.append((path, blob, text))
        if not logs:
            raise SpecError(str(git), f"{commit}:{d}", "no result_*.txt logs (is it the mirrored repository?)")
        rows += derive_rows(rnd, folder, repo, commit, logs)
        print(f"{rnd} {folder}: {len(logs)} runs", flush=True)
    write_derived(out, rows)
    print(f"wrote {out} ({len(rows)} runs)")


def read_derived(path: Path = DERIVED) -> list[dict]:
    """The rows of derived_steps.csv, typed; SpecError naming the file, line and column on bad input."""
    src = str(path)
    try:
        f = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(src, "", f"cannot read: {exc.strerror}") from None
    with f:
        rd = csv.DictReader(f)
        missing = [c for c in DERIVED_COLUMNS if c not in (rd.fieldnames or [])]
        if missing:
            raise SpecError(src, "header", f"missing column(s) {', '.join(missing)}")
        rows = []
        for n, r in enumerate(rd, 2):
            row = dict(r)
            for col, typ in (("global_batch", int), ("train_samples", int), ("windows", int), ("step_s", float)):
                try:
                    row[col] = typ(r[col])
                except (TypeError, ValueError):
                    raise SpecError(src, f"line {n}, column {col}", f"not a number: {r[col]!r}") from None
                if not (math.isfinite(row[col]) and row[col] > 0):
                    raise SpecError(src, f"line {n}, column {col}", f"must be positive, got {r[col]!r}")
            rows.append(row)
    return rows


def derived_table(subs, derived: Path = DERIVED) -> pd.DataFrame:
    runs = read_derived(derived)
    rows = []
    for rnd, repo, commit, folder, nodes, model, topo in subs:
        rs = [r for r in runs if r["round"] == rnd and r["config"] == folder]
        if not rs:
            raise SpecError(str(derived), "round, config", f"no runs of {rnd} {folder}")
        B = {r["global_batch"] for r in rs}
        if len(B) != 1:
            raise SpecError(str(derived), "global_batch", f"runs of {rnd} {folder} disagree: {sorted(B)}")
        med = sorted(r["step_s"] for r in rs)
        rows.append({"round": rnd, "config": folder, "platform": rs[0]["platform"], "nodes": nodes, "gpus": nodes * 8,
                     "global_batch": B.pop(), "runs": len(rs), "windows": sum(r["windows"] for r in rs),
                     "derived_step_s": statistics.median(med), "derived_min_s": med[0], "derived_max_s": med[-1],
                     "model": model, "topology": topo,
                     "source": f"github:{repo}@{commit}:NVIDIA/results/{folder}/dlrm_dcnv2/result_*.txt",
                     "fixture": _rel(derived)})
    return pd.DataFrame(rows)


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def simulate(model: str, topo: str, nodes: int, placement: str, global_batch: int | None = None,
             plan: Path | None = None, overrides: dict | None = None) -> dict:
    """Baseline iteration of one configuration: step time and the critical rank's phase breakdown.  ``plan``: a
    forced plan file; ``overrides``: model-file fields replaced (``{"root": {...}, "embedding": {...}}``)."""
    import yaml

    from simfuse.fused.knobs import parse_execution
    from simfuse.spec import load_workload, workload_from_dict
    from simfuse.system import System
    from simfuse.workloads.run import breakdown_rows, simulate_workload

    path = ROOT / "models" / f"{model}.yaml"
    if overrides:
        data = yaml.safe_load(path.read_text())
        data.update(overrides.get("root", {}))
        data["embedding"].update(overrides.get("embedding", {}))
        # a field set here is set, not uncertain: its input range (which may not hold the new value) goes
        unc = data.get("uncertain") or {}
        for key in [*overrides.get("root", {}), *(f"embedding.{k}" for k in overrides.get("embedding", {}))]:
            unc.pop(key, None)
        spec = workload_from_dict(data, f"{path} (with {overrides})")
    else:
        spec = load_workload(path)
    system = System.load(ROOT / "topologies" / f"{topo}.yaml")
    settings = {"mode": "baseline", "placement": placement}
    if global_batch is not None:
        settings["global_batch"] = str(global_batch)
    if plan is not None:
        settings["plan_file"] = str(plan)
    ex = parse_execution(settings, source="<dlrm_validation>")
    r = simulate_workload(spec, system, nodes, gpus_per_node=system.gpus_per_node, execution=ex)["baseline"]
    phases = {b["phase"]: b["time_s"] for b in breakdown_rows({"baseline": r})}
    a2a = sum(v for k, v in phases.items() if k.startswith("a2a"))
    return {"step_s": r.iteration_time_s, "exposed_comm_s": r.exposed_comm_time_s, "a2a_s": a2a,
            "global_batch": r.extras.global_batch}


def _hugectr_sims(table, smoke: bool) -> list[dict]:
    out = []
    for r in table.itertuples():
        hmodel, htopo, plan = hugectr_config(r.round, r.config, r.nodes, r.model, r.topology)
        out.append(simulate(hmodel, htopo, r.nodes, "planned", global_batch=512 if smoke else None, plan=plan))
    return out


def _with_settings(r, active: set, smoke: bool) -> float:
    """The planned baseline of submission row ``r`` with the HUGECTR_STEPS settings named in ``active``."""
    _hmodel, htopo, plan = hugectr_config(r.round, r.config, r.nodes, r.model, r.topology)
    ov: dict = {"root": {}, "embedding": {}}
    for label, kind, val in HUGECTR_STEPS:
        if label in active and kind in ("root", "embedding"):
            ov[kind].update(val)
    return simulate(r.model, htopo if "SHARP" in active else r.topology, r.nodes, "planned",
                    512 if smoke else None, plan=plan if "plan" in active else None, overrides=ov)["step_s"]


def ablation(table, smoke: bool = False) -> pd.DataFrame:
    """Each HUGECTR_STEPS setting added in turn to the planned baseline (``added``; ``delta_s``: the change it
    made) and each removed from the full HugeCTR configuration (``removed``; ``delta_s``: full minus without it),
    step time and its ratio to the derived step.  The full configuration equals the ``hugectr`` column."""
    rows = []
    labels = [s[0] for s in HUGECTR_STEPS]
    for r in table.itertuples():
        def row(kind, setting, step_s, delta_s, r=r):
            rows.append({"round": r.round, "config": r.config, "gpus": r.gpus, "kind": kind, "setting": setting,
                         "step_s": step_s, "ratio": step_s / r.derived_step_s, "delta_s": delta_s})

        prev = _with_settings(r, set(), smoke)
        row("added", "(planned baseline)", prev, 0.0)
        for i, lbl in enumerate(labels):
            t = _with_settings(r, set(labels[:i + 1]), smoke)
            row("added", lbl, t, t - prev)
            prev = t
        if not math.isclose(prev, r.sim_hugectr_s, rel_tol=1e-9):
            raise ValueError(f"{r.round} {r.gpus} GPUs: all HugeCTR settings give {prev} s, the HugeCTR model file "
                             f"{r.sim_hugectr_s} s (HUGECTR_STEPS and the model files disagree)")
        for lbl in labels:
            t = _with_settings(r, set(labels) - {lbl}, smoke)
            row("removed", lbl, t, prev - t)
    return pd.DataFrame(rows)


def run(out: Path, smoke: bool = False, derived: Path = DERIVED, with_ablation: bool = False) -> pd.DataFrame:
    subs = [s for s in SUBMISSIONS if not smoke or s[4] == 1]
    table = derived_table(subs, derived)
    sims: dict = {}
    for key in sorted({(r.model, r.topology, r.nodes) for r in table.itertuples()}):
        for pl in PLACEMENTS:
            # smoke: the 1-node points at a global batch of 8 x 64 (the submissions' batch is checked below in the
            # full run only), so the test takes seconds
            sims[(*key, pl)] = simulate(*key, pl, global_batch=512 if smoke else None)
    hsims = _hugectr_sims(table, smoke)
    for pl in (*PLACEMENTS, "hugectr"):
        s = hsims if pl == "hugectr" else [sims[(r.model, r.topology, r.nodes, pl)] for r in table.itertuples()]
        table[f"sim_{pl}_s"] = [x["step_s"] for x in s]
        table[f"ratio_{pl}"] = table[f"sim_{pl}_s"] / table["derived_step_s"]
        table[f"within_15pct_{pl}"] = (table[f"ratio_{pl}"] - 1).abs() <= TARGET
        table[f"sim_{pl}_a2a_share"] = [x["a2a_s"] / x["step_s"] for x in s]
        table[f"sim_{pl}_exposed_comm_share"] = [x["exposed_comm_s"] / x["step_s"] for x in s]
        if not smoke:
            bad = [(r.config, x["global_batch"]) for r, x in zip(table.itertuples(), s, strict=True)
                   if x["global_batch"] != r.global_batch]
            if bad:
                raise ValueError(f"simulated global batch differs from the log's: {bad}")
    table["hugectr_plan"] = [_rel(hugectr_config(r.round, r.config, r.nodes, r.model, r.topology)[2])
                             for r in table.itertuples()]
    table["date"] = date.today().isoformat()
    table["smoke"] = smoke
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "validation.csv", index=False, float_format="%.6g")
    if with_ablation:
        ablation(table, smoke).to_csv(out / "ablation.csv", index=False, float_format="%.6g")
    return table


def check_args(a) -> None:
    """The arguments checked before any git or simulation runs (a SpecError naming the flag): with ``--extract``
    its mirror root and a writable ``--derived``; else a readable ``--derived`` and a writable ``--out``."""
    from simfuse.arguments import check_out_writable

    if a.extract:
        if not Path(a.extract).is_dir():
            raise SpecError("<argument>", "--extract", f"no such directory: {a.extract!r}")
        check_out_writable(a.derived, "--derived", is_dir=False)
        return
    if not Path(a.derived).is_file():
        raise SpecError("<argument>", "--derived", f"no such file: {a.derived!r}")
    check_out_writable(a.out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="default experiments/results/dlrm_validation (with --smoke: "
                    "runs/dlrm_validation_smoke, so a smoke run leaves the committed results alone)")
    ap.add_argument("--smoke", action="store_true", help="1-node fixtures, tiny simulated batch (CI)")
    ap.add_argument("--derived", default=str(DERIVED),
                    help="per-run step times (CSV, see DERIVED_COLUMNS); --extract writes it")
    ap.add_argument("--ablation", action="store_true",
                    help="also write ablation.csv: each HugeCTR setting added in turn, and each removed")
    ap.add_argument("--extract", metavar="MIRROR_ROOT",
                    help="re-derive the --derived CSV from mirrored repositories (<root>/<owner>+<name>/repo)")
    a = ap.parse_args(argv)
    if a.out is None:
        a.out = str(ROOT / ("runs/dlrm_validation_smoke" if a.smoke else "experiments/results/dlrm_validation"))
    try:
        check_args(a)
        if a.extract:
            extract(Path(a.extract), Path(a.derived))
            return 0
        t = run(Path(a.out), a.smoke, Path(a.derived), with_ablation=a.ablation)
    except (SpecError, MLLogError) as exc:
        print(f"dlrm_validation.py: error: {exc}", file=sys.stderr)
        return 2
    cols = ["round", "config", "gpus", "global_batch", "derived_step_s", "sim_planned_s", "ratio_planned",
            "sim_table_wise_s", "ratio_table_wise", "sim_hugectr_s", "ratio_hugectr"]
    print(t[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    h100 = t[t["topology"] == "h100_nvl8_ib_ndr"]
    for pl in (*PLACEMENTS, "hugectr"):
        s = h100.groupby("gpus")[f"sim_{pl}_s"].first()
        if {64, 128} <= set(s.index):
            print(f"{pl}: simulated step {'falls' if s[128] < s[64] else 'does not fall'} from 64 to 128 GPUs "
                  f"({s[64] * 1e3:.3f} -> {s[128] * 1e3:.3f} ms)")
    print(f"wrote {Path(a.out) / 'validation.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
