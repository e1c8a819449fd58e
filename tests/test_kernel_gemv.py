"""Fused GEMV + AllReduce (direct two-phase) and its baseline under the Triton interpreter."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported: before any triton import

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from simfuse.kernels import (  # noqa: E402
    EmulatedGroup,
    GemvConfig,
    Workspace,
    gemv_all_reduce,
    gemv_all_reduce_baseline,
    gemv_compute,
    gemv_reference,
    wait_flags,
)

from .kernel_common import TOL, relerr  # noqa: E402


def make_inputs(world, tokens, n, ks, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(tokens, ks[r], generator=g).to(dtype) for r in range(world)]
    ws = [torch.randn(n, ks[r], generator=g).to(dtype) for r in range(world)]
    return xs, ws


CASES = [  # world, tokens, n, per-rank K, dtype, config
    (1, 1, 70, [48], torch.float32, GemvConfig(block_n=32, block_k=16)),
    (2, 16, 64, [32, 48], torch.bfloat16, GemvConfig(block_n=16, block_k=16, split_k=2)),
    (3, 5, 100, [40, 40, 24], torch.float16, GemvConfig(block_n=32, block_k=32)),
    (4, 3, 96, [32, 16, 16, 32], torch.float32, GemvConfig(block_n=32, block_k=16, split_k=4)),
    # one-token multiply-and-reduce path (vec): ragged N and K, split-K, several ranks; vec with 2 tokens
    # falls back to the tl.dot path
    (1, 1, 70, [48], torch.float32, GemvConfig(block_n=32, block_k=32, vec=True)),
    (2, 1, 100, [40, 72], torch.bfloat16, GemvConfig(block_n=16, block_k=32, split_k=2, vec=True)),
    (3, 2, 64, [32, 32, 16], torch.float16, GemvConfig(block_n=32, block_k=16, vec=True)),
    (2, 4, 64, [32, 32], torch.float32, GemvConfig(block_n=32, block_k=16, split_k=2, scope="gpu")),
]


@pytest.mark.parametrize("world,tokens,n,ks,dtype,cfg", CASES)
def test_fused_matches_reference_and_flags(world, tokens, n, ks, dtype, cfg):
    xs, ws = make_inputs(world, tokens, n, ks, dtype, seed=world + n)
    grp = EmulatedGroup(world)
    wsp = Workspace(grp)
    out = grp.alloc((tokens, n), dtype, fill=float("nan"))
    outs = gemv_all_reduce(grp, xs, ws, out=out, workspace=wsp, config=cfg, wait=False)
    ref = gemv_reference(xs, ws)
    for r in range(world):
        assert relerr(outs[r], ref) < TOL[dtype]
    tiles = -(-n // cfg.block_n)
    flags = wsp.get("gemv_flags", (1,), torch.int64)
    ctr = wsp.get("gemv_ctr", (tiles,), torch.int64)
    for r in range(world):
        assert int(flags.local(r)[0]) == tiles  # each reduced tile pushed to every rank once
        assert int(ctr.local(r).abs().sum()) == 0  # arrival counters reset by the last arrivals
    wait_flags(grp, flags, tiles)
    assert all(int(flags.local(r)[0]) == 0 for r in range(world))


def test_reduction_is_deterministic_and_identical_on_every_rank():
    xs, ws = make_inputs(3, 4, 64, [32, 32, 32], torch.float32, seed=9)
    grp = EmulatedGroup(3)
    cfg = GemvConfig(block_n=32, block_k=16, split_k=2)
    a = gemv_all_reduce(grp, xs, ws, config=cfg)
    b = gemv_all_reduce(grp, xs, ws, config=cfg)
    for r in range(3):
        assert torch.equal(a[r], a[0]) and torch.equal(a[r], b[r])


@pytest.mark.parametrize("world,dtype", [(2, torch.bfloat16), (3, torch.float32)])
def test_baseline_and_compute_match_reference(world, dtype):
    xs, ws = make_inputs(world, 2, 80, [32] * world, dtype, seed=5 + world)
    grp = EmulatedGroup(world)
    cfg = GemvConfig(block_n=32, block_k=32)
    ref = gemv_reference(xs, ws)
    outs = gemv_all_reduce_baseline(grp, xs, ws, config=cfg)
    for r in range(world):
        assert relerr(outs[r], ref) < TOL[dtype]
    parts = gemv_compute(grp, xs, ws, config=cfg)
    for r in range(world):
        assert relerr(parts[r], gemv_reference([xs[r]], [ws[r]])) < TOL[dtype]


@pytest.mark.parametrize("mutate,match", [
    (lambda xs, ws: xs.__setitem__(0, torch.randn(17, 32)), r"xs\[0\]"),  # too many tokens
    (lambda xs, ws: ws.__setitem__(1, ws[1].to(torch.float16)), r"xs\[1\]/ws\[1\]"),
    (lambda xs, ws: ws.__setitem__(1, torch.randn(65, 32)), r"ws\[1\]"),
    (lambda xs, ws: xs.__setitem__(1, torch.randn(2, 31)), r"xs\[1\]"),
    (lambda xs, ws: xs.__setitem__(0, torch.randn(2, 32, dtype=torch.float64)), r"xs\[0\]"),
    (lambda xs, ws: ws.pop(), r"ws"),
])
def test_bad_inputs_raise_before_any_kernel(mutate, match):
    xs, ws = make_inputs(2, 2, 64, [32, 32], torch.float32, seed=1)
    grp = EmulatedGroup(2)
    out = grp.alloc((2, 64), torch.float32, fill=float("nan"))
    mutate(xs, ws)
    with pytest.raises(ValueError, match=match):
        gemv_all_reduce(grp, xs, ws, out=out)
    assert all(torch.isnan(out.local(r)).all() for r in range(2))


def test_bad_config():
    xs, ws = make_inputs(2, 2, 64, [32, 32], torch.float32, seed=2)
    with pytest.raises(ValueError, match="config.split_k"):
        gemv_all_reduce(EmulatedGroup(2), xs, ws, config=GemvConfig(split_k=3))
    with pytest.raises(ValueError, match="config.block_n"):
        gemv_all_reduce(EmulatedGroup(2), xs, ws, config=GemvConfig(block_n=8))


def test_fp32_large_tiles_fit_by_lowering_stages():
    import torch

    from simfuse.kernels import GemvConfig

    cfg = GemvConfig(block_n=128, block_k=256, num_stages=3)
    assert cfg.shared_bytes(torch.float32) == 294912  # what Triton 3.6 asked for on the H200 (232,448 available)
    assert cfg.shared_bytes(torch.bfloat16) == 0  # left to the compiler: far less
    fitted = cfg.fit_shared_memory(torch.float32, 232448)
    assert fitted.num_stages == 2 and fitted.shared_bytes(torch.float32) == 147456
    with pytest.raises(ValueError, match="even at 1 stage"):
        GemvConfig(block_n=256, block_k=256).fit_shared_memory(torch.float32, 232448)
    with pytest.raises(ValueError, match="elements per thread"):
        GemvConfig(block_n=1024, block_k=1024).validate()
