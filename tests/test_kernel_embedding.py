"""Fused embedding-bag + All-to-All (and its baseline) under the Triton interpreter on CPU tensors."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported: before any triton import

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from simfuse.kernels import (  # noqa: E402
    EmbeddingConfig,
    EmulatedGroup,
    Workspace,
    embedding_all_to_all,
    embedding_all_to_all_baseline,
    embedding_compute,
    embedding_reference,
    wait_flags,
)

from .kernel_common import TOL, relerr  # noqa: E402


def make_inputs(world, batch, dim, dtype, seed, max_pool=5):
    g = torch.Generator().manual_seed(seed)
    weights, indices, offsets, toffs = [], [], [], []
    for _ in range(world):
        nt = int(torch.randint(1, 4, (1,), generator=g))
        rows = torch.randint(3, 40, (nt,), generator=g)
        toffs.append(torch.cat([torch.zeros(1, dtype=torch.int64), rows.cumsum(0)]))
        weights.append(torch.randn(int(rows.sum()), dim, generator=g).to(dtype))
        lens = torch.randint(0, max_pool + 1, (nt * batch,), generator=g)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]))
        indices.append(torch.cat([torch.randint(0, int(rows[t]), (int(lens[t * batch:(t + 1) * batch].sum()),),
                                                generator=g) for t in range(nt)]))
    return weights, indices, offsets, toffs


CASES = [  # world, batch, dim, dtype, mode, config
    (1, 6, 16, torch.float32, "mean", EmbeddingConfig(4, 1, 1)),
    (2, 8, 24, torch.float32, "sum", EmbeddingConfig(2, 2, 2)),
    (3, 9, 16, torch.float16, "mean", EmbeddingConfig(4, 4, 2)),
    (4, 8, 32, torch.bfloat16, "sum", EmbeddingConfig(8, 4, 4)),
]


@pytest.mark.parametrize("world,batch,dim,dtype,mode,cfg", CASES)
def test_fused_matches_reference_and_flags(world, batch, dim, dtype, mode, cfg):
    w, ix, of, to = make_inputs(world, batch, dim, dtype, seed=world * 7 + dim)
    grp = EmulatedGroup(world)
    ws = Workspace(grp)
    ftot = sum(t.numel() - 1 for t in to)
    out = grp.alloc((batch // world, ftot * dim), dtype, fill=float("nan"))
    outs = embedding_all_to_all(grp, w, ix, of, to, mode=mode, out=out, workspace=ws, config=cfg, wait=False)
    ref = embedding_reference(w, ix, of, to, mode=mode)
    for r in range(world):
        assert relerr(outs[r], ref[r]) < TOL[dtype]
    flags = ws.get("emb_flags", (1,), torch.int64)
    for r in range(world):
        assert int(flags.local(r)[0]) == batch // world * ftot  # every bag of every table delivered once
    wait_flags(grp, flags, batch // world * ftot)  # consumer: acquire, then reset to zero
    assert all(int(flags.local(r)[0]) == 0 for r in range(world))


def test_fused_twice_reuses_workspace_and_fresh_inputs():
    grp = EmulatedGroup(2)
    ws = Workspace(grp)
    for seed in (1, 2):
        w, ix, of, to = make_inputs(2, 4, 16, torch.float32, seed=seed)
        outs = embedding_all_to_all(grp, w, ix, of, to, workspace=ws, config=EmbeddingConfig(2, 1, 1))
        ref = embedding_reference(w, ix, of, to)
        assert max(relerr(o, r) for o, r in zip(outs, ref, strict=False)) < 1e-5
        assert int(ws.get("emb_flags", (1,), torch.int64).local(0)[0]) == 0


@pytest.mark.parametrize("world,dtype", [(2, torch.float32), (3, torch.bfloat16)])
def test_baseline_and_compute_match_reference(world, dtype):
    w, ix, of, to = make_inputs(world, 3 * world, 16, dtype, seed=11 + world)
    grp = EmulatedGroup(world)
    cfg = EmbeddingConfig(4, 2, 2)
    ref = embedding_reference(w, ix, of, to)
    outs = embedding_all_to_all_baseline(grp, w, ix, of, to, config=cfg)
    for r in range(world):
        assert relerr(outs[r], ref[r]) < TOL[dtype]
    local = embedding_compute(grp, w, ix, of, to, config=cfg)  # [batch, T_r*D] per rank, before the exchange
    bs = 3
    col = 0
    for r in range(world):
        width = local[r].shape[1]
        for d in range(world):
            assert relerr(local[r][d * bs:(d + 1) * bs], ref[d][:, col:col + width]) < TOL[dtype]
        col += width


def _poisoned(grp, w, to, batch, dim):
    ftot = sum(t.numel() - 1 for t in to)
    return grp.alloc((batch // grp.world_size, ftot * dim), w[0].dtype, fill=float("nan"))


@pytest.mark.parametrize("mutate,match", [
    (lambda w, ix, of, to: ix[1].__setitem__(0, 10_000), r"indices\[1\]"),
    (lambda w, ix, of, to: ix[0].__setitem__(0, -1), r"indices\[0\]"),
    (lambda w, ix, of, to: w.__setitem__(1, w[1].to(torch.float16)), r"weights\[1\]"),
    (lambda w, ix, of, to: ix.__setitem__(0, ix[0].to(torch.int32)), r"indices\[0\]"),
    (lambda w, ix, of, to: of.__setitem__(0, of[0][:-1]), r"offsets\[0\]"),
    (lambda w, ix, of, to: to.__setitem__(0, to[0] + 1), r"table_offsets\[0\]"),
    (lambda w, ix, of, to: w.pop(), r"weights"),
])
def test_bad_inputs_raise_before_any_kernel(mutate, match):
    w, ix, of, to = make_inputs(2, 4, 16, torch.float32, seed=3)
    grp = EmulatedGroup(2)
    out = _poisoned(grp, w, to, 4, 16)
    mutate(w, ix, of, to)
    with pytest.raises(ValueError, match=match):
        embedding_all_to_all(grp, w, ix, of, to, out=out)
    assert all(torch.isnan(out.local(r)).all() for r in range(2))  # nothing was launched


def test_world_size_must_divide_batch():
    w, ix, of, to = make_inputs(3, 4, 16, torch.float32, seed=4)
    with pytest.raises(ValueError, match="batch_size"):
        embedding_all_to_all(EmulatedGroup(3), w, ix, of, to)


def test_bad_mode_and_config():
    w, ix, of, to = make_inputs(2, 4, 16, torch.float32, seed=5)
    grp = EmulatedGroup(2)
    with pytest.raises(ValueError, match="mode"):
        embedding_all_to_all(grp, w, ix, of, to, mode="max")
    with pytest.raises(ValueError, match="config.bags_per_program"):
        embedding_all_to_all(grp, w, ix, of, to, config=EmbeddingConfig(bags_per_program=3))
    with pytest.raises(ValueError, match="wait"):
        embedding_all_to_all(grp, w, ix, of, to, wait="sometimes")
    with pytest.raises(ValueError, match="tables_per_rank"):
        embedding_all_to_all(grp, w, ix, of, to, tables_per_rank=[9, 9])
