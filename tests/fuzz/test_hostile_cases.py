"""A table of hand-written hostile inputs, across input kinds and commands.

Each case runs ``simfuse.cli.main`` in-process and asserts exit code 2, exactly one line on stderr, no traceback,
and no file or directory left behind (the snapshot of the case's directory is unchanged, inputs aside).
"""

from __future__ import annotations

import copy

import pytest
import yaml

from .conftest import model_dict, run_main, snapshot, topo_dict

COLL = ["collective", "--topology", "{T}", "--op", "all_to_all", "--size", "1MiB"]
RUN = ["run", "--model", "{M}", "--topology", "{T}"]
SWEEP = ["sweep", "--model", "{M}", "--topology", "{T}", "--out", "{O}", "--quiet", "--workers", "1"]
OP = ["op", "--op", "embedding_all_to_all", "--topology", "{T}"]
VAL = ["validate", "--topology", "{T}", "--measurements", "{H}"]


def _set(d: dict, dotted: str, value) -> dict:
    d = copy.deepcopy(d)
    parts = dotted.split(".")
    cur = d
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    last = parts[-1]
    if value is DELETE:
        del cur[last]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


DELETE = object()


def topo(dotted: str, value) -> str:
    return yaml.safe_dump(_set(topo_dict(), dotted, value), sort_keys=False)


def model(dotted: str, value) -> str:
    return yaml.safe_dump(_set(model_dict(), dotted, value), sort_keys=False)


def topo_raw(extra: str) -> str:
    return yaml.safe_dump(topo_dict(), sort_keys=False) + extra


def model_raw(extra: str) -> str:
    from .conftest import MODEL

    return MODEL.read_text() + extra


def model_lists(pooling: list) -> str:
    d = model_dict()
    tables = d["embedding"].pop("tables")
    d["embedding"]["rows"] = [t["rows"] for t in tables][: len(pooling)]
    d["embedding"]["pooling"] = pooling
    return yaml.safe_dump(d, sort_keys=False)


BOMB = ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n")


def _held(edit) -> str:
    from .conftest import HELDOUT

    lines = HELDOUT.read_text().splitlines()[:3]
    header = lines[0].split(",")
    row = lines[1].split(",")
    edit(header, row)
    return ",".join(header) + "\n" + ",".join(row) + "\n"


def held_col(col: str, value: str) -> str:
    def edit(header, row):
        row[header.index(col)] = value
    return _held(edit)


