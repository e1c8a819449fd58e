"""Fused GEMM + All-to-All (MoE expert outputs to token owners) and its baseline under the interpreter."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported: before any triton import

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from simfuse.kernels import (  # noqa: E402
    EmulatedGroup,
    GemmConfig,
    Workspace,
    gemm_all_to_all,
    gemm_all_to_all_baseline,
    gemm_compute,
    gemm_reference,
    moe_routing,
)

from .kernel_common import TOL, relerr  # noqa: E402

CFG = GemmConfig(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=1)


def make_inputs(world, k, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 24, (world, world), generator=g).tolist()
    counts[0][0] = max(counts[0][0], 1)
    dr, dw, recv = moe_routing(counts)
    a = [torch.randn(sum(counts[r]), k, generator=g).to(dtype) for r in range(world)]
    b = [torch.randn(k, n, generator=g).to(dtype) for _ in range(world)]
    return a, b, dr, dw, recv


@pytest.mark.parametrize("world,k,n,dtype", [
    (1, 32, 40, torch.float32), (2, 48, 64, torch.float32), (3, 32, 50, torch.bfloat16), (4, 16, 32, torch.float16),
])
def test_fused_matches_reference_and_flags(world, k, n, dtype):
    a, b, dr, dw, recv = make_inputs(world, k, n, dtype, seed=world * 5 + n)
    grp = EmulatedGroup(world)
    wsp = Workspace(grp)
    out = grp.alloc((max(recv), n), dtype, fill=float("nan"))
    outs = gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, workspace=wsp, config=CFG, wait=False)
    ref = gemm_reference(a, b, dr, dw, recv)
    flags = wsp.get("gemm_flags", (1,), torch.int64)
    for d in range(world):
        if recv[d]:
            assert relerr(outs[d][:recv[d]], ref[d]) < TOL[dtype]
        assert torch.isnan(outs[d][recv[d]:]).all()  # rows nobody sends stay untouched
        assert int(flags.local(d)[0]) == recv[d] * -(-n // CFG.block_n)


def test_arbitrary_row_permutation_and_wait():
    g = torch.Generator().manual_seed(21)
    world, m, k, n = 2, 40, 32, 48
    perm = torch.randperm(2 * m, generator=g)  # rows of both ranks to random (rank, row) slots
    dr = [(perm[r * m:(r + 1) * m] % 2).to(torch.int32) for r in range(world)]
    dw = [(perm[r * m:(r + 1) * m] // 2).to(torch.int32) for r in range(world)]
    recv = [m, m]
    a = [torch.randn(m, k, generator=g) for _ in range(world)]
    b = [torch.randn(k, n, generator=g) for _ in range(world)]
    grp = EmulatedGroup(world)
    wsp = Workspace(grp)
    outs = gemm_all_to_all(grp, a, b, dr, dw, recv, workspace=wsp, config=CFG)
    ref = gemm_reference(a, b, dr, dw, recv)
    for d in range(world):
        assert relerr(outs[d], ref[d]) < 1e-5
        assert int(wsp.get("gemm_flags", (1,), torch.int64).local(d)[0]) == 0  # waited and reset


@pytest.mark.parametrize("world,dtype", [(2, torch.bfloat16), (3, torch.float32)])
def test_baseline_and_compute_match_reference(world, dtype):
    a, b, dr, dw, recv = make_inputs(world, 32, 40, dtype, seed=3 + world)
    grp = EmulatedGroup(world)
    ref = gemm_reference(a, b, dr, dw, recv)
    outs = gemm_all_to_all_baseline(grp, a, b, dr, dw, recv, config=CFG)
    for d in range(world):
        if recv[d]:
            assert relerr(outs[d][:recv[d]], ref[d]) < TOL[dtype]
    cs = gemm_compute(grp, a, b, config=CFG)
    for r in range(world):
        assert relerr(cs[r], a[r].double() @ b[r].double()) < TOL[dtype]


def _dup(a, b, dr, dw, recv):
    dr[0][1] = dr[0][0]
    dw[0][1] = dw[0][0]


@pytest.mark.parametrize("mutate,match", [
    (lambda a, b, dr, dw, recv: dr[1].__setitem__(0, 7), r"dest_rank\[1\]"),
    (lambda a, b, dr, dw, recv: dw[0].__setitem__(0, 10_000), r"dest_row\[0\]"),
    (_dup, r"dest_row\[0\]"),
    (lambda a, b, dr, dw, recv: b.__setitem__(1, torch.randn(31, 40)), r"b\[1\]"),
    (lambda a, b, dr, dw, recv: a.__setitem__(0, a[0].to(torch.float16)), r"a\[0\]/b\[0\]"),
    (lambda a, b, dr, dw, recv: dr.__setitem__(0, dr[0].long()), r"dest_rank\[0\]"),
    (lambda a, b, dr, dw, recv: recv.pop(), r"recv_rows"),
])
def test_bad_inputs_raise_before_any_kernel(mutate, match):
    a, b, dr, dw, recv = make_inputs(2, 32, 40, torch.float32, seed=8)
    grp = EmulatedGroup(2)
    out = grp.alloc((max(recv), 40), torch.float32, fill=float("nan"))
    mutate(a, b, dr, dw, recv)
    with pytest.raises(ValueError, match=match):
        gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, config=CFG)
    assert all(torch.isnan(out.local(r)).all() for r in range(2))


def test_moe_routing_layout():
    dr, dw, recv = moe_routing([[1, 2], [3, 0]])
    assert recv == [4, 2]
    assert dr[0].tolist() == [0, 1, 1] and dw[0].tolist() == [0, 0, 1]
    assert dr[1].tolist() == [0, 0, 0] and dw[1].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match=r"counts\[1\]"):
        moe_routing([[1, 2], [3]])


@pytest.mark.parametrize("fused", [False, True])
def test_even_config_matches_reference(fused):
    """``even=True`` (mask-free main loop) on a block-divisible shape, and on a ragged one (masked path kept)."""
    cfg = GemmConfig(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=1, even=True,
                     scope="gpu" if fused else "sys")
    for m, k, n in ((64, 48, 64), (40, 40, 50)):
        g = torch.Generator().manual_seed(m + n)
        counts = [[m]]
        dr, dw, recv = moe_routing(counts)
        a = [torch.randn(m, k, generator=g).to(torch.bfloat16)]
        b = [torch.randn(k, n, generator=g).to(torch.bfloat16)]
        ref = gemm_reference(a, b, dr, dw, recv)[0]
        grp = EmulatedGroup(1)
        if fused:
            out = grp.alloc((m, n), torch.bfloat16, fill=float("nan"))
            c = gemm_all_to_all(grp, a, b, dr, dw, recv, out=out, config=cfg)[0]
        else:
            c = gemm_compute(grp, a, b, config=cfg)[0]
        assert relerr(c, ref) < TOL[torch.bfloat16]
