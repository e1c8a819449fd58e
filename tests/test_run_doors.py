"""One run pipeline: ``simfuse run``, :func:`simfuse.api.run` and a sweep point give the same rows, column for
column and value for value (the three doors drifted once: the API reported ``scaling=model`` where the command
line reported ``strong``)."""

import math

import pandas as pd
import pytest

import simfuse
from simfuse.cli import main

MODEL = """\
name: doors_dlrm
kind: dlrm
global_batch: 256
dense_features: 16
bottom_mlp: [32, 16]
top_mlp: [32, 1]
interaction: {kind: dot}
embedding:
  dim: 16
  dtype: fp32
  placement: planned
  tables:
    - {rows: 4096, pooling: 4}
    - {rows: 4096, pooling: 2}
    - {rows: 1024, pooling: 8}
"""


def _normal(df: pd.DataFrame) -> list[dict]:
    """Rows as written to CSV and read back (the same types whichever door made them)."""
    return pd.read_csv(__import__("io").StringIO(df.to_csv(index=False))).to_dict("records")


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.parametrize("settings", [{"uncertainty": "none"},
                                      {"uncertainty": "none", "global_batch": "512", "slice_wgs": "2"}])
def test_cli_api_and_sweep_give_identical_rows(tmp_path, root, settings):
    model = tmp_path / "doors.yaml"
    model.write_text(MODEL)
    topo = root / "topologies" / "h100_nvl8_ib_ndr.yaml"
    argv = ["run", "--model", str(model), "--topology", str(topo), "--nodes", "1", "--gpus-per-node", "4",
            "--quiet", "--workers", "1", "--out", str(tmp_path / "run")]
    for k, v in settings.items():
        argv += ["--set", f"{k}={v}"]
    assert main(argv) == 0
    cli = pd.read_csv(tmp_path / "run" / "summary.csv")
    api = simfuse.run(model, topo, 1, gpus_per_node=4, **settings)
    sweep = simfuse.sweep(model, topo, [1], tmp_path / "sweep", gpus_per_node=4, **settings)
    rows = {"cli": _normal(cli), "api": _normal(api), "sweep": _normal(sweep)}
    assert list(cli.columns) == list(api.columns) == list(sweep.columns)
    for door in ("api", "sweep"):
        assert len(rows[door]) == len(rows["cli"]) == 2
        for ra, rb in zip(rows["cli"], rows[door], strict=True):
            diff = {k: (ra[k], rb[k]) for k in ra if not _same(ra[k], rb[k])}
            assert not diff, f"{door} differs from the command line: {diff}"
    expect = "strong" if "global_batch" in settings else "model"
    assert set(cli["scaling"]) == {expect}
