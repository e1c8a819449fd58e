"""Crash-safe sweeps: hashed point files validated on load, the lock, paths under --out, errors across pools,
and a SIGKILL in the middle of a sweep (no surviving workers, identical results after resume)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from simfuse.errors import SpecError, TraceError
from simfuse.sweeps import SweepLock, point_file_name, run_sweep

from .conftest import MODEL, ROOT, TOPO, run_main, snapshot

TOPO_S, MODEL_S = str(TOPO), str(MODEL)


def _raise_spec_error(kind: str):
    from simfuse.spec import workload_from_dict

    if kind == "load":
        workload_from_dict({"kind": "dlrm", "name": "x", "global_batch": float("nan")}, "pool.yaml")
    raise TraceError("trace.json", "line 3", "bad")


def test_spec_error_pickles_and_crosses_a_process_pool():
    e = SpecError("f.yaml", "a.b", "bad value")
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is SpecError and str(e2) == str(e) and (e2.source, e2.field, e2.message) == ("f.yaml", "a.b",
                                                                                                  "bad value")
    with ProcessPoolExecutor(max_workers=1) as pool:
        for kind, cls in (("load", SpecError), ("trace", TraceError)):
            with pytest.raises(SpecError) as info:
                pool.submit(_raise_spec_error, kind).result()
            assert type(info.value) is cls and info.value.source in ("pool.yaml", "trace.json")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    df = run_sweep(MODEL_S, TOPO_S, [1, 2], out, progress=False, plots=False)
    return out, df


def _point_files(out: Path) -> list[Path]:
    return sorted((out / "points").iterdir())


def test_point_files_are_named_by_the_hash_of_their_key(reference):
    out, _ = reference
    files = _point_files(out)
    assert len(files) == 2
    for f in files:
        d = json.loads(f.read_text())
        assert f.name == point_file_name(d["key"]) and len(f.stem) == 64
        assert "dlrm_synthetic" not in f.name


@pytest.mark.parametrize("damage", ["null", "[]", "{}", "edited", "other-point", "directory", "symlink", "garbage",
                                    "truncated"])
def test_damaged_point_files_are_recomputed(reference, tmp_path, damage, monkeypatch):
    import shutil

    ref_out, ref_df = reference
    out = tmp_path / "o"
    shutil.copytree(ref_out, out)
    files = _point_files(out)
    target, other = files[0], files[1]
    text = target.read_text()
    if damage == "edited":
        d = json.loads(text)
        d["rows"][0]["iteration_time_s"] *= 0.5
        target.write_text(json.dumps(d))
    elif damage == "other-point":
        target.write_text(other.read_text())
    elif damage == "directory":
        target.unlink()
        target.mkdir()
        (target / "x").write_text("x")
    elif damage == "symlink":
        outside = tmp_path / "outside.json"
        outside.write_text(text)
        target.unlink()
        target.symlink_to(outside)
    elif damage == "garbage":
        target.write_bytes(b"\xff\xfe" * 10)
    elif damage == "truncated":
        target.write_text(text[: len(text) // 2])
    else:
        target.write_text(damage)
    import simfuse.sweeps as sweep_mod

    calls = []
    real = sweep_mod.run_point
    monkeypatch.setattr(sweep_mod, "run_point", lambda *a: calls.append(a) or real(*a))
    df = run_sweep(MODEL_S, TOPO_S, [1, 2], out, progress=False, plots=False)
    assert len(calls) == 1  # exactly the damaged point
    pd.testing.assert_frame_equal(df, ref_df)
    assert json.loads(target.read_text())["key"]["nodes"] == calls[0][2]
    if damage == "symlink":
        assert not target.is_symlink() and (tmp_path / "outside.json").read_text() == text


def test_a_second_sweep_on_the_same_out_fails_at_once(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    lock = SweepLock(out)
    lock.acquire()
    try:
        rc, _, err = run_main(["sweep", "--model", MODEL_S, "--topology", TOPO_S, "--nodes", "1", "--out", out,
                               "--quiet", "--workers", "1"], capsys)
        assert rc == 2 and "in use by another sweep" in err and len(err.strip().splitlines()) == 1
        assert f"pid {os.getpid()}" in err
    finally:
        lock.release()
    assert snapshot(out) == set()  # the lock file goes with the sweep
    rc, _, _ = run_main(["sweep", "--model", MODEL_S, "--topology", TOPO_S, "--nodes", "1", "--out", out, "--quiet",
                         "--workers", "1"], capsys)
    assert rc == 0 and ".sweep.lock" not in snapshot(out)


def test_symlinks_inside_out_cannot_lead_outside(tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    out = tmp_path / "o"
    out.mkdir()
    (out / "points").symlink_to(outside, target_is_directory=True)
    rc, _, err = run_main(["sweep", "--model", MODEL_S, "--topology", TOPO_S, "--nodes", "1", "--out", out,
                           "--quiet", "--workers", "1"], capsys)
    assert rc == 2 and "points" in err and len(err.strip().splitlines()) == 1
    assert snapshot(outside) == set()
    # a file link inside --out is replaced by the rename, its target untouched
    (out / "points").unlink()
    victim = tmp_path / "victim.csv"
    victim.write_text("keep\n")
    (out / "results.csv").symlink_to(victim)
    rc, _, err = run_main(["sweep", "--model", MODEL_S, "--topology", TOPO_S, "--nodes", "1", "--out", out,
                           "--quiet", "--workers", "1"], capsys)
    assert rc == 0, err
    assert victim.read_text() == "keep\n" and not (out / "results.csv").is_symlink()
    assert snapshot(outside) == set()


def test_model_names_never_become_paths(tmp_path, capsys):
    from simfuse.checks import inside

    for bad in ("..", "../x", "/abs", "a/b", ""):
        with pytest.raises(SpecError):
            inside(tmp_path, bad)
    # a --out that is itself a link is the user's choice: everything stays inside its target
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    rc, _, err = run_main(["sweep", "--model", MODEL_S, "--topology", TOPO_S, "--nodes", "1", "--out", link,
                           "--quiet", "--workers", "1"], capsys)
    assert rc == 0, err
    assert {p.split(os.sep)[0] for p in snapshot(tmp_path)} == {"real", "link"}
    assert "results.csv" in snapshot(real)


def _pgid_members(pgid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(d))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_sigkill_mid_sweep_leaves_no_workers_and_resume_is_identical(tmp_path):
    nodes = "1,2,4,8,16,32"
    base = [sys.executable, "-m", "simfuse.cli", "sweep", "--model", MODEL_S, "--topology", TOPO_S, "--nodes", nodes,
            "--quiet", "--workers", "2", "--sim-mode", "full"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "killed"
    proc = subprocess.Popen(base + ["--out", str(out)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline:
        pts = list((out / "points").glob("*.json")) if (out / "points").is_dir() else []
        if pts:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    members = _pgid_members(proc.pid)
    assert len(members) >= 2  # the sweep and its workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while _pgid_members(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert _pgid_members(proc.pid) == [], "pool workers survived their sweep"
    assert not (out / "results.csv").exists()
    done_before = len(list((out / "points").glob("*.json")))
    assert 1 <= done_before < 6
    resumed = subprocess.run(base + ["--out", str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    ref = subprocess.run(base + ["--out", str(tmp_path / "ref")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert ref.returncode == 0, ref.stderr
    a = (out / "results.csv").read_bytes()
    assert a == (tmp_path / "ref" / "results.csv").read_bytes()
    assert len(pd.read_csv(out / "results.csv")) == 12
    assert len(list((out / "points").glob("*.json"))) == 6
