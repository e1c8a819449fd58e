"""The MLLOG reader of experiments/validation/dlrm_validation.py: the step-time derivation and its errors."""

import sys

import pytest


@pytest.fixture()
def mllog(root):
    sys.path.insert(0, str(root / "experiments" / "validation"))
    import mllog

    return mllog


def _line(t, key, value=None, **meta):
    import json

    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": meta})


def _log(tmp_path, lines):
    p = tmp_path / "log.txt"
    p.write_text("# source: test\n" + "\n".join(lines) + "\n")
    return p


def test_step_time_formula(mllog, tmp_path):
    # 1,000 samples per step, 1e6 samples; evaluations at epoch 0.1 and 0.3: 200 steps in 4 s -> 20 ms/step
    p = _log(tmp_path, [_line(0, "submission_platform", "x"), _line(0, "global_batch_size", 1000),
                        _line(0, "train_samples", 1_000_000), _line(0, "run_start"),
                        _line(5000, "eval_start", epoch_num=0.1), _line(6000, "eval_stop", epoch_num=0.1),
                        _line(10000, "eval_start", epoch_num=0.3), _line(11000, "eval_stop", epoch_num=0.3)])
    (run,) = mllog.read_runs(p)
    s = mllog.step_times(run)
    assert s.step_s == pytest.approx(0.02) and len(s.windows) == 1 and s.windows[0][1] == pytest.approx(200)


def test_malformed_lines_name_file_and_line(mllog, tmp_path):
    p = _log(tmp_path, [_line(0, "global_batch_size", 1000), ':::MLLOG {"time_ms": 1, "key": '])
    with pytest.raises(mllog.MLLogError, match=r"log.txt:3: malformed MLLOG JSON"):
        mllog.read_runs(p)
    p = _log(tmp_path, [':::MLLOG {"time_ms": 1, "key": "x"}'])
    with pytest.raises(mllog.MLLogError, match="lacks 'event_type'"):
        mllog.read_runs(p)
    p = _log(tmp_path, [':::MLLOG {"time_ms": "1", "key": "x", "event_type": "POINT_IN_TIME"}'])
    with pytest.raises(mllog.MLLogError, match="time_ms is not a number"):
        mllog.read_runs(p)


def test_missing_keys_and_windows(mllog, tmp_path):
    p = _log(tmp_path, [_line(0, "global_batch_size", 1000), _line(0, "submission_platform", "x")])
    with pytest.raises(mllog.MLLogError, match="no 'train_samples' event"):
        mllog.step_times(mllog.read_runs(p)[0])
    p = _log(tmp_path, [_line(0, "global_batch_size", 1000), _line(0, "train_samples", 10**6),
                        _line(0, "submission_platform", "x"), _line(5, "eval_start", epoch_num=0.1),
                        _line(6, "eval_stop", epoch_num=0.1)])
    with pytest.raises(mllog.MLLogError, match="no training window"):
        mllog.step_times(mllog.read_runs(p)[0])
    p = _log(tmp_path, [_line(0, "global_batch_size", 1000), _line(0, "train_samples", 10**6),
                        _line(6, "eval_stop", epoch_num=0.1), _line(9, "eval_start")])
    with pytest.raises(mllog.MLLogError, match="lacks metadata.epoch_num"):
        mllog.step_times(mllog.read_runs(p)[0])


# ---------------------------------------------------------------- synthetic result log and derived_steps.csv
@pytest.fixture()
def dv(root):
    sys.path.insert(0, str(root / "experiments" / "validation"))
    import dlrm_validation

    return dlrm_validation


def _synthetic(root):
    return root / "tests" / "experiments" / "data" / "synthetic_result_0.txt"