# (id, {file: text}, argv, pre-existing paths to create: {"O": "file"|"dir"})
CASES = [
    # --- topology YAML (collective / run / op) ---
    ("topo-nan-bw", {"topo.yaml": topo("scale_up.bw_gbps", float("nan"))}, COLL, {}),
    ("topo-inf-latency", {"topo.yaml": topo("scale_out.latency_us", float("inf"))}, COLL, {}),
    ("topo-neg-inf-tflops", {"topo.yaml": topo("device.peak_tflops.bf16", float("-inf"))}, COLL, {}),
    ("topo-nan-in-description", {"topo.yaml": topo("description", [1.0, float("nan")])}, COLL, {}),
    ("topo-duplicate-key", {"topo.yaml": topo_raw("name: again\n")}, COLL, {}),
    ("topo-duplicate-nested-key", {"topo.yaml": topo_raw("collectives: {launch_us: 1, launch_us: 2}\n")}, COLL, {}),
    ("topo-alias-bomb-in-name", {"topo.yaml": BOMB + yaml.safe_dump(_set(topo_dict(), "name", "X"))
                                 .replace("name: X", "name: *g")}, COLL, {}),
    ("topo-recursive-alias", {"topo.yaml": topo_raw("description: &r [*r]\n")}, COLL, {}),
    ("topo-deep-flow-nesting", {"topo.yaml": topo_raw("description: " + "[" * 50000 + "]" * 50000 + "\n")}, COLL, {}),
    ("topo-deep-block-nesting", {"topo.yaml": topo_raw("description:\n" + "".join(
        " " * (i + 1) + f"k{i}:\n" for i in range(200)) + " " * 201 + "x: 1\n")}, COLL, {}),
    ("topo-gpus-per-node-0", {"topo.yaml": topo("scale_up.gpus_per_node", 0)}, COLL, {}),
    ("topo-gpus-per-node-1e30", {"topo.yaml": topo("scale_up.gpus_per_node", 1e30)}, COLL, {}),
    ("topo-compute-units-huge-int", {"topo.yaml": topo_raw("").replace("compute_units: 132",
                                                                         "compute_units: " + "9" * 400)}, COLL, {}),
    ("topo-negative-cu", {"topo.yaml": topo("device.compute_units", -1)}, COLL, {}),
    ("topo-string-bw", {"topo.yaml": topo("scale_up.bw_gbps", "fast")}, COLL, {}),
    ("topo-bool-bw", {"topo.yaml": topo("scale_up.bw_gbps", True)}, COLL, {}),
    ("topo-name-newline", {"topo.yaml": topo("name", "a\nb")}, COLL, {}),
    ("topo-mixed-type-unknown-keys", {"topo.yaml": topo_raw("1: x\nfoo: y\n2.5: z\n")}, COLL, {}),
    ("topo-nics-not-divisor", {"topo.yaml": topo("scale_out.nics_per_node", 3)}, COLL, {}),
    ("topo-oversub-1e300", {"topo.yaml": topo("scale_out.oversubscription", 1e300)}, COLL, {}),
    ("topo-missing-device", {"topo.yaml": topo("device", DELETE)}, COLL, {}),
    ("topo-top-level-list", {"topo.yaml": "- a\n- b\n"}, COLL, {}),
    ("topo-empty", {"topo.yaml": ""}, COLL, {}),
    ("topo-binary", {"topo.yaml": "\x00\x01\x02\xff"}, COLL, {}),
    ("topo-python-tag", {"topo.yaml": topo_raw("x: !!python/object/apply:os.system ['true']\n")}, COLL, {}),
    ("topo-calibration-profile-nan", {"topo.yaml": topo("calibration", "prof.yaml"),
                                      "prof.yaml": "kernel_launch_latency_s: .nan\n"}, COLL, {}),
    ("topo-calibration-profile-dup", {"topo.yaml": topo("calibration", "prof.yaml"),
                                      "prof.yaml": "kernels: []\nkernels: []\n"}, RUN, {}),
    ("topo-file-missing", {}, ["collective", "--topology", "{I}/nope.yaml", "--op", "all_to_all", "--size", "1"], {}),
    ("topo-is-directory", {}, ["collective", "--topology", "{I}", "--op", "all_to_all", "--size", "1"], {}),
    # --- model YAML (run / sweep) ---
    ("model-pooling-nan-list", {"model.yaml": model_lists([float("nan"), 1.0])}, RUN, {}),
    ("model-pooling-inf-list", {"model.yaml": model_lists([1.0, float("inf")])}, RUN, {}),
    ("model-pooling-inf", {"model.yaml": model("embedding.tables.0.pooling", float("inf"))}, RUN, {}),
    ("model-pooling-nan-sweep-pool", {"model.yaml": model("embedding.tables.0.pooling", float("nan"))},
     SWEEP[:-2] + ["--workers", "2", "--nodes", "1,2"], {}),
    ("model-global-batch-1e30", {"model.yaml": model("global_batch", 1.0e30)}, RUN, {}),
    ("model-global-batch-negative", {"model.yaml": model("global_batch", -2048)}, RUN, {}),
    ("model-global-batch-string", {"model.yaml": model("global_batch", "2048")}, RUN, {}),
    ("model-name-dotdot", {"model.yaml": model("name", "../../../X")}, SWEEP + ["--nodes", "1"], {}),
    ("model-name-absolute", {"model.yaml": model("name", "/tmp/simfuse-evil")}, SWEEP + ["--nodes", "1"], {}),
    ("model-duplicate-key", {"model.yaml": model_raw("global_batch: 4096\n")}, RUN, {}),
    ("model-duplicate-key-in-table", {"model.yaml": model_raw("").replace("rows: 1000000, pooling: 100}",
                                      "rows: 1000000, pooling: 100, pooling: 1}", 1)}, RUN, {}),
    ("model-alias-bomb", {"model.yaml": BOMB + model_raw("")}, RUN, {}),
    ("model-bomb-in-checked-field", {"model.yaml": BOMB + model_raw("").replace("dense_features: 512",
                                                                                 "dense_features: *g")}, RUN, {}),
    ("model-dim-string", {"model.yaml": model("embedding.dim", "64")}, RUN, {}),
    ("model-dim-huge", {"model.yaml": model("embedding.dim", 10**9)}, RUN, {}),
    ("model-kind-bogus", {"model.yaml": model("kind", "gpt")}, RUN, {}),
    ("model-missing-name", {"model.yaml": model("name", DELETE)}, RUN, {}),
    ("model-mlp-nan", {"model.yaml": model("bottom_mlp", [512, float("nan"), 64])}, RUN, {}),
    ("model-mlp-negative", {"model.yaml": model("bottom_mlp", [512, -5, 64])}, RUN, {}),
    ("model-extra-key", {"model.yaml": model("surprise", 1)}, RUN, {}),
    ("model-int-key", {"model.yaml": model_raw("7: seven\n")}, RUN, {}),
    ("model-rows-1e300", {"model.yaml": model("embedding.tables.0.rows", 1e300)}, RUN, {}),
    ("model-tables-empty", {"model.yaml": model("embedding.tables", [])}, RUN, {}),
    ("model-interaction-list", {"model.yaml": model("interaction", [1, 2])}, RUN, {}),
    # --- command-line arguments ---
    ("sweep-nodes-0..8", {}, SWEEP + ["--nodes", "0..8"], {}),
    ("sweep-nodes-neg..8", {}, SWEEP + ["--nodes=-4..8"], {}),
    ("sweep-nodes-huge-range", {}, SWEEP + ["--nodes", "1..1000000000000"], {}),
    ("sweep-nodes-reversed", {}, SWEEP + ["--nodes", "8..1"], {}),
    ("sweep-nodes-garbage", {}, SWEEP + ["--nodes", "1,x"], {}),
    ("sweep-gpus-per-node-0", {}, SWEEP + ["--nodes", "1", "--gpus-per-node", "0"], {}),
    ("sweep-gpus-per-node-3-pool", {}, SWEEP[:-2] + ["--workers", "2", "--nodes", "1,2", "--gpus-per-node", "3"], {}),
    ("sweep-gpus-per-node-5-nics", {}, SWEEP + ["--nodes", "1", "--gpus-per-node", "5"], {}),
    ("sweep-workers-0", {}, SWEEP[:-2] + ["--workers", "0", "--nodes", "1"], {}),
    ("sweep-out-is-file", {}, SWEEP + ["--nodes", "1"], {"O": "file"}),
    ("sweep-cost-guard", {}, SWEEP + ["--nodes", "4096", "--sim-mode", "full"], {}),
    ("run-nodes-0", {}, RUN + ["--nodes", "0"], {}),
    ("run-nodes-negative", {}, RUN + ["--nodes", "-3"], {}),
    ("run-nodes-huge", {}, RUN + ["--nodes", "1000000000"], {}),
    ("run-gpus-per-node-0", {}, RUN + ["--gpus-per-node", "0"], {}),
    ("run-gpus-per-node-3", {}, RUN + ["--gpus-per-node", "3"], {}),
    ("run-out-existing-file", {}, RUN + ["--out", "{O}"], {"O": "file"}),
    ("run-trace-without-out", {}, RUN + ["--trace"], {}),
    ("run-cost-guard-full", {}, RUN + ["--nodes", "4096", "--sim-mode", "full"], {}),
    ("coll-factor-tiny", {}, ["collective", "--topology", "{T}", "--op", "all_to_all", "-b", "1KiB", "-e", "1GiB",
                              "-f", "1.0000001"], {}),
    ("coll-factor-nan", {}, ["collective", "--topology", "{T}", "--op", "all_to_all", "-b", "1KiB", "-e", "1MiB",
                             "-f", "nan"], {}),
    ("coll-factor-inf", {}, ["collective", "--topology", "{T}", "--op", "all_to_all", "-b", "1KiB", "-e", "1MiB",
                             "-f", "inf"], {}),
    ("coll-factor-1", {}, ["collective", "--topology", "{T}", "--op", "all_to_all", "-b", "1KiB", "-e", "1MiB",
                           "-f", "1"], {}),
    ("coll-begin-after-end", {}, ["collective", "--topology", "{T}", "--op", "all_to_all", "-b", "1MiB", "-e", "1KiB"],
     {}),
    ("coll-size-1e400", {}, COLL[:-1] + ["1e400"], {}),
    ("coll-size-1e30", {}, COLL[:-1] + ["1e30"], {}),
    ("coll-size-negative", {}, COLL[:-1] + ["-5"], {}),
    ("coll-size-unit", {}, COLL[:-1] + ["12 parsecs"], {}),
    ("coll-size-long", {}, COLL[:-1] + ["9" * 5000], {}),
    ("coll-nodes-0", {}, COLL + ["--nodes", "0"], {}),
    ("coll-gpus-per-node-0", {}, COLL + ["--gpus-per-node", "0"], {}),
    ("coll-algorithm-bogus", {}, COLL + ["--algorithm", "bogus"], {}),
    ("coll-out-is-dir", {}, COLL + ["--out", "{O}"], {"O": "dir"}),
    ("op-global-batch-inf", {}, OP + ["--set", "global_batch=inf"], {}),
    ("op-global-batch-1e30", {}, OP + ["--set", "global_batch=1e30"], {}),
    ("op-baseline-algorithm-bogus", {}, OP + ["--set", "baseline_algorithm=bogus"], {}),
    ("op-occupancy-nan", {}, OP + ["--set", "occupancy_loss=nan"], {}),
    ("op-hbm-factor-negative", {}, OP + ["--set", "hbm_comm_factor=-1"], {}),
    ("op-slice-zero", {}, OP + ["--set", "slice_wgs=0"], {}),
    ("op-unknown-param", {}, OP + ["--set", "bogus=1"], {}),
    ("op-set-twice", {}, OP + ["--set", "dim=64", "--set", "dim=32"], {}),
    ("op-set-no-equals", {}, OP + ["--set", "dim"], {}),
    ("op-pooling-inf", {}, OP + ["--set", "pooling=inf"], {}),
    ("op-dtype-bogus", {}, OP + ["--set", "dtype=fp99"], {}),
    ("op-nodes-0", {}, OP + ["--nodes", "0"], {}),
    ("op-cost-guard", {}, OP + ["--set", "global_batch=262144", "--mode", "full", "--nodes", "4"], {}),
    # --- calibration inputs (calibrate / validate) ---
    ("validate-unknown-dtype", {"held.csv": held_col("dtype", "fp99")}, VAL, {}),
    ("validate-huge-grid", {"held.csv": held_col("grid", "1e15")}, VAL, {}),
    ("validate-unknown-kernel", {"held.csv": held_col("kernel", "warp_drive")}, VAL, {}),
    ("validate-unknown-variant", {"held.csv": held_col("variant", "turbo")}, VAL, {}),
    ("validate-nan-median", {"held.csv": held_col("median_s", "nan")}, VAL, {}),
    ("validate-inf-flops", {"held.csv": held_col("flops", "inf")}, VAL, {}),
    ("validate-out-is-file", {}, VAL + ["--out", "{O}"], {"O": "file"}),
    ("calibrate-deep-json", {"trace.json": '{"traceEvents": [' + "[" * 50000 + "]" * 50000 + "]}"},
     ["calibrate", "{I}/trace.json", "--out", "{O}"], {}),
    ("calibrate-out-is-dir", {}, ["calibrate", "{H}", "--out", "{O}"], {"O": "dir"}),
    ("calibrate-compute-units-0", {}, ["calibrate", "{H}", "--out", "{O}", "--compute-units", "0"], {}),
]


def test_the_table_is_large_and_covers_every_command():
    assert len(CASES) >= 60
    assert len({c[0] for c in CASES}) == len(CASES)
    commands = {c[2][0] for c in CASES}
    assert commands >= {"collective", "run", "sweep", "op", "validate", "calibrate"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_rejected_cleanly(case, inputs, tmp_path, capsys):
    _name, files, argv, pre = case
    for fname, text in files.items():
        (inputs / fname).write_text(text, encoding="utf-8", errors="surrogateescape")
    out = tmp_path / "out"
    if pre.get("O") == "file":
        out.write_text("precious\n")
    elif pre.get("O") == "dir":
        out.mkdir()
    subs = {"{T}": inputs / "topo.yaml", "{M}": inputs / "model.yaml", "{H}": inputs / "held.csv", "{O}": out,
            "{I}": inputs}
    args = []
    for a in argv:
        for k, v in subs.items():
            a = a.replace(k, str(v))
        args.append(a)
    before = snapshot(tmp_path)
    rc, _stdout, err = run_main(args, capsys)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and len(err) < 1000
    assert snapshot(tmp_path) == before  # nothing written, nothing left behind
    if pre.get("O") == "file":
        assert out.read_text() == "precious\n"
