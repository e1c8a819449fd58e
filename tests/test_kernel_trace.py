"""Kernel trace format (docs/trace_format.md): writer/reader on CPU, and traced interpreter launches."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported: before any triton import

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from simfuse.kernels import (  # noqa: E402
    EmbeddingConfig,
    EmulatedGroup,
    GemmConfig,
    GemvConfig,
    KernelTrace,
    TraceRecorder,
    embedding_all_to_all,
    gemm_all_to_all,
    gemm_compute,
    gemv_all_reduce,
    moe_routing,
    read_trace,
    write_trace,
)
from simfuse.kernels.trace import COLUMNS, FORMAT_LINE, format_shape, parse_shape  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "trace_format.md"


def _trace(n=3, **kw):
    base = dict(run_id="x-0001", kernel="gemv_all_reduce", variant="fused", backend="emulated", world_size=2, rank=0,
                dtype="bf16", shape="k=64;n=128", num_warps=4, launch_ns=100, kernel_end_ns=900,
                start_ns=list(range(200, 200 + n)), end_ns=list(range(500, 500 + n)), smid=[1] * n,
                flops_per_program=10.0, bytes_per_program=[float(i) for i in range(n)])
    base.update(kw)
    return KernelTrace(**base)


def test_columns_match_the_documented_format():
    documented = re.findall(r"^\| `(\w+)` \|", DOC.read_text(), flags=re.M)
    assert tuple(documented) == COLUMNS


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz"])
def test_write_read_roundtrip(tmp_path, name):
    path = tmp_path / name
    n = write_trace(path, [_trace(3), _trace(2, run_id="x-0002", variant="compute")])
    assert n == 5
    rows = read_trace(path)
    assert len(rows) == 5
    assert rows[0]["grid"] == 3 and rows[3]["grid"] == 2
    assert [r["program_id"] for r in rows] == [0, 1, 2, 0, 1]
    assert rows[2]["bytes_per_program"] == 2.0 and rows[0]["flops_per_program"] == 10.0
    assert rows[4]["variant"] == "compute" and rows[1]["start_ns"] == 201
    if name.endswith(".gz"):
        import gzip

        assert gzip.open(path, "rt").readline().strip() == FORMAT_LINE
    else:
        assert path.read_text().splitlines()[0] == FORMAT_LINE


def test_reader_rejects_foreign_header(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="header"):
        read_trace(p)


@pytest.mark.parametrize("kw,match", [
    (dict(kernel="conv"), "kernel"), (dict(variant="other"), "variant"), (dict(backend="mpi"), "backend"),
    (dict(smid=[1]), "smid"), (dict(bytes_per_program=[1.0]), "bytes_per_program"),
])
def test_kernel_trace_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        _trace(3, **kw)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), st.integers(0, 10**9), max_size=6))
def test_shape_roundtrip(params):
    assert parse_shape(format_shape(params)) == {k: str(v) for k, v in params.items()}


def test_shape_rejects_reserved_characters():
    with pytest.raises(ValueError, match="shape"):
        format_shape({"a;b": 1})


def test_recorder_timer_choice():
    with pytest.raises(ValueError, match="timer"):
        TraceRecorder(timer="wallclock")
    with pytest.raises(ValueError, match="timer"):  # inline asm cannot run in the interpreter / on CPU
        TraceRecorder(timer="globaltimer").resolve_timer("cpu", True)
    assert TraceRecorder().resolve_timer("cpu", True) == "sequence"


def _check_sequence_trace(tr, grid):
    assert tr.grid == grid and tr.timer == "sequence"
    assert all(s < e for s, e in zip(tr.start_ns, tr.end_ns, strict=False))
    assert tr.launch_ns < min(tr.start_ns) and tr.kernel_end_ns > max(tr.end_ns)
    assert set(tr.smid) == {-1}
    ticks = sorted(list(tr.start_ns) + list(tr.end_ns))
    assert len(set(ticks)) == 2 * grid  # every tick is distinct


def test_traced_launches_under_the_interpreter(tmp_path):
    g = torch.Generator().manual_seed(0)
    rec = TraceRecorder(rank=1, prefix="cpu")
    grp = EmulatedGroup(2)
    # embedding: 2 ranks, 8 bags, pooling 3, bags_per_program 2 -> grid (2 blocks, 2 dest, 1 table) = 4
    w = [torch.randn(20, 16, generator=g) for _ in range(2)]
    ix = [torch.randint(0, 20, (24,), generator=g) for _ in range(2)]
    of = [torch.arange(9) * 3 for _ in range(2)]
    embedding_all_to_all(grp, w, ix, of, config=EmbeddingConfig(2, 1, 1), trace=rec)
    tr = rec.traces[0]
    assert (tr.kernel, tr.variant, tr.rank, tr.world_size, tr.dtype) == ("embedding_all_to_all", "fused", 1, 2, "fp32")
    _check_sequence_trace(tr, 4)
    assert sum(tr.flops_per_program) == 24 * 16  # one add per looked-up element
    assert parse_shape(tr.shape)["bags"] == "8"
    # gemv and gemm
    xs = [torch.randn(2, 32, generator=g) for _ in range(2)]
    wv = [torch.randn(64, 32, generator=g) for _ in range(2)]
    gemv_all_reduce(grp, xs, wv, config=GemvConfig(block_n=32, block_k=16, split_k=2), trace=rec)
    _check_sequence_trace(rec.traces[1], 4)
    dr, dw, recv = moe_routing([[8, 8], [8, 8]])
    a = [torch.randn(16, 16, generator=g) for _ in range(2)]
    b = [torch.randn(16, 32, generator=g) for _ in range(2)]
    cfg = GemmConfig(16, 16, 16, 1, 4, 1)
    gemm_all_to_all(grp, a, b, dr, dw, recv, config=cfg, trace=rec)
    gemm_compute(grp, a, b, config=cfg, trace=rec)
    _check_sequence_trace(rec.traces[2], 2)
    assert rec.traces[3].variant == "compute"
    n = rec.write(tmp_path / "t.csv.gz")
    rows = read_trace(tmp_path / "t.csv.gz")
    assert n == len(rows) == 4 + 4 + 2 + 2
    assert len({r["run_id"] for r in rows}) == 4
