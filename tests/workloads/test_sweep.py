import pandas as pd
import pytest

from simfuse.errors import SpecError
from simfuse.sweep import parse_nodes, run_sweep


def test_parse_nodes():
    assert parse_nodes("8..64") == [8, 16, 32, 64]
    assert parse_nodes("1,4,2") == [1, 2, 4]
    with pytest.raises(SpecError):
        parse_nodes("a,b")
    with pytest.raises(SpecError):
        parse_nodes("0")


def test_sweep_writes_table_and_figures_and_resumes(root, tmp_path, monkeypatch):
    model = str(root / "models/dlrm_synthetic.yaml")
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")
    df = run_sweep(model, topo, [1, 2], tmp_path, progress=False)
    for col in ("nodes", "gpus", "mode", "iteration_time_s", "compute_time_s", "exposed_comm_time_s", "speedup"):
        assert col in df.columns
    assert len(df) == 4
    assert (tmp_path / "speedup_vs_nodes.png").stat().st_size > 0
    assert (tmp_path / "breakdown.png").stat().st_size > 0
    # a rerun reuses the finished points: make simulation impossible and rerun
    import simfuse.sweep as sweep_mod

    def boom(*a, **k):
        raise AssertionError("point recomputed")

    monkeypatch.setattr(sweep_mod, "run_point", boom)
    again = run_sweep(model, topo, [1, 2], tmp_path, progress=False)
    pd.testing.assert_frame_equal(df, again)


def test_sweep_process_pool_matches_serial(root, tmp_path):
    model = str(root / "models/dlrm_synthetic.yaml")
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")
    a = run_sweep(model, topo, [1, 2], tmp_path / "a", progress=False, plots=False)
    b = run_sweep(model, topo, [1, 2], tmp_path / "b", progress=False, plots=False, workers=2)
    pd.testing.assert_frame_equal(a, b)


def test_sweep_on_dask_local_cluster(root, tmp_path):
    distributed = pytest.importorskip("distributed")
    model = str(root / "models/dlrm_synthetic.yaml")
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        df = run_sweep(model, topo, [1, 2], tmp_path, scheduler=cluster.scheduler_address, progress=False,
                       plots=False)
    ref = run_sweep(model, topo, [1, 2], tmp_path / "ref", progress=False, plots=False)
    pd.testing.assert_frame_equal(df, ref)
