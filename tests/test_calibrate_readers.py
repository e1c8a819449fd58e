"""Readers of calibration inputs: real-format samples, and corrupt / truncated / foreign input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.calibrate.build import read_inputs
from simfuse.calibrate.detect import KERNEL_TRACE, NCCL_TESTS, TORCH_PROFILER, detect_format
from simfuse.calibrate.kernel_trace import iter_kernel_runs, read_kernel_runs, write_kernel_trace
from simfuse.calibrate.nccl_tests import read_nccl_tests
from simfuse.calibrate.torch_trace import iter_trace_events, nccl_collective, read_torch_trace
from simfuse.errors import TraceError

DATA = Path(__file__).parent / "data" / "calibrate"


def _rows(n_runs=2, grid=6, slots=3):
    rows = []
    for r in range(n_runs):
        launch = 1_700_000_000_000_000_000 + r * 10**7
        for p in range(grid):
            wave, slot = divmod(p, slots)
            start = launch + 5000 + wave * 1000
            rows.append({"run_id": f"emb-a2a-fused-{r:04d}", "kernel": "embedding_all_to_all", "variant": "fused",
                         "backend": "emulated", "world_size": 4, "rank": 0, "dtype": "fp32",
                         "shape": "bags=24;dim=128;mode=sum;pooling=32;rows=1000;tables=1", "grid": grid, "num_warps": 4,
                         "launch_ns": launch, "kernel_end_ns": start + 3000, "program_id": p, "start_ns": start,
                         "end_ns": start + 1000, "smid": slot, "flops_per_program": 0.0,
                         "bytes_per_program": 65536.0})
    return rows


# ---------------------------------------------------------------- kernel traces

def test_kernel_trace_reader_summarises_runs(tmp_path):
    path = tmp_path / "trace.csv.gz"
    write_kernel_trace(path, _rows())
    assert detect_format(path) == KERNEL_TRACE
    runs = read_kernel_runs(path, chunk_rows=4)  # runs span chunks
    assert len(runs) == 2
    r = runs[0]
    assert r.programs == 6 and r.max_concurrency == 3 and r.compute_units_seen == 3
    assert r.launch_latency_s == pytest.approx(5e-6)
    assert r.kernel_time_s == pytest.approx(7e-6)
    assert r.wg_duration_median_s == pytest.approx(1e-6)
    assert r.shape == "bags=24;dim=128;mode=sum;pooling=32;rows=1000;tables=1"
    assert r.bins == [(3, 6, pytest.approx(1e-6), 0.0, 65536.0)]


def _write_lines(path: Path, lines: list[str], gz: bool = False) -> Path:
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def _trace_lines(tmp_path) -> list[str]:
    p = tmp_path / "base.csv"
    write_kernel_trace(p, _rows())
    return p.read_text().splitlines()


@pytest.mark.parametrize("line_no, bad, message", [
    (4, lambda s: s.replace("1700000000000005000", "17x0"), "start_ns"),
    (6, lambda s: ",".join(s.split(",")[:7]), "line 6"),
    (3, lambda s: s.replace(",fused,", ",,"), "variant"),
])
def test_kernel_trace_bad_rows_name_file_and_line(tmp_path, line_no, bad, message):
    lines = _trace_lines(tmp_path)
    lines[line_no - 1] = bad(lines[line_no - 1])
    path = _write_lines(tmp_path / "bad.csv", lines)
    with pytest.raises(TraceError) as err:
        read_kernel_runs(path)
    assert str(path) in str(err.value) and f"line {line_no}" in str(err.value)
    assert message in str(err.value)


def test_kernel_trace_end_before_start(tmp_path):
    rows = _rows()
    rows[4]["end_ns"] = rows[4]["start_ns"] - 1
    path = tmp_path / "t.csv"
    write_kernel_trace(path, rows)
    with pytest.raises(TraceError, match=r"line 7: end_ns is before start_ns"):
        read_kernel_runs(path)


def test_kernel_trace_truncated_gzip(tmp_path):
    path = tmp_path / "t.csv.gz"
    write_kernel_trace(path, _rows(n_runs=50, grid=60))
    data = path.read_bytes()
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError) as err:
        read_kernel_runs(cut)
    assert str(cut) in str(err.value) and "line" in err.value.field


def test_kernel_trace_truncated_last_line(tmp_path):
    lines = _trace_lines(tmp_path)
    lines[-1] = lines[-1][:25]
    path = _write_lines(tmp_path / "t.csv", lines)
    with pytest.raises(TraceError, match=rf"line {len(lines)}"):
        read_kernel_runs(path)


def test_kernel_trace_foreign_csv(tmp_path):
    path = _write_lines(tmp_path / "other.csv", ["a,b,c", "1,2,3"])
    with pytest.raises(TraceError, match="unrecognised input"):
        detect_format(path)
    with pytest.raises(TraceError, match=r"line 1: not a simfuse kernel trace: missing column"):
        list(iter_kernel_runs(path))


# ---------------------------------------------------------------- nccl-tests

def test_nccl_tests_single_host_all_reduce():
    path = DATA / "all_reduce_perf_1node.log"
    assert detect_format(path) == NCCL_TESTS
    log = read_nccl_tests(path)
    assert log.collective == "all_reduce" and log.ranks == 8 and log.level == "scale_up"
    assert log.devices == ["NVIDIA H100 80GB HBM3"]
    assert log.rows[0].size_bytes == 8 and log.rows[-1].size_bytes == 1 << 30
    assert all(r.time_inplace_s is not None for r in log.rows)


def test_nccl_tests_collective_inferred_from_content(tmp_path):
    # No name hint: busbw/algbw = (n-1)/n with redop "none" is an all-gather or an all-to-all, which the table
    # cannot tell apart (same ratio, same count column): refused with what to do, read once named
    text = (DATA / "alltoall_perf_1node.log").read_text()
    path = tmp_path / "run1.txt"
    path.write_text(text)
    with pytest.raises(TraceError, match="all_gather or an alltoall log.*--collective"):
        read_nccl_tests(path)
    assert read_nccl_tests(path, collective="alltoall").collective == "all_to_all"
    assert read_nccl_tests(path, collective="all_gather").collective == "all_gather"
    # a file name that says which (not only nccl-tests' binary name) settles it
    for name, coll in (("msccl_a2a_2x8.txt", "all_to_all"), ("allgather_cluster.log", "all_gather"),
                       ("alltoall_perf_1node.log", "all_to_all"), ("all_gather_perf_run3.txt", "all_gather")):
        (tmp_path / name).write_text(text)
        assert read_nccl_tests(tmp_path / name).collective == coll, name
    path.write_text((DATA / "nccl_2nodes.log").read_text())
    log = read_nccl_tests(path)
    assert log.collective == "all_reduce" and log.ranks == 16 and log.level == "scale_out"
    assert log.hosts == ["dgx-h100-01", "dgx-h100-02"]


def test_nccl_tests_fabric_fit_from_samples():
    from simfuse.calibrate.build import fabric_section

    logs = [read_nccl_tests(DATA / n) for n in ("all_reduce_perf_1node.log", "alltoall_perf_1node.log",
                                                  "nccl_2nodes.log")]
    fabric, points = fabric_section(logs)
    up = fabric["scale_up"]
    assert up["use"] == "alltoall" and up["ranks"] == 8 and up["hosts"] == 1
    # The samples were generated from these parameters with 1% noise (tests/data/calibrate/README.md).
    assert up["collectives"]["alltoall"]["alpha_s"] == pytest.approx(18e-6, rel=0.03)
    assert up["collectives"]["alltoall"]["beta_bytes_per_s"] == pytest.approx(330e9, rel=0.03)
    assert up["collectives"]["all_reduce"]["alpha_s"] == pytest.approx(0.9e-6, rel=0.05)
    assert up["collectives"]["all_reduce"]["beta_bytes_per_s"] == pytest.approx(360e9, rel=0.03)
    out = fabric["scale_out"]["collectives"]["all_reduce"]
    assert out["beta_bytes_per_s"] == pytest.approx(45e9, rel=0.03)
    assert out["fit"]["points"] == 28 and out["fit"]["rel_residual_rms"] < 0.03
    assert len(points) == sum(len(lg.rows) for lg in logs)


def test_nccl_tests_truncated_row(tmp_path):
    lines = (DATA / "all_reduce_perf_1node.log").read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if line.strip().startswith("1024 ")) + 1
    lines = lines[:n]
    lines[-1] = lines[-1][:60]
    path = _write_lines(tmp_path / "all_reduce_perf.log", lines)
    log = read_nccl_tests(path)  # a run cut off in its last row: the complete rows are kept, the cut one noted
    assert log.rows[-1].size_bytes == 512 and any(f"line {n}: last row cut off" in x for x in log.notes)
    middle = _write_lines(tmp_path / "all_reduce_perf2.log", lines[:-1] + [lines[-1]] + lines[n - 3:n - 1])
    with pytest.raises(TraceError, match=rf"{middle}: line {n}: expected 13 columns"):
        read_nccl_tests(middle)  # a malformed row followed by more rows is an error


def test_nccl_tests_garbage_number_and_no_table(tmp_path):
    lines = (DATA / "alltoall_perf_1node.log").read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("4096 "))
    lines[i] = lines[i].replace("4096", "40x6", 1)
    path = _write_lines(tmp_path / "alltoall_perf.log", lines)
    with pytest.raises(TraceError, match=rf"line {i + 1}: column 'size'"):
        read_nccl_tests(path)
    header_only = _write_lines(tmp_path / "a.log", lines[:3])  # nccl-tests' preamble, then nothing: crashed
    with pytest.raises(TraceError, match="this run produced no results: the log ends before the column header"):
        read_nccl_tests(header_only)
    foreign = _write_lines(tmp_path / "b.log", ["hello", "world"])
    with pytest.raises(TraceError, match="no '#  size  count  type"):
        read_nccl_tests(foreign)


# ---------------------------------------------------------------- PyTorch profiler

@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    path = tmp_path_factory.mktemp("torch") / "cpu_trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        x = torch.randn(64, 32)
        for _ in range(3):
            x @ x.T
        w = torch.randn(100, 16)
        idx = torch.randint(0, 100, (40,))
        torch.nn.functional.embedding_bag(idx, w, torch.arange(0, 40, 4))
    prof.export_chrome_trace(str(path))
    return path


def test_torch_cpu_trace_ops_by_shape(cpu_trace):
    assert detect_format(cpu_trace) == TORCH_PROFILER
    stats = read_torch_trace(cpu_trace)
    mm = [s for s in stats if s.name in ("aten::mm", "aten::matmul") and s.input_dims]
    assert mm and any(s.count == 3 and json.loads(s.input_dims)[0] == [64, 32] for s in mm)
    assert any(s.name == "aten::embedding_bag" for s in stats)
    assert all(s.median_s >= 0 for s in stats)


def test_torch_trace_gzip_and_streaming_blocks(cpu_trace, tmp_path, monkeypatch):
    import simfuse.calibrate.torch_trace as tt

    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(cpu_trace.read_bytes()))
    monkeypatch.setattr(tt, "BLOCK_CHARS", 37)  # events straddle many blocks
    meta: dict = {}
    events = list(iter_trace_events(gz, meta))
    assert events == json.loads(cpu_trace.read_text())["traceEvents"]
    assert "deviceProperties" in meta or "schemaVersion" in meta


def test_torch_trace_nccl_kernels_with_sizes():
    stats = read_torch_trace(DATA / "torch_nccl_kineto.json")
    ar = [s for s in stats if s.collective == "all_reduce" and s.cat == "kernel"]
    assert len(ar) == 1 and ar[0].count == 2 and ar[0].size_bytes == 16777216 * 4 and ar[0].group_size == 8
    assert ar[0].median_s == pytest.approx(351e-6)
    a2a = [s for s in stats if s.collective == "alltoall"]
    assert a2a and a2a[0].size_bytes == 1048576 * 2
    gemm = [s for s in stats if s.cat == "kernel" and "gemm" in s.name]
    assert gemm[0].input_dims == "[[4096,4096],[4096,4096]]" and gemm[0].count == 2
    assert nccl_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)") == "all_reduce"
    assert nccl_collective("void at::native::kernel()") == ""


@pytest.mark.parametrize("mutate, where", [
    (lambda t: t[: len(t) * 2 // 3], "traceEvents["),                 # truncated mid-array
    (lambda t: t.replace('"dur": 12.5', '"dur": 12..5', 1), "traceEvents[0]"),  # corrupt number
    (lambda t: t.replace('"dur": 196.0', '"dur": "x"', 1), "traceEvents[4].dur"),  # wrong type
])
def test_torch_trace_corrupt_names_key(tmp_path, mutate, where):
    text = (DATA / "torch_nccl_kineto.json").read_text()
    path = tmp_path / "bad.json"
    path.write_text(mutate(text))
    with pytest.raises(TraceError) as err:
        read_torch_trace(path)
    assert str(path) in str(err.value) and where in str(err.value)


def test_foreign_json_and_binary(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"name": "x", "values": [1, 2, 3]}))
    with pytest.raises(TraceError, match="traceEvents: missing"):
        read_torch_trace(path)
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TraceError, match="unrecognised input"):
        read_inputs([binary])
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(TraceError, match="empty file"):
        read_inputs([empty])


def test_sequence_timer_trace_rejected(tmp_path):
    rows = _rows(n_runs=1)
    for i, r in enumerate(rows):  # what simfuse.kernels writes in the interpreter: ticks, smid -1
        r.update(launch_ns=0, start_ns=1 + 2 * i, end_ns=2 + 2 * i, kernel_end_ns=99, smid=-1)
    path = tmp_path / "seq.csv"
    write_kernel_trace(path, rows)
    with pytest.raises(TraceError, match="sequence' timer"):
        read_kernel_runs(path)


def test_reads_what_simfuse_kernels_writes(tmp_path):
    """The writer of the kernels package (plain Python) and this reader agree on the v1 format."""
    kt = pytest.importorskip("simfuse.kernels.trace")
    base = 1_700_000_000_000_000_000
    tr = kt.KernelTrace(run_id="h200-gemv-0000", kernel="gemv_all_reduce", variant="fused", backend="emulated",
                        world_size=4, rank=0, dtype="bf16", shape=kt.format_shape({"n": 4096, "k": 2048}),
                        num_warps=4, launch_ns=base, kernel_end_ns=base + 20_000,
                        start_ns=[base + 5000 + 10 * i for i in range(64)],
                        end_ns=[base + 15_000 + 10 * i for i in range(64)], smid=list(range(64)),
                        flops_per_program=1e6, bytes_per_program=[2e5] * 64)
    path = tmp_path / "kt.csv.gz"
    kt.write_trace(path, [tr])
    (run,) = read_kernel_runs(path)
    assert (run.grid, run.programs, run.max_concurrency, run.compute_units_seen) == (64, 64, 64, 64)
    assert run.launch_latency_s == pytest.approx(5e-6) and run.kernel_time_s == pytest.approx(15.63e-6)
    assert run.shape == "k=2048;n=4096" and run.bytes_per_program == 2e5


def test_kernel_trace_missing_programs(tmp_path):
    """A file cut at a line boundary parses, but its last launch lacks programs: named, not fitted."""
    lines = _trace_lines(tmp_path)
    path = _write_lines(tmp_path / "cut.csv", lines[:-2])
    with pytest.raises(TraceError, match=r"run emb-a2a-fused-0001: 4 program rows for grid 6"):
        read_kernel_runs(path)


_SAMPLES = ("kernel.csv", "all_reduce_perf_1node.log", "torch_nccl_kineto.json")


@pytest.fixture(scope="module")
def fuzz_sources(tmp_path_factory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("fuzz")
    write_kernel_trace(tmp / "kernel.csv", _rows(n_runs=2, grid=8))
    out = {"kernel.csv": (tmp / "kernel.csv").read_bytes()}
    for name in _SAMPLES[1:]:
        out[name] = (DATA / name).read_bytes()
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(_SAMPLES), data=st.data())
def test_corrupted_inputs_raise_only_trace_errors(fuzz_sources, tmp_path, name, data):
    """Truncated, garbled or spliced inputs either still parse or raise a SpecError naming the file."""
    from simfuse.calibrate.build import build_profile
    from simfuse.errors import SpecError

    raw = bytearray(fuzz_sources[name])
    op = data.draw(st.sampled_from(["truncate", "garble", "insert", "gzip_truncate"]))
    pos = data.draw(st.integers(0, len(raw) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=6).map(lambda b: bytes(c % 64 + 32 for c in b)))
    if op == "truncate":
        raw = raw[:pos]
    elif op == "garble":
        raw[pos:pos + len(junk)] = junk
    elif op == "insert":
        raw[pos:pos] = junk
    else:
        z = gzip.compress(bytes(raw))
        raw = bytearray(z[: pos * len(z) // len(raw)])
    path = tmp_path / f"x_{name}"
    path.write_bytes(bytes(raw))
    try:
        build_profile(read_inputs([path]))
    except SpecError as exc:
        assert exc.source.startswith(str(tmp_path)) or exc.source == "<inputs>"


# ---------------------------------------------------------------- review: odd inputs that slipped through

def test_kernel_trace_rank_outside_world_size_and_short_row_message(tmp_path):
    rows = _rows()
    rows[2]["rank"] = 9  # world_size 4
    path = tmp_path / "rank.csv"
    write_kernel_trace(path, rows)
    with pytest.raises(TraceError, match=r"rank\.csv: line 5: rank 9 outside \[0, world_size = 4\)"):
        read_kernel_runs(path)
    rows = _rows()
    for r in rows:
        r["world_size"] = 0
    write_kernel_trace(path, rows)
    with pytest.raises(TraceError, match=r"line 3: rank 0 outside \[0, world_size = 0\)"):
        read_kernel_runs(path)
    lines = _trace_lines(tmp_path)
    lines[3] = lines[3].rsplit(",", 1)[0]  # one field short: bytes_per_program empty
    with pytest.raises(TraceError, match=r"line 4: column 'bytes_per_program': empty") as err:
        read_kernel_runs(_write_lines(tmp_path / "short.csv", lines))
    assert "np.float64" not in str(err.value)
    lines = _trace_lines(tmp_path)
    lines[3] = lines[3].replace(",65536.0", ",-65536.0")
    with pytest.raises(TraceError, match=r"line 4: column 'bytes_per_program': -65536.0 is not") as err:
        read_kernel_runs(_write_lines(tmp_path / "neg.csv", lines))


def test_kernel_trace_smid_beyond_any_gpu_is_refused(tmp_path):
    # an smid of 100,000 became device.compute_units 100,001 in the profile
    rows = _rows()
    rows[1]["smid"] = 100_000
    path = tmp_path / "smid.csv"
    write_kernel_trace(path, rows)
    with pytest.raises(TraceError, match=r"smid: 100000 is not a streaming multiprocessor id"):
        read_kernel_runs(path)


def test_nccl_tests_negative_or_fractional_size_is_refused_not_skipped(tmp_path):
    lines = (DATA / "all_reduce_perf_1node.log").read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("1024 "))
    for bad in ("-1024 ", "1024.5 "):
        lines2 = list(lines)
        lines2[i] = lines2[i].replace("1024 ", bad, 1)
        path = _write_lines(tmp_path / "all_reduce_perf.log", lines2)
        # a row that is not the last one: an error naming the line (before, "-1024" was silently dropped)
        with pytest.raises(TraceError, match=rf"line {i + 1}: size must be a whole number of bytes"):
            read_nccl_tests(path)


@pytest.mark.parametrize("dur", ["NaN", "Infinity", "-Infinity"])
def test_torch_trace_non_finite_duration_names_key(tmp_path, dur):
    from simfuse.calibrate.dense import read_dense_samples
    from simfuse.calibrate.kineto_nccl import kineto_nccl_samples

    text = (DATA / "torch_nccl_kineto.json").read_text()
    path = tmp_path / "bad.json"
    # a GEMM kernel (event 4) and an NCCL kernel (event 6); json.dumps writes NaN and Infinity like this.  Before,
    # NaN passed the check (NaN < 0 is False) and ended in a traceback of the fit
    for old, index, readers in (('"dur": 196.0', 4, (read_torch_trace, read_dense_samples)),
                                ('"dur": 350.0', 6, (read_torch_trace, kineto_nccl_samples))):
        assert old in text
        path.write_text(text.replace(old, f'"dur": {dur}', 1))
        for reader in readers:
            with pytest.raises(TraceError, match=rf"traceEvents\[{index}\]\.dur: expected a finite non-negative"):
                reader(path)
