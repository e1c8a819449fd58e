"""Hostile inputs to the surfaces added after the first fuzz pass: plans, Chakra traces, campaigns, logs, the API
and ``run --out``.  Each class of failure has its cases:

* tiny inputs whose sizes would expand before they are checked (plan rank ranges, Chakra rank numbering, rank
  counts of fit-fabric, measurement grids);
* special files and gzip bombs (run in a child process under a wall-time kill and an address-space limit);
* Chakra traces that would run wrong (a missing or non-regular rank file, a send without its receive or with
  another size, a deadlock, GPUs per node);
* work the cost guard must price (refusals here; the estimates against measured times in
  ``test_guard_estimates``);
* inputs that raised tracebacks (5,000-digit numbers in JSON, table names such as ``t²``, ``--set slice_wgs=1e19``).

In-process cases assert exit 2, one line on stderr naming the file or argument, and no traceback.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from . import chakra_cases as C
from .conftest import ROOT, run_main
from .harness import run_cli_limited
from .nccl_cases import all_reduce_log

TOPO = ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"
MODEL = ROOT / "models" / "dlrm_synthetic.yaml"
LLM = ROOT / "models" / "llm_tp_dp_70b.yaml"  # 2,002 simulations of ~2 s: over the 30 min limit
HELD = ROOT / "experiments" / "results" / "h200_kernel_heldout.csv"
RUN = ["run", "--model", MODEL, "--topology", TOPO]
D = "1" + "0" * 4999  # a 5,000-digit number


def _plan(d: Path, body: str) -> Path:
    p = d / "plan.csv"
    p.write_text("table,sharding,ranks\n" + body)
    return p


def _plan_all(first: str) -> str:
    return first + "".join(f"t{t},table_wise,{t}\n" for t in range(1, 8))


def _held_grid(d: Path, grid: str) -> Path:
    lines = HELD.read_text().splitlines()[:2]
    head = lines[0].split(",")
    import csv
    import io

    row = next(csv.reader(io.StringIO(lines[1])))
    row[head.index("grid")] = grid
    buf = io.StringIO()
    csv.writer(buf).writerows([head, row])
    p = d / "held.csv"
    p.write_text(buf.getvalue())
    return p


def _chakra(make):
    def build(d: Path):
        return ["run", "--chakra", make(d / "trace"), "--topology", TOPO]
    return build


def _missing_rank(d: Path) -> Path:
    t = C.two_rank_simfuse_trace(d)
    (t / "tr.1.et").unlink()
    return t


def _rank_is_dev_zero(d: Path) -> Path:
    t = C.two_rank_simfuse_trace(d)
    (t / "tr.1.et").unlink()
    os.symlink("/dev/zero", t / "tr.1.et")
    return t


def _billion_rank(d: Path) -> Path:
    return C.write(d, {0: (C.meta(), [C.comp(1)]), 1_000_000_000: (C.meta(), [C.comp(1)])})


def _comm_group_digits(d: Path) -> Path:
    t = C.two_rank_simfuse_trace(d)
    (t / "tr.json").write_text('{"1": [' + D + "]}")
    return t


def _twelve_ranks(d: Path) -> Path:
    return C.write(d, {r: (C.meta(), [C.comp(1), C.all_reduce(2, 1 << 20, deps=[1])]) for r in range(12)})


def _fit(d: Path, text: str, *extra) -> list:
    p = d / "nccl.log"
    p.write_text(text)
    return ["fit-fabric", p, "--topology", TOPO, *extra]


def _kineto_digits(d: Path) -> list:
    p = d / "trace.json"
    p.write_text('{"traceEvents": [{"name": "ncclKernel_AllReduce", "ph": "X", "ts": ' + D + ', "dur": 1}]}')
    return ["calibrate", p, "--out", d / "prof.yaml"]


# (id, build(dir) -> argv, text the one-line error must contain)
CASES = [
    # --- tiny inputs expanded before they were checked ---
    ("plan-rank-range-billion", lambda d: RUN + ["--plan", _plan(d, _plan_all("t0,row_wise,0-1000000000\n"))],
     "out of range"),
    ("plan-rank-huge-number", lambda d: RUN + ["--plan", _plan(d, _plan_all(f"t0,table_wise,{D}\n"))],
     "cannot parse ranks"),
    ("chakra-rank-file-billion", _chakra(_billion_rank), "(999,999,999 in all)"),
    ("fit-fabric-ranks-billion", lambda d: _fit(d, all_reduce_log(8), "--ranks", "1000000000"), "--ranks"),
    ("fit-fabric-log-nranks-billion", lambda d: _fit(d, "node-0:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks "
                                                     "1000000000 cudaDev 0 - Init COMPLETE\n" + all_reduce_log(8)),
     "1000000000"),
    ("measurements-grid-over-max", lambda d: ["validate", "--topology", TOPO, "--measurements",
                                              _held_grid(d, str(2**26))], "grid"),
    # --- Chakra traces that ran wrong ---
    ("chakra-missing-rank-file", _chakra(_missing_rank), "missing rank files [1]"),
    ("chakra-rank-file-is-dev-zero", _chakra(_rank_is_dev_zero), "not a regular file"),
    ("chakra-send-recv-sizes-differ", _chakra(C.mismatched_sizes), "carries 1048576 bytes"),
    ("chakra-send-without-recv", _chakra(C.unmatched_send), "no matching receive"),
    ("chakra-deadlock", _chakra(C.receive_first_deadlock), "deadlocks"),
    ("chakra-ranks-do-not-fill-nodes", _chakra(_twelve_ranks), "do not fill nodes of 8"),
    ("chakra-p2p-classes", lambda d: _chakra(lambda x: C.ring(x, 4, 2))(d) + ["--sim-mode", "classes"],
     "--sim-mode full"),
    # --- work the guard must price ---
    ("guard-llm-mc-1000-draws", lambda d: ["run", "--model", LLM, "--topology", TOPO, "--set", "uncertainty=mc",
                                           "--set", "uncertainty_draws=1000"], "cost guard"),
    ("guard-collective-full-1000-nodes", lambda d: ["collective", "--topology", TOPO, "--op", "all_to_all",
                                                    "--size", "1MiB", "--mode", "full", "--nodes", "1000"],
     "cost guard"),
    ("guard-fit-fabric-many-sizes", lambda d: _fit(d, all_reduce_log(60000)), "cost guard"),  # ~50 min of fitting
    # --- tracebacks ---
    ("plan-table-superscript", lambda d: RUN + ["--plan", _plan(d, _plan_all("t\u00b2,table_wise,0\n"))],
     "unknown table"),
    ("plan-table-5000-digits", lambda d: RUN + ["--plan", _plan(d, _plan_all(f"t{D},table_wise,0\n"))],
     "unknown table"),
    ("torchrec-json-5000-digits", lambda d: RUN + ["--plan", _w(d / "p.json", '{"t0": {"sharding_type": '
                                                                 '"table_wise", "ranks": [' + D + "]}}")],
     "malformed JSON"),
    ("torchrec-text-table-5000-digits", lambda d: RUN + ["--plan", _w(d / "p.txt", (
        "param | sharding type | compute kernel | ranks\n--- | --- | --- | ---\n"
        f"t{D} | table_wise | fused | [0]\n"))], "unknown table"),
    ("chakra-comm-group-5000-digits", _chakra(_comm_group_digits), "not valid JSON"),
    ("kineto-5000-digits", _kineto_digits, "invalid JSON"),
    ("set-slice-wgs-1e19", lambda d: RUN + ["--set", "slice_wgs=1e19"], "slice_wgs"),
    ("sweep-persistent-grid-1e19", lambda d: ["sweep", "--model", MODEL, "--topology", TOPO, "--out", d / "o",
                                              "--nodes", "1", "--set", "persistent_grid=1e19"], "persistent_grid"),
]


def _w(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def test_the_table_covers_every_class():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 24
    for prefix in ("plan-", "chakra-", "fit-fabric-", "guard-", "torchrec-", "measurements-", "set-"):
        assert any(i.startswith(prefix) for i in ids), prefix


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bounded_input_is_refused_cleanly(case, tmp_path, capsys):
    _name, build, text = case
    rc, _out, err = run_main([str(a) for a in build(tmp_path)], capsys)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert text in err, err


# ------------------------------------------- special files and bombs: a child process under wall and memory limits
def _bomb(p: Path, raw_mb: int = 300) -> Path:
    p.write_bytes(gzip.compress(b"\0" * (raw_mb << 20), compresslevel=1))
    return p


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _long_line_log(d: Path) -> Path:
    p = d / "nccl.log"
    p.write_text(all_reduce_log(8).replace("# Using devices", "# Using devices " + "-np 8 " * 50_000, 1))
    return p


LIMITED = [
    ("fifo-as-plan", lambda d: RUN + ["--plan", _fifo(d / "plan.csv")], "FIFO"),
    ("fifo-as-topology", lambda d: ["collective", "--topology", _fifo(d / "t.yaml"), "--op", "all_reduce",
                                    "--size", "1MiB"], "FIFO"),
    ("fifo-as-campaign", lambda d: ["validate", "--campaign", _fifo(d / "c.csv"), "--out", d / "o"], "FIFO"),
    ("fifo-as-chakra-rank", lambda d: ["run", "--chakra", _fifo_rank(d), "--topology", TOPO], "FIFO"),
    ("fifo-as-nccl-log", lambda d: ["fit-fabric", _fifo(d / "x.log"), "--topology", TOPO], "regular file"),
    ("dev-zero-as-plan", lambda d: RUN + ["--plan", "/dev/zero"], "device"),
    ("dev-zero-as-campaign", lambda d: ["validate", "--campaign", "/dev/zero", "--out", d / "o"], "device"),
    ("gzip-bomb-as-chakra", lambda d: ["run", "--chakra", _bomb_rank(d), "--topology", TOPO], "bomb"),
    ("gzip-bomb-as-campaign", lambda d: ["validate", "--campaign", _bomb(d / "c.csv.gz"), "--out", d / "o"], "bomb"),
    ("gzip-bomb-as-plan", lambda d: RUN + ["--plan", _bomb(d / "plan.csv")], "bomb"),
    ("nccl-log-300kb-line", lambda d: ["fit-fabric", _long_line_log(d), "--topology", TOPO], "characters"),
]


def _fifo_rank(d: Path) -> Path:
    t = C.two_rank_simfuse_trace(d / "tr")
    (t / "tr.1.et").unlink()
    _fifo(t / "tr.1.et")
    return t


def _bomb_rank(d: Path) -> Path:
    t = d / "tr"
    t.mkdir()
    _bomb(t / "tr.0.et")
    return t


@pytest.mark.parametrize("case", LIMITED, ids=[c[0] for c in LIMITED])
def test_special_files_and_bombs_end_cleanly_within_limits(case, tmp_path):
    _name, build, text = case
    res = run_cli_limited(build(tmp_path), timeout_s=60, mem_bytes=3 << 30)
    assert not res.hung, "killed at the wall-time limit (blocked on a FIFO or reading forever?)"
    assert res.returncode == 0, res.stderr[-2000:]  # the child itself ended (no MemoryError traceback)
    got = res.json()
    assert got["rc"] == 2, got
    assert "Traceback" not in got["err"] and text in got["err"], got


def test_a_250k_line_torchrec_text_plan_parses_in_linear_time(tmp_path):
    """One table with 250,000 shard lines (the shard list was rebuilt per line: quadratic); it is refused for its
    shard count, within the limits."""
    rows = 250_000
    text = ("param | sharding type | compute kernel | ranks\n--- | --- | --- | ---\n"
            "t0 | row_wise | fused | [0, 1, 2, 3, 4, 5, 6, 7]\n\n"
            "param | shard offsets | shard sizes | placement\n--- | --- | --- | ---\n"
            + "".join(f"t0 | [{i * 4}, 0] | [4, 64] | rank:{i % 8}/cuda:{i % 8}\n" for i in range(rows)))
    p = _w(tmp_path / "plan.txt", text)
    res = run_cli_limited(RUN + ["--plan", p], timeout_s=60)
    assert not res.hung and res.returncode == 0, res.stderr[-2000:]
    got = res.json()
    assert got["rc"] == 2 and "Traceback" not in got["err"], got


# ------------------------------------------------------------------------------ the Python API: the CLI's bounds
@pytest.mark.parametrize("call,argument", [
    (lambda api: api.collective(TOPO, 1, "all_reduce", float("nan")), "size_bytes"),
    (lambda api: api.collective(TOPO, 1, "all_reduce", float("inf")), "size_bytes"),
    (lambda api: api.collective(TOPO, 10**9, "all_reduce", 1024), "nodes"),
    (lambda api: api.collective(TOPO, 1000, "all_to_all", 1 << 20, mode="full"), "force"),
    (lambda api: api.collective(TOPO, 1, "all_reduce", 1024, gpus_per_node=0), "gpus_per_node"),
    (lambda api: api.run(MODEL, TOPO, 10**9), "nodes"),
    (lambda api: api.run(MODEL, TOPO, 1, workers=0), "workers"),
    (lambda api: api.run(LLM, TOPO, 1, uncertainty="mc", uncertainty_draws=1000), "force"),
    (lambda api: api.run(MODEL, TOPO, 1, slice_wgs=1e19), "slice_wgs"),
    (lambda api: api.op("embedding_all_to_all", TOPO, 10**9), "nodes"),
    (lambda api: api.sweep(MODEL, TOPO, [1, 10**9], "/nonexistent/never-written"), "nodes"),
])
def test_the_api_checks_what_the_cli_checks(call, argument):
    import simfuse.api as api
    from simfuse.errors import SimfuseError

    with pytest.raises(SimfuseError) as err:
        call(api)
    assert f": {argument}:" in str(err.value), str(err.value)


# ---------------------------------------------------------------------------------------------- run --out
def _run_out(out: Path, capsys, *extra) -> int:
    rc, _o, err = run_main([str(a) for a in RUN + ["--out", out, "--set", "uncertainty=none", *extra]], capsys)
    assert rc in (0, 2), err
    return rc


def test_run_out_leaves_no_outputs_of_an_earlier_run(tmp_path, capsys):
    out = tmp_path / "o"
    assert _run_out(out, capsys, "--trace") == 0
    (out / "plan.csv").write_text("table,sharding,ranks\nt0,table_wise,0\n")  # as a planned run writes it
    assert {"trace.json", "plan.csv", "summary.csv"} <= set(os.listdir(out))
    assert _run_out(out, capsys) == 0  # no --trace, no plan: both were the earlier run's
    assert sorted(os.listdir(out)) == ["breakdown.csv", "summary.csv"]


def test_run_out_is_locked_like_a_sweep(tmp_path, capsys):
    from simfuse.sweeps import SweepLock

    out = tmp_path / "o"
    out.mkdir()
    lock = SweepLock(out)
    lock.acquire()  # another run or sweep holds the directory
    try:
        rc, _o, err = run_main([str(a) for a in RUN + ["--out", out, "--set", "uncertainty=none"]], capsys)
    finally:
        lock.release()
    assert rc == 2 and "in use by another run or sweep" in err, err
    assert os.listdir(out) == []  # nothing written beside the holder's files