def test_synthetic_result_log_gives_the_designed_step_times(mllog, root):
    """tests/experiments/data/_make_mllog_fixture.py: 50 steps between evaluations, 4.0/4.1/3.9/4.0/4.2 ms per
    step after a 7 ms warm-up window (left out); prefixed and non-MLLOG lines are read past."""
    (run,) = mllog.read_runs(_synthetic(root))
    s = mllog.step_times(run)
    assert s.global_batch == 1000 and s.train_samples == 1_000_000 and s.platform == "1xSYNTHETIC TEST NODE"
    assert [w[1] for w in s.windows] == pytest.approx([50] * 5)
    assert [w[2] for w in s.windows] == pytest.approx([4.0e-3, 4.1e-3, 3.9e-3, 4.0e-3, 4.2e-3])
    assert s.step_s == pytest.approx(4.0e-3)


def test_derived_rows_round_trip_through_the_csv(dv, root, tmp_path):
    text = _synthetic(root).read_text()
    rows = dv.derive_rows("v0.0", "synthetic_folder", "owner/repo", "0" * 40,
                          [("NVIDIA/results/synthetic_folder/dlrm_dcnv2/result_0.txt", "a" * 40, text),
                           ("NVIDIA/results/synthetic_folder/dlrm_dcnv2/result_1.txt", "b" * 40, text)])
    out = tmp_path / "derived.csv"
    dv.write_derived(out, rows)
    back = dv.read_derived(out)
    assert back == rows  # floats written in full precision
    assert rows[0]["step_s"] == pytest.approx(4.0e-3) and rows[0]["windows"] == 5
    sub = ("v0.0", "owner/repo", "0" * 40, "synthetic_folder", 1, "dlrm_dcnv2_mlperf", "h100_nvl8_ib_ndr")
    t = dv.derived_table([sub], out)
    assert t.iloc[0]["runs"] == 2 and t.iloc[0]["windows"] == 10
    assert t.iloc[0]["derived_step_s"] == rows[0]["step_s"]
    assert not list(tmp_path.glob("*.tmp"))


def test_bad_derived_csv_names_file_line_and_column(dv, root, tmp_path):
    from simfuse.errors import SpecError

    rows = dv.derive_rows("v0.0", "f", "o/r", "0" * 40, [("p", "b", _synthetic(root).read_text())])
    out = tmp_path / "derived.csv"
    dv.write_derived(out, rows)
    out.write_text(out.read_text().replace(repr(rows[0]["step_s"]), "fast"))
    with pytest.raises(SpecError, match=r"derived\.csv: line 2, column step_s: not a number"):
        dv.read_derived(out)
    out.write_text("round,config\nv0.0,f\n")
    with pytest.raises(SpecError, match=r"derived\.csv: header: missing column\(s\) repository"):
        dv.read_derived(out)
    r = dv.main(["--smoke", "--derived", str(out), "--out", str(tmp_path / "o")])
    assert r == 2 and not (tmp_path / "o" / "validation.csv").exists()


def test_committed_derived_steps_cite_every_run_and_give_validation_csv(dv, root):
    """derived_steps.csv (our derivation, the logs are not redistributed): every run names its repository,
    commit, path and blob; the configurations' medians are validation.csv's derived_step_s."""
    import re
    import statistics

    import pandas as pd

    runs = dv.read_derived()
    assert len(runs) == 10 * len(dv.SUBMISSIONS)
    for r in runs:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and re.fullmatch(r"[0-9a-f]{40}", r["blob"])
        assert re.fullmatch(rf"NVIDIA/results/{re.escape(r['config'])}/dlrm_dcnv2/result_\d+\.txt", r["path"])
        assert r["repository"] == f"mlcommons/training_results_{r['round']}"
    val = pd.read_csv(root / "experiments" / "results" / "dlrm_validation" / "validation.csv")
    for v in val.itertuples():
        mine = [r["step_s"] for r in runs if r["round"] == v.round and r["config"] == v.config]
        assert len(mine) == v.runs
        assert statistics.median(mine) == pytest.approx(v.derived_step_s, rel=1e-5)  # %.6g in validation.csv
