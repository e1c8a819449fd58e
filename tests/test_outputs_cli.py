"""Outputs people expect: real Parquet, --format json on every command, one collective spelling, unit names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simfuse.cli import main

ROOT = Path(__file__).resolve().parents[1]
H100 = str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")
MODEL = str(ROOT / "models" / "dlrm_synthetic.yaml")


def test_collective_out_parquet_is_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    out = tmp_path / "x.parquet"
    assert main(["collective", "--topology", H100, "--nodes", "2", "--op", "alltoall", "-b", "1MiB", "-e", "4MiB",
                 "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"PAR1"
    df = pd.read_parquet(out)
    assert len(df) == 3 and set(df["op"]) == {"all_to_all"}
    assert "busbw_gbyte_per_s" in df.columns and not any(c.endswith("_gbps") for c in df.columns)


def test_collective_out_csv_by_extension(tmp_path):
    out = tmp_path / "x.csv"
    assert main(["collective", "--topology", H100, "--nodes", "1", "--op", "AllReduce", "--size", "8MiB",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("op,") and "algbw_gbyte_per_s" in text.splitlines()[0]


@pytest.mark.parametrize("alias", ["alltoall", "all-to-all", "a2a", "AllToAll", "all_to_all"])
def test_collective_aliases(capsys, alias):
    assert main(["collective", "--topology", H100, "--nodes", "2", "--op", alias, "--size", "1MiB",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["op"] == "all_to_all"


def test_run_and_sweep_json(tmp_path, capsys):
    assert main(["run", "--model", MODEL, "--topology", H100, "--nodes", "2", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["mode"] for r in out["rows"]} == {"baseline", "fused"} and out["written"] == []
    assert main(["sweep", "--model", MODEL, "--topology", H100, "--nodes", "1,2", "--out", str(tmp_path / "sw"),
                 "--workers", "1", "--quiet", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted({r["nodes"] for r in out["rows"]}) == [1, 2] and out["written"][0].endswith("results.csv")


def test_calibrate_json(tmp_path, capsys):
    data = ROOT / "tests" / "data" / "calibrate" / "alltoall_perf_1node.log"
    assert main(["calibrate", str(data), "--out", str(tmp_path / "p.yaml"), "--format", "json",
                 "--collective", "all-to-all"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fabric"]["scale_up"]["use"] == "alltoall"  # the profile format's key (see calibrate.build)


def test_topology_accepts_unambiguous_unit_keys(tmp_path):
    from simfuse.spec import load_topology

    d = yaml.safe_load(Path(H100).read_text())
    d["scale_up"]["bw_gbyte_per_s"] = d["scale_up"].pop("bw_gbps")
    d["scale_out"]["nic_bw_gbit_per_s"] = d["scale_out"].pop("nic_bw_gbit")
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(d))
    t = load_topology(p)
    assert t.scale_up.bw_bytes_per_s == 450e9 and t.scale_out.nic_bw_bytes_per_s == 50e9
    d["scale_up"]["bw_gbps"] = 450
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(Exception, match="not both"):
        load_topology(p)
