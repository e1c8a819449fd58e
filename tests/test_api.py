"""The top-level Python API returns DataFrames equal to what the CLI paths compute; the example runs."""

import subprocess
import sys

import pytest

import simfuse
from simfuse.errors import SpecError


def test_run_returns_dataframe_and_takes_knobs(root):
    system = simfuse.load_topology(root / "topologies" / "h200_nvl8_ib_ndr.yaml")
    df = simfuse.run(root / "models" / "dlrm_synthetic.yaml", system, nodes=1, gpus_per_node=4)
    assert list(df["mode"]) == ["baseline", "fused"]
    f = df.set_index("mode")
    assert f.loc["fused", "speedup"] == pytest.approx(f.loc["baseline", "iteration_time_s"]
                                                      / f.loc["fused", "iteration_time_s"])
    d2 = simfuse.run(root / "models" / "dlrm_synthetic.yaml", system, nodes=1, gpus_per_node=4, mode="fused",
                     occupancy_loss=0.5)
    assert d2["iteration_time_s"].iloc[0] > f.loc["fused", "iteration_time_s"]  # half the slots: slower
    with pytest.raises(SpecError, match="bogus"):
        simfuse.run(root / "models" / "dlrm_synthetic.yaml", system, nodes=1, bogus=3)


def test_collective_and_op(root):
    topo = root / "topologies" / "h200_nvl8_ib_ndr.yaml"
    c = simfuse.collective(topo, 2, "all_reduce", 2**20, algorithm="ring")
    assert c.loc[0, "algorithm"] == "ring" and c.loc[0, "time_s"] > 0
    o = simfuse.op("gemv_all_reduce", topo, nodes=1, n=1024, k=1024)
    assert o.loc[0, "speedup"] == pytest.approx(o.loc[0, "baseline_time_s"] / o.loc[0, "fused_time_s"])


def test_sweep(tmp_path, root):
    df = simfuse.sweep(root / "models" / "dlrm_synthetic.yaml", root / "topologies" / "h200_nvl8_ib_ndr.yaml",
                       [1, 2], tmp_path / "s")
    assert sorted(set(df["nodes"])) == [1, 2]
    assert (tmp_path / "s" / "results.csv").exists()


def test_example_script_runs(root):
    r = subprocess.run([sys.executable, str(root / "examples" / "quickstart.py")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "speedup" in r.stdout


def test_collective_columns_match_the_command(root, capsys):
    """The API's collective row has the command's columns and numbers (GB/s names, the protocol asked)."""
    import json

    from simfuse.cli import main

    topo = root / "topologies" / "h100_nvl8_ib_ndr.yaml"
    df = simfuse.collective(simfuse.load_topology(topo), 2, "all_reduce", 1 << 20, protocol="LL128")
    capsys.readouterr()
    assert main(["collective", "--topology", str(topo), "--nodes", "2", "--op", "all_reduce", "--size", "1MiB",
                 "--protocol", "LL128", "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    row = df.iloc[0].to_dict()
    assert {"algbw_gbyte_per_s", "busbw_gbyte_per_s"} <= set(row) and row["protocol"] == "LL128"
    shared = [k for k in row if k in cli]
    assert {"time_s", "algbw_gbyte_per_s", "busbw_gbyte_per_s", "algorithm", "protocol"} <= set(shared)
    for k in shared:
        assert cli[k] == (pytest.approx(row[k]) if isinstance(row[k], float) else row[k]), k
    with pytest.raises(SpecError, match="protocol"):
        simfuse.collective(simfuse.load_topology(topo), 2, "all_reduce", 1 << 20, protocol="LL256")


def test_bad_arguments_are_spec_errors_naming_them(root, tmp_path):
    """Wrong types, objects where a file is needed and misspelt operator parameters: a SpecError naming the
    argument (not a TypeError/AttributeError/OSError), before anything runs or is written."""
    topo = root / "topologies" / "h200_nvl8_ib_ndr.yaml"
    model = root / "models" / "dlrm_synthetic.yaml"
    cases = [
        (lambda: simfuse.load_topology(None), "path"),
        (lambda: simfuse.collective(None, 2, "all_reduce", 2**20), "topology"),
        (lambda: simfuse.collective(topo, 2, "all_reduce", 2**20, force="no"), "force"),
        (lambda: simfuse.run(None, topo, nodes=1), "model"),
        (lambda: simfuse.op(["gemv_all_reduce"], topo, nodes=1), "name"),
        (lambda: simfuse.op("gemv_all_reduce", topo, nodes=1, n=1024, bogus=3), "bogus"),  # the CLI refuses it too
        (lambda: simfuse.op("gemv_all_reduce", topo, nodes=1, n=float("nan")), r"<argument>: n:"),
        (lambda: simfuse.sweep(model, topo, 2, tmp_path / "a"), "nodes"),
        (lambda: simfuse.sweep(model, topo, None, tmp_path / "b"), "nodes"),
        (lambda: simfuse.sweep(model, topo, "0..2", tmp_path / "c"), r"<argument>: nodes:"),
        (lambda: simfuse.sweep(model, topo, [1], None), "out"),
        (lambda: simfuse.sweep(model, topo, [1], "/proc/simfuse_x"), "out"),
        (lambda: simfuse.sweep(model, simfuse.load_topology(topo), [1], tmp_path / "d"), "topology"),
        (lambda: simfuse.sweep(simfuse.load_workload(model), topo, [1], tmp_path / "e"), "model"),
        (lambda: simfuse.collective(topo, 2, "all_reduce", 2**20, seed=-1), "seed"),
        (lambda: simfuse.op("gemv_all_reduce", topo, nodes=1, seed=1.5), "seed"),
    ]
    for call, field in cases:
        with pytest.raises(SpecError, match=field):
            call()
    assert not list(tmp_path.iterdir())  # nothing written


def test_numpy_integers_are_node_counts(root):
    import numpy as np

    topo = root / "topologies" / "h200_nvl8_ib_ndr.yaml"
    a = simfuse.collective(topo, np.int64(2), "all_reduce", 2**20)
    assert a.equals(simfuse.collective(topo, 2, "all_reduce", 2**20))  # and deterministic


def test_collective_and_op_take_the_command_lines_seed(root, capsys):
    """``seed`` as ``--seed``: the API's row equals the command line's at the same seed."""
    import json

    from simfuse.cli import main

    topo = root / "topologies" / "h200_nvl8_ib_ndr.yaml"
    df = simfuse.op("gemv_all_reduce", topo, nodes=1, seed=7, n=1024, k=1024)
    assert main(["op", "--op", "gemv_all_reduce", "--topology", str(topo), "--seed", "7", "--set", "n=1024",
                 "--set", "k=1024", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)
    for col in ("baseline_time_s", "fused_time_s", "speedup"):
        assert float(df[col].iloc[0]) == pytest.approx(float(row[col]), rel=1e-12)
    c = simfuse.collective(topo, 2, "all_reduce", 2**20, seed=3)
    assert float(c["time_s"].iloc[0]) > 0
