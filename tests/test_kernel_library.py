"""torch.ops.simfuse registration and the package's optional-extra import behaviour."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported: before any triton import

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import simfuse.kernels as sk  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_ops_are_registered_and_match_references():
    ops = sk.register_ops()
    g = torch.Generator().manual_seed(0)
    w = [torch.randn(30, 16, generator=g) for _ in range(2)]
    ix = [torch.randint(0, 30, (16,), generator=g) for _ in range(2)]
    of = [torch.arange(5) * 4 for _ in range(2)]
    to = [torch.tensor([0, 30]) for _ in range(2)]
    ref = sk.embedding_reference(w, ix, of, to, mode="mean")
    for op in (ops.embedding_all_to_all, ops.embedding_all_to_all_baseline):
        outs = op(w, ix, of, to, mode="mean")
        assert all(torch.allclose(o.double(), r, atol=1e-5) for o, r in zip(outs, ref, strict=False))
    xs = [torch.randn(3, 32, generator=g) for _ in range(2)]
    ws = [torch.randn(48, 32, generator=g) for _ in range(2)]
    ref = sk.gemv_reference(xs, ws)
    for outs in (ops.gemv_all_reduce(xs, ws, block_n=16, block_k=16), ops.gemv_all_reduce_baseline(xs, ws)):
        assert all(torch.allclose(o.double(), ref, atol=1e-4) for o in outs)
    dr, dw, recv = sk.moe_routing([[3, 5], [2, 6]])
    a = [torch.randn(8, 16, generator=g) for _ in range(2)]
    b = [torch.randn(16, 24, generator=g) for _ in range(2)]
    ref = sk.gemm_reference(a, b, dr, dw, recv)
    for outs in (ops.gemm_all_to_all(a, b, dr, dw, recv, block_m=16, block_n=16, block_k=16, num_warps=4,
                                     num_stages=1),
                 ops.gemm_all_to_all_baseline(a, b, dr, dw, recv)):
        assert [o.shape[0] for o in outs] == recv
        assert all(torch.allclose(o.double(), r, atol=1e-4) for o, r in zip(outs, ref, strict=False))


def test_op_errors_name_the_argument():
    ops = sk.register_ops()
    with pytest.raises(ValueError, match=r"ws\[1\]"):
        ops.gemv_all_reduce([torch.randn(1, 8), torch.randn(1, 8)], [torch.randn(16, 8), torch.randn(17, 8)])


def test_simfuse_imports_without_torch_and_kernels_explain_the_extra():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['triton'] = None\n"
        "import simfuse\n"
        "try:\n"
        "    import simfuse.kernels\n"
        "except ImportError as e:\n"
        "    print('IMPORT-ERROR', e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "IMPORT-ERROR" in res.stdout and "simfuse[kernels]" in res.stdout


def test_unknown_attribute():
    with pytest.raises(AttributeError):
        sk.no_such_thing  # noqa: B018
