"""A fair comparison (issue 11 item 2): each mode runs the faster of the plan made for it and the plan made for
the other mode, whichever modes were asked for, and plan.csv labels each row with the mode it ran in."""

import pandas as pd
import pytest

from simfuse.fused.knobs import ExecutionSpec
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import simulate_dlrm
from simfuse.workloads.plan_file import write_plans
from simfuse.workloads.planner import plan_tables
from simfuse.workloads.run import simulate_workload


@pytest.fixture(scope="module")
def h100(root):
    return System.load(root / "topologies" / "h100_nvl8_ib_ndr.yaml")


def _dlrm():
    tables = [(2_000_000, 40), (40_000, 4), (1_000_000, 8), (5_000, 1), (300_000, 2), (60_000, 3), (900_000, 12)]
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": 8192, "dense_features": 13,
                               "bottom_mlp": [128, 64], "top_mlp": [128, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": 64, "placement": "planned",
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


@pytest.mark.parametrize("nodes", [2, 4])
def test_each_mode_at_least_as_fast_as_with_either_plan(h100, nodes):
    spec = _dlrm()
    ex = ExecutionSpec(uncertainty="none", tune_knobs="off")
    res = simulate_workload(spec, h100, nodes, execution=ex)
    for mode in ("baseline", "fused"):
        for plan_mode in ("baseline", "fused"):
            plan = plan_tables(spec, h100, nodes, 8, plan_mode)
            alone = simulate_dlrm(spec, h100, nodes, gpus_per_node=8, mode=mode, plan=plan)
            assert res[mode].iteration_time_s <= alone.iteration_time_s * (1 + 1e-12)


def test_a_mode_alone_equals_the_mode_in_both(h100):
    spec = _dlrm()
    ex = ExecutionSpec(uncertainty="none")
    both = simulate_workload(spec, h100, 2, execution=ex)
    for mode in ("baseline", "fused"):
        alone = simulate_workload(spec, h100, 2, execution=ExecutionSpec(uncertainty="none", mode=mode))
        assert alone[mode].iteration_time_s == both[mode].iteration_time_s


def test_plan_csv_rows_carry_the_mode_they_ran_in(h100, tmp_path):
    spec = _dlrm()
    plan = plan_tables(spec, h100, 2, 8, "baseline")
    write_plans(tmp_path, {"baseline": plan, "fused": plan})
    df = pd.read_csv(tmp_path / "plan.csv")
    assert sorted(df["mode"].unique()) == ["baseline", "fused"]
    assert (df["mode"] == "fused").sum() == len(spec.tables)
