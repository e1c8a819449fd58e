"""Regenerate ``synthetic_result_0.txt`` (see README.md): one MLPerf-Training-style result log of our own making.

The layout follows the MLPerf logging format (``:::MLLOG {json}`` lines with ``namespace``, ``time_ms``,
``event_type``, ``key``, ``value``, ``metadata``; mlcommons/logging), mixed with the non-MLLOG lines a real run
prints.  The numbers are invented and round, so that the derivation of experiments/validation/mllog.py can be checked by
hand: 1,000 samples per step, 1,000,000 train samples (1,000 steps per epoch), an evaluation every 0.05 epoch
(50 steps); the warm-up window takes 7 ms per step (left out by the derivation), the five later windows
4.0, 4.1, 3.9, 4.0, 4.2 ms per step (median 4.0 ms), each evaluation 500 ms.
Run: python tests/experiments/data/_make_mllog_fixture.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
GLOBAL_BATCH, TRAIN_SAMPLES, EVAL_EVERY_EPOCH = 1000, 1_000_000, 0.05
WARMUP_STEP_MS, STEP_MS, EVAL_MS = 7.0, (4.0, 4.1, 3.9, 4.0, 4.2), 500


def line(t_ms: int, key: str, value=None, event="POINT_IN_TIME", **meta) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t_ms, "event_type": event, "key": key,
                                     "value": value, "metadata": {"file": "train.py", "lineno": 100, **meta}})


def main() -> None:
    steps = round(EVAL_EVERY_EPOCH * TRAIN_SAMPLES / GLOBAL_BATCH)
    t = 1_700_000_000_000
    out = ["[synthetic] initialising", line(t, "submission_platform", "1xSYNTHETIC TEST NODE"),
           line(t, "global_batch_size", GLOBAL_BATCH), line(t, "opt_base_learning_rate", 0.004),
           line(t + 900, "train_samples", TRAIN_SAMPLES, epoch_num=0.0),
           line(t + 900, "eval_samples", 50_000, epoch_num=0.0), line(t + 901, "run_start", event="INTERVAL_START")]
    t += 901
    epoch = 0.0
    for k, ms in enumerate((WARMUP_STEP_MS, *STEP_MS)):
        t += round(steps * ms)
        epoch = round(epoch + EVAL_EVERY_EPOCH, 6)
        out.append(line(t, "eval_start", event="INTERVAL_START", epoch_num=epoch))
        t += EVAL_MS
        out.append("[1,0]<stdout>:" + line(t, "eval_accuracy", 0.79 + 0.001 * k, epoch_num=epoch))  # mpirun prefix
        out.append(line(t, "eval_stop", event="INTERVAL_END", epoch_num=epoch))
        out.append(f"[synthetic] step {round(epoch * TRAIN_SAMPLES / GLOBAL_BATCH)} done")
    out.append(line(t, "tracked_stats", {"throughput": 1.0e5}, step=epoch))
    out.append(line(t + 1, "run_stop", event="INTERVAL_END", status="success"))
    (HERE / "synthetic_result_0.txt").write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
