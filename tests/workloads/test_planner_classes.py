"""The partitioner keeps its loads per class of ranks (planner._Loads): against plain per-rank arrays given the
same additions, every rank's cost is bitwise equal, and the shard choice (lowest ranks, ties to the lower rank) is
the set a stable sort of every rank picks."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.workloads.planner import (
    _F,
    _FIELDS,
    _HOLDER,
    _UNIFORM,
    _apply,
    _context,
    _Loads,
    _lowest_ranks,
    _Option,
)

from ..conftest import make_topology
from .test_planner_vectorised import _spec


def _ctx(nodes=4, g=4, ids="inline"):
    spec = _spec([(1000, 4), (50, 2)], 64 * nodes * g)
    ctx = _context(spec, make_topology(gpus_per_node=g, nics_per_node=g), nodes * g, g, "baseline")
    ctx.ids = ids
    return ctx


def _option(rng) -> _Option:
    vals = {a: float(rng.choice([0.0, rng.uniform(0, 1e-3), 1e-4])) for a in
            set(_HOLDER.values()) | set(_UNIFORM.values()) | {"u_dp_s"}}
    return _Option("table_wise", 1, 10, 8, 1.0, vals.pop("comp_s"), vals.pop("send_intra"), vals.pop("send_inter"),
                   vals.pop("recv_intra_holder"), vals.pop("u_recv_intra"), vals.pop("u_recv_inter"), **vals)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 12), ids=st.sampled_from(["inline", "prefetch"]))
def test_class_loads_equal_per_rank_arrays(seed, steps, ids):
    rng = np.random.default_rng(seed)
    ctx = _ctx(ids=ids)
    L = _Loads(ctx)
    ref = {name: np.zeros(ctx.n) for name in _FIELDS}
    dp = 0.0
    for _ in range(steps):
        opt = _option(rng)
        holders = np.sort(rng.choice(ctx.n, size=int(rng.integers(0, ctx.n + 1)), replace=False))
        _apply(opt, holders, L)
        for name, attr in _UNIFORM.items():   # the per-rank additions, in _apply's order
            ref[name] += getattr(opt, attr)
        dp += opt.u_dp_s
        for name, attr in _HOLDER.items():
            ref[name][holders] += getattr(opt, attr)
        for name in _FIELDS:
            assert np.array_equal(L.field(name)[L.lab], ref[name]), name
        assert L.size[:L.n_cls].sum() == ctx.n and np.array_equal(np.bincount(L.lab, minlength=L.n_cls),
                                                                   L.size[:L.n_cls])
    ids_ref = (ref["ksi"], ref["kse"], ref["ki"], ref["ke"]) if ids == "prefetch" else None
    want = ctx.rank_cost(ref["comp"], ref["si"], ref["se"], ref["ri"], ref["re"], dp, ids_ref)
    assert np.array_equal(L.costs(), want)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 16))
def test_lowest_ranks_is_the_stable_sort_prefix(seed, k):
    rng = np.random.default_rng(seed)
    ctx = _ctx()
    L = _Loads(ctx)
    for _ in range(4):  # a few classes of ranks
        opt = _option(rng)
        _apply(opt, np.sort(rng.choice(ctx.n, size=int(rng.integers(1, ctx.n)), replace=False)), L)
    value = rng.choice([0.0, 1.0, 2.0, np.inf], size=L.n_cls)  # ties between classes on purpose
    want = np.sort(np.argsort(value[L.lab], kind="stable")[:k])
    assert np.array_equal(_lowest_ranks(value, L, k), want)
    assert _F["comp"] == _FIELDS.index("comp")
