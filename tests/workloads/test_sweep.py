from pathlib import Path

import pandas as pd
import pytest

from simfuse.errors import SpecError
from simfuse.sweeps import parse_nodes, run_sweep


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
    import simfuse.sweeps as sweep_mod

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


def test_sweep_recomputes_when_the_calibration_profile_changes(root, tmp_path, monkeypatch):
    import shutil

    import simfuse.sweeps as sweep_mod

    prof = tmp_path / "prof.yaml"
    shutil.copy(root / "profiles/h200_calibration.yaml", prof)
    topo = tmp_path / "topo.yaml"
    text = (root / "topologies/h200_nvl8_ib_ndr.yaml").read_text()
    topo.write_text(text.replace("calibration: ../profiles/h200_calibration.yaml", f"calibration: {prof}"))
    model = str(root / "models/dlrm_synthetic.yaml")
    run_sweep(model, str(topo), [1], tmp_path / "out", progress=False, plots=False)
    calls = []
    real = sweep_mod.run_point
    monkeypatch.setattr(sweep_mod, "run_point", lambda *a: calls.append(a) or real(*a))
    run_sweep(model, str(topo), [1], tmp_path / "out", progress=False, plots=False)
    assert calls == []  # unchanged inputs: reused
    prof.write_text(prof.read_text() + "\n# edited\n")
    run_sweep(model, str(topo), [1], tmp_path / "out", progress=False, plots=False)
    assert len(calls) == 1  # the profile changed: recomputed


def test_sweep_on_dask_process_cluster_with_relative_paths(root, tmp_path, monkeypatch):
    """A real process-based LocalCluster whose worker started in another directory; the sweep is given paths
    relative to the client's working directory (model, topology and the topology's relative calibration
    profile), which the worker could not resolve: it receives the resolved specs instead."""
    import shutil

    distributed = pytest.importorskip("distributed")
    work = tmp_path / "work"
    (work / "models").mkdir(parents=True)
    (work / "topologies").mkdir()
    (work / "profiles").mkdir()
    shutil.copy(root / "models/dlrm_synthetic.yaml", work / "models")
    shutil.copy(root / "topologies/h200_nvl8_ib_ndr.yaml", work / "topologies")
    shutil.copy(root / "profiles/h200_calibration.yaml", work / "profiles")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the worker process starts here: none of the relative paths exist for it
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        monkeypatch.chdir(work)
        df = run_sweep("models/dlrm_synthetic.yaml", "topologies/h200_nvl8_ib_ndr.yaml", [1, 2], "out",
                       scheduler=cluster.scheduler_address, progress=False, plots=False)
        with distributed.Client(cluster.scheduler_address) as client:
            cwd = client.run(lambda: __import__("os").getcwd())
    assert all(Path(c) != work for c in cwd.values())
    assert (work / "out" / "results.csv").is_file()
    ref = run_sweep(str(root / "models/dlrm_synthetic.yaml"), str(root / "topologies/h200_nvl8_ib_ndr.yaml"),
                    [1, 2], tmp_path / "ref", progress=False, plots=False)
    pd.testing.assert_frame_equal(df, ref)


def test_sweep_recomputes_when_the_code_changes(root, tmp_path, monkeypatch):
    """A point file written by other simfuse sources is not reused (the key holds the code digest)."""
    import simfuse.sweeps as sweep_mod

    model = str(root / "models/dlrm_synthetic.yaml")
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")
    first = run_sweep(model, topo, [1], tmp_path, progress=False, plots=False)
    calls = []
    real = sweep_mod.run_point
    monkeypatch.setattr(sweep_mod, "run_point", lambda *a: calls.append(a) or real(*a))
    run_sweep(model, topo, [1], tmp_path, progress=False, plots=False)
    assert calls == []  # same code, same inputs: reused
    monkeypatch.setattr(sweep_mod, "code_digest", lambda: "0" * 64)
    again = run_sweep(model, topo, [1], tmp_path, progress=False, plots=False)
    assert len(calls) == 1  # another version: recomputed
    pd.testing.assert_frame_equal(first, again)


def test_code_digest_is_stable_and_covers_the_sources():
    import simfuse.sweeps as sweep_mod

    a, b = sweep_mod.code_digest(), sweep_mod.code_digest()
    assert a == b and len(a) == 64 and int(a, 16) >= 0
    k1 = sweep_mod.point_key("d", 1, 8, "both", "auto", code=a)
    k2 = sweep_mod.point_key("d", 1, 8, "both", "auto", code="f" * 64)
    assert sweep_mod.point_file_name(k1) != sweep_mod.point_file_name(k2)


@pytest.mark.parametrize("model,nodes,field", [("dlrm_synthetic", [1, 2, 3], "global_batch"),
                                               ("transformer_tp_decode", [1, 1024], "k")])
def test_a_node_count_the_workload_cannot_run_is_refused_before_any_point(root, tmp_path, monkeypatch, model,
                                                                          nodes, field):
    """Every node count is checked before the first point runs: no simulation, no output folder (a sweep used to
    run the good node counts, leave their points behind, then fail on the bad one)."""
    import simfuse.sweeps as sweeps

    ran = []
    monkeypatch.setattr(sweeps, "_run_points", lambda *a, **k: ran.append(a))
    out = tmp_path / "sweep"
    with pytest.raises(SpecError, match=field):
        run_sweep(str(root / "models" / f"{model}.yaml"), str(root / "topologies" / "h100_nvl8_ib_ndr.yaml"),
                  nodes, out, progress=False, plots=False)
    assert not ran and not out.exists()
