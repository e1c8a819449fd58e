"""``simfuse calibrate`` / ``simfuse validate`` end to end through the argparse wiring."""

from __future__ import annotations

import argparse
import csv
import json
import math

import pandas as pd
import pytest

from simfuse.calibrate.validate import read_measurements
from simfuse.cli.calibrate import add_calibrate_parser, add_validate_parser
from simfuse.costs.base import KernelWork
from simfuse.engine.compute import simulate_kernel
from simfuse.errors import TraceError
from simfuse.profile.load import load_profile

from .test_calibrate_fit import _cost_model, make_synthetic_traces
from .test_calibrate_readers import DATA


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simfuse")
    sub = parser.add_subparsers(dest="command", required=True)
    add_calibrate_parser(sub)
    add_validate_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def _heldout_csv(path, cost_model) -> None:
    """Held-out shapes (not in the calibration traces), 'measured' with the true model."""
    cols = ["kernel", "variant", "backend", "world_size", "dtype", "shape", "grid", "num_warps", "median_s",
            "p10_s", "p90_s", "flops", "bytes", "device", "date"]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for variant in ("compute", "fused"):
            for bags, dim in ((12000, 128), (3000, 64), (777, 256)):
                grid = math.ceil(bags / 4)
                per = 4 * (16 * dim * 4 + dim * 4 + 16 * 8)
                t = simulate_kernel(KernelWork("embedding_all_to_all", grid, 0.0, per, "fp32", variant),
                                    cost_model).time_s
                w.writerow(["embedding_all_to_all", variant, "emulated", 8, "fp32",
                            f"bags={bags};dim={dim};pooling=16", grid, 4, t, t * 0.98, t * 1.02, 0, per * grid,
                            "synthetic", "2026-12-02"])


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, root):
    tmp = tmp_path_factory.mktemp("cli")
    traces = tmp / "traces"
    traces.mkdir()
    make_synthetic_traces(traces)
    (traces / "log.txt").write_text("benchmark log\n")  # skipped: not a calibration input
    held = traces / "heldout.csv"  # skipped inside a directory: held-out points are for validate
    _heldout_csv(held, _cost_model())
    prof = tmp / "profiles" / "cal.yaml"
    rc = run_cli(["calibrate", str(traces), str(DATA / "alltoall_perf_1node.log"),
                  str(DATA / "nccl_2nodes.log"), "--out", str(prof)])
    assert rc == 0 and prof.is_file()
    topo = tmp / "topo.yaml"
    text = (root / "topologies" / "h200_nvl8_ib_ndr.yaml").read_text()
    # replace the topology's own calibration line (a second one would be a duplicate key, an error)
    lines = [ln for ln in text.splitlines() if not ln.startswith("calibration:")]
    topo.write_text("\n".join(lines) + "\ncalibration: profiles/cal.yaml\n")
    return tmp, prof, topo, held


def test_calibrate_skips_foreign_files_in_directories(calibrated, capsys):
    tmp, prof, _, held = calibrated
    sources = [s["path"] for s in load_profile(prof).data["sources"]]
    assert not any(p.endswith(("log.txt", "heldout.csv")) for p in sources)
    out = tmp / "p2.yaml"
    assert run_cli(["calibrate", str(held), "--out", str(out)]) == 2  # named explicitly: an error
    assert "pass it to `simfuse validate --measurements`" in capsys.readouterr().err and not out.exists()


def test_validate_json_on_heldout(calibrated, capsys):
    tmp, prof, topo, held = calibrated
    capsys.readouterr()
    out_dir = tmp / "val"
    rc = run_cli(["validate", "--topology", str(topo), "--measurements", str(held), "--format", "json",
                  "--out", str(out_dir)])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["basis"] == "held_out" and summary["points"] == 6
    assert summary["median_abs_pct_error"] < 1.0 and summary["max_abs_pct_error"] < 2.0
    assert summary["calibration_kernels"]["max_abs_pct_error"] < 2.0
    assert summary["calibration_collectives"]["points"] > 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["residuals.png", "summary.json", "validation.csv"]
    assert (out_dir / "residuals.png").read_bytes()[:4] == b"\x89PNG"
    table = pd.read_csv(out_dir / "validation.csv")
    kern = table[table["kind"] == "kernel"]
    assert kern["in_calibration_range"].isin([True, False]).all()
    assert kern[kern["set"] == "calibration"]["in_calibration_range"].all()
    assert summary["held_out_in_calibration_range"]["points"] == kern[kern["set"] == "held_out"][
        "in_calibration_range"].sum()


def test_validate_text_without_measurements(calibrated, capsys):
    _, _, topo, _ = calibrated
    capsys.readouterr()
    assert run_cli(["validate", "--topology", str(topo)]) == 0
    out = capsys.readouterr().out
    # no held-out measurements: said first, then the in-sample errors, labelled as such
    assert out.startswith("held-out: none given") and "\nin-sample (" in out


def test_calibrate_bad_input_exit_2_no_output(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("# simfuse-kernel-trace v1\nrun_id,kernel\nx,y\n")
    out = tmp_path / "p.yaml"
    rc = run_cli(["calibrate", str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists() and list(tmp_path.iterdir()) == [bad]
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
    rc = run_cli(["calibrate", str(tmp_path / "missing.log"), "--out", str(out)])
    assert rc == 2 and "file not found" in capsys.readouterr().err


def test_calibrate_does_not_clobber_on_error(calibrated, tmp_path, capsys):
    _, prof, _, _ = calibrated
    before = prof.read_bytes()
    rc = run_cli(["calibrate", str(DATA / "nccl_2nodes.log"), str(tmp_path), "--out", str(prof)])
    assert rc == 2 and prof.read_bytes() == before


def test_validate_errors_exit_2(calibrated, tmp_path, capsys, root):
    tmp, _, topo, held = calibrated
    no_cal = root / "topologies" / "h100_nvl8_ib_ndr.yaml"
    assert run_cli(["validate", "--topology", str(no_cal)]) == 2
    assert "names no calibration profile" in capsys.readouterr().err
    bad = tmp_path / "held.csv"
    lines = held.read_text().splitlines()
    lines[3] = lines[3].replace("emulated,8,fp32", "emulated,eight,fp32")
    bad.write_text("\n".join(lines) + "\n")
    out_dir = tmp_path / "val"
    assert run_cli(["validate", "--topology", str(topo), "--measurements", str(bad), "--out", str(out_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: line 4: column 'world_size'" in err and not out_dir.exists()
    with pytest.raises(TraceError, match="line 1: not a kernel measurement table"):
        read_measurements(DATA / "nccl_2nodes.log")


def test_calibrate_is_deterministic(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764633600")
    outs = []
    for i in range(2):
        out = tmp_path / f"p{i}.yaml"
        assert run_cli(["calibrate", str(DATA / "nccl_2nodes.log"), str(DATA / "all_reduce_perf_1node.log"),
                        "--out", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and b"created_utc: '2025-12-02T00:00:00Z'" in outs[0]
