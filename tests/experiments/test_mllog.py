"""The MLLOG reader of experiments/dlrm_validation.py: the step-time derivation and its errors."""

import sys

import pytest


@pytest.fixture()
def mllog(root):
    sys.path.insert(0, str(root / "experiments"))
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
