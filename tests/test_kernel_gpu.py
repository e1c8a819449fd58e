"""GPU-only checks (compiled kernels, %globaltimer traces, concurrent emulated ranks); skipped without CUDA."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ON_GPU, reason="needs CUDA and compiled Triton kernels")]


def _rel(out, ref):
    out = out.detach().cpu().double()
    assert not torch.isnan(out).any()
    return float((out - ref).norm() / ref.norm())


@pytest.mark.parametrize("concurrent", [False, True])
def test_all_ops_on_gpu(concurrent):
    import simfuse.kernels as sk

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    grp = sk.EmulatedGroup(4, dev, concurrent=concurrent)
    w = [torch.randn(1000, 64, device=dev, generator=g).to(torch.bfloat16) for _ in range(4)]
    ix = [torch.randint(0, 1000, (64 * 8,), device=dev, generator=g) for _ in range(4)]
    of = [torch.arange(65, device=dev) * 8 for _ in range(4)]
    ref = sk.embedding_reference(w, ix, of)
    assert max(_rel(o, r) for o, r in zip(sk.embedding_all_to_all(grp, w, ix, of), ref, strict=False)) < 1e-2
    xs = [torch.randn(16, 256, device=dev, generator=g).to(torch.bfloat16) for _ in range(4)]
    ws = [torch.randn(512, 256, device=dev, generator=g).to(torch.bfloat16) for _ in range(4)]
    ref = sk.gemv_reference(xs, ws)
    assert max(_rel(o, ref) for o in sk.gemv_all_reduce(grp, xs, ws)) < 1e-2
    dr, dw, recv = sk.moe_routing([[64] * 4] * 4)
    dr, dw = [t.to(dev) for t in dr], [t.to(dev) for t in dw]
    a = [torch.randn(256, 128, device=dev, generator=g).to(torch.bfloat16) for _ in range(4)]
    b = [torch.randn(128, 256, device=dev, generator=g).to(torch.bfloat16) for _ in range(4)]
    ref = sk.gemm_reference(a, b, dr, dw, recv)
    outs = sk.gemm_all_to_all(grp, a, b, dr, dw, recv)
    assert max(_rel(o[:n], r) for o, r, n in zip(outs, ref, recv, strict=False)) < 1e-2


def test_globaltimer_trace():
    import simfuse.kernels as sk

    dev = torch.device("cuda")
    rec = sk.TraceRecorder(timer="globaltimer")
    grp = sk.EmulatedGroup(2, dev)
    xs = [torch.randn(1, 1024, device=dev) for _ in range(2)]
    ws = [torch.randn(2048, 1024, device=dev) for _ in range(2)]
    sk.gemv_all_reduce(grp, xs, ws)
    sk.gemv_all_reduce(grp, xs, ws, trace=rec)
    tr = rec.traces[0]
    assert all(s <= e for s, e in zip(tr.start_ns, tr.end_ns, strict=False))
    assert tr.launch_ns <= min(tr.start_ns) and max(tr.end_ns) <= tr.kernel_end_ns
    assert all(s >= 0 for s in tr.smid)
