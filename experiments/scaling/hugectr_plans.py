"""The sharding plans NVIDIA's MLPerf DLRM-DCNv2 HugeCTR submissions run, as simfuse forced plans (CSV).

The submissions plan their tables at start-up with their own script (``sharding/generate_plan.py`` and
``sharding/planner.py`` of each implementation folder, called by ``train.py``) from the arguments in the run's
``config_<system>.sh`` (``SHARDING_PLAN``, ``MEM_COMM_BW_RATIO``, ``DP_SHARDING_THRESHOLD``) and ``train.py``'s
defaults (``--memory_cap_for_embedding 60``, ``--mem_comm_work_ratio 8/2``, ``--ev_size 128``, ``--optimizer
adagrad``).  This script runs that code as it is in a mirrored results repository (bare git, ``fetch`` tool:
``<mirror_root>/mlcommons+training_results_vX.Y/repo``): it extracts the two files of the commit to a temporary
directory and imports them (nothing of NVIDIA's code is kept in this repository), then writes the plan as
``table, sharding, ranks`` rows for :func:`simfuse.workloads.planner.load_plan`:

* a table on one GPU: ``table_wise``; on several GPUs of one node (``auto`` plans, one node, HugeCTR's
  ``Uniform`` communication): ``row_wise`` over those GPUs (HugeCTR shards a table held by several GPUs by rows;
  each holder sends its partial sums to every GPU);
* ``hier_auto`` (several nodes, ``Hierarchical`` communication): the planner places tables on *nodes* and every GPU
  of a node holds the node's tables (generate_plan.py copies the node's list to each GPU), i.e. ``table_row_wise``
  over the node's GPUs, or over several whole nodes when the planner split a hot table across nodes;
* the ``dp`` group (tables under ``DP_SHARDING_THRESHOLD`` GiB): ``data_parallel``.

Usage:
    python experiments/scaling/hugectr_plans.py --mirror /work/.mirror [--out models/plans]

The plans written on 2026-12-03 are committed in models/plans/ (README there lists their sources).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simfuse.errors import SpecError  # noqa: E402
from simfuse.workloads.planner import format_ranks  # noqa: E402

#: (plan name, repository, commit, implementation folder, config file, nodes); the commits are those of
#: experiments/validation/dlrm_validation.py's SUBMISSIONS
CONFIGS = [
    ("hugectr_v3.0_1n", "mlcommons/training_results_v3.0", "63e326c400f5d8bb8c6070a9ab08332d4931152e",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr", "config_DGXH100_1x8x6912.sh", 1),
    ("hugectr_v3.0_8n", "mlcommons/training_results_v3.0", "63e326c400f5d8bb8c6070a9ab08332d4931152e",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr", "config_DGXH100_8x8x2112.sh", 8),
    ("hugectr_v3.0_16n", "mlcommons/training_results_v3.0", "63e326c400f5d8bb8c6070a9ab08332d4931152e",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr", "config_DGXH100_16x8x1056.sh", 16),
    ("hugectr_v3.1_1n", "mlcommons/training_results_v3.1", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr", "config_DGXH100_1x8x6912.sh", 1),
    ("hugectr_v3.1_8n", "mlcommons/training_results_v3.1", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr", "config_DGXH100_8x8x2112.sh", 8),
    ("hugectr_v3.1_16n", "mlcommons/training_results_v3.1", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr", "config_DGXH100_16x8x1056.sh", 16),
    ("hugectr_v4.0_1n", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/merlin_hugectr", "config_DGXH100_1x8x6912.sh", 1),
    ("hugectr_v4.0_h200_1n", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/merlin_hugectr", "config_DGXH200_1x8x6912.sh", 1),
    ("hugectr_v4.0_8n", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/merlin_hugectr", "config_DGXH100_8x8x2112.sh", 8),
    ("hugectr_v4.0_16n", "mlcommons/training_results_v4.0", "6fe954378efe4a1a1bd665550b18ff8f26018def",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/merlin_hugectr", "config_DGXH100_16x8x1056.sh", 16),
    ("hugectr_v4.1_8n", "mlcommons/training_results_v4.1", "b87b9e396f771345d4ef122ba33456304f15228d",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/eos_n8_ngc24.06_merlin_hugectr",
     "config_DGXH100_8x8x2112.sh", 8),
    ("hugectr_v4.1_16n", "mlcommons/training_results_v4.1", "b87b9e396f771345d4ef122ba33456304f15228d",
     "NVIDIA/benchmarks/dlrm_dcnv2/implementations/eos_n16_ngc24.06_merlin_hugectr",
     "config_DGXH100_16x8x1056.sh", 16),
]
GPUS_PER_NODE = 8  # DGXNGPU=8 in every config


def _git_show(git: Path, commit: str, path: str) -> str:
    r = subprocess.run(["git", "-C", str(git), "show", f"{commit}:{path}"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SpecError(str(git), f"{commit}:{path}", f"git show failed: {r.stderr.strip() or r.returncode}")
    return r.stdout


def _config_value(text: str, key: str, source: str) -> str | None:
    m = re.search(rf"^export {key}=(\S+)\s*$", text, re.M)
    return m.group(1) if m else None


def _int_list(text: str, name: str, source: str) -> list[int]:
    m = re.search(rf"^{name} = \[(.*?)\]", text, re.M | re.S)
    if not m:
        raise SpecError(source, name, "not found in train.py")
    return [int(x) for x in re.findall(r"\d+", m.group(1))]


def _train_default(text: str, flag: str, source: str) -> str:
    m = re.search(rf'"--{flag}",.*?default=([^,\n]+)', text, re.S)
    if not m:
        raise SpecError(source, flag, "no default in train.py")
    return m.group(1).strip()


def nvidia_plan(git: Path, commit: str, folder: str, config: str, nodes: int):
    """``(shard_matrix, shard_strategy, args, tables, hotness)`` as the submission's own code computes them."""
    train = _git_show(git, commit, f"{folder}/train.py")
    cfg = _git_show(git, commit, f"{folder}/{config}")
    src = f"{git}@{commit}:{folder}"
    tables, hotness = _int_list(train, "TABLE_SIZE_ARRAY", src), _int_list(train, "MULTI_HOT_SIZES", src)
    plan = _config_value(cfg, "SHARDING_PLAN", src) or _train_default(train, "sharding_plan", src).strip('"')
    ratio = _config_value(cfg, "MEM_COMM_BW_RATIO", src)
    thr = _config_value(cfg, "DP_SHARDING_THRESHOLD", src)
    args = Namespace(sharding_plan=plan, memory_cap_for_embedding=float(_train_default(train, "memory_cap_for_embedding",
                                                                                       src)),
                     optimizer=_config_value(cfg, "OPTIMIZER", src) or "adagrad",
                     mem_comm_bw_ratio=float(ratio) if ratio else 3.35e12 / 450e9,
                     mem_comm_work_ratio=8 / 2, ev_size=int(_train_default(train, "ev_size", src)),
                     num_gpus_per_node=GPUS_PER_NODE, dp_sharding_threshold=float(thr) if thr else 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "sharding"
        pkg.mkdir()
        for f in ("__init__.py", "generate_plan.py", "planner.py"):
            (pkg / f).write_text(_git_show(git, commit, f"{folder}/sharding/{f}"))
        name = f"nv_sharding_{abs(hash((commit, folder)))}"
        spec = importlib.util.spec_from_file_location(name, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        matrix, strategy = mod.generate_plan(tables, hotness, nodes, nodes * GPUS_PER_NODE, args, False)
    return matrix, strategy, args, tables, hotness


def plan_rows(matrix, strategy, nodes: int) -> list[tuple[str, str, str]]:
    """simfuse rows (table, sharding, ranks) of a HugeCTR shard matrix (one list of table ids per GPU)."""
    n = nodes * GPUS_PER_NODE
    dp = {int(t) for kind, ts in strategy if kind == "dp" for t in ts}
    mp = sorted({int(t) for kind, ts in strategy if kind == "mp" for t in ts})
    rows = []
    for t in mp:
        holders = [r for r in range(n) if str(t) in matrix[r]]
        if nodes > 1:
            kind = "table_row_wise"
            whole = {r // GPUS_PER_NODE for r in holders}
            if len(holders) != len(whole) * GPUS_PER_NODE:
                raise SpecError("<hugectr plan>", f"t{t}", "a hierarchical plan holds tables on whole nodes")
        else:
            kind = "table_wise" if len(holders) == 1 else "row_wise"
        rows.append((t, kind, format_ranks(holders, n)))
    rows += [(t, "data_parallel", "all") for t in sorted(dp)]
    return [(f"t{t}", k, r) for t, k, r in sorted(rows)]


def check_args(a) -> None:
    """The mirror root holds every repository the plans come from, and ``--out`` is writable (a SpecError naming
    the flag), before any git runs."""
    from simfuse.arguments import check_out_writable

    for repo in sorted({c[1] for c in CONFIGS}):
        git = Path(a.mirror) / repo.replace("/", "+") / "repo"
        if not git.is_dir():
            raise SpecError("<argument>", "--mirror", f"no mirrored repository {str(git)!r} (expected "
                            "<root>/<owner>+<name>/repo)")
    check_out_writable(a.out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", required=True, help="root of the mirrored repositories (<root>/<owner>+<name>/repo)")
    ap.add_argument("--out", default=str(ROOT / "models" / "plans"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    try:
        check_args(a)
        plans = []  # every plan is made before any file is written (a failing one leaves --out untouched)
        for name, repo, commit, folder, config, nodes in CONFIGS:
            git = Path(a.mirror) / repo.replace("/", "+") / "repo"
            matrix, strategy, args, _t, _h = nvidia_plan(git, commit, folder, config, nodes)
            plans.append((name, plan_rows(matrix, strategy, nodes), args))
    except SpecError as exc:
        print(f"hugectr_plans.py: error: {exc}", file=sys.stderr)
        return 2
    from simfuse.results.io import atomic_write_text

    for name, rows, args in plans:
        path = out / f"{name}.csv"
        atomic_write_text(path, "table,sharding,ranks\n" + "".join(f"{t},{k},{r}\n" for t, k, r in rows))
        print(f"{name}: {args.sharding_plan}, mem_comm_bw_ratio {args.mem_comm_bw_ratio:g}, dp threshold "
              f"{args.dp_sharding_threshold:g} GiB -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
