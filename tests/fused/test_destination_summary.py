"""``FusedOp.destination_summary``: the closed forms against the per-workgroup arrays they summarise, and the
relative signatures (:mod:`simfuse.graph.symmetry`) of fused nodes built on them: symmetric fused ranks share a
signature (and fold to one rank that runs as fast as full simulation says), asymmetric ones do not, and no
signature reads a per-workgroup array."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives import Layout
from simfuse.collectives.groups import world
from simfuse.costs import KernelWork
from simfuse.fused import FusedKnobs, make_op, ops
from simfuse.fused.base import FusedOp
from simfuse.graph import FusedNode, Graph
from simfuse.graph.executor import execute
from simfuse.graph.symmetry import fold, relative_signature, signature_classes
from simfuse.system import System

from ..conftest import make_topology


def _tally(dst, count, each) -> dict:
    out: dict = {}
    for d, c, b in zip(np.asarray(dst).tolist(), np.asarray(count).tolist(), np.asarray(each).tolist(), strict=True):
        if c:
            out[(d, b)] = out.get((d, b), 0) + c
    return out


def _per_workgroup(op, rank) -> dict:
    """The reference: one count per workgroup, straight off ``wg_destinations``."""
    dst, out = op.wg_destinations(rank)
    return _tally(dst, np.ones(len(dst), dtype=np.int64), np.asarray(out, dtype=float))


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["embedding_all_to_all", "gemm_all_to_all", "gemv_all_reduce", "gemm_reduce_scatter"]),
       nodes=st.integers(1, 3), g=st.sampled_from([1, 2, 4]), mult=st.integers(1, 3), tile=st.sampled_from([2, 3, 8]),
       rank_seed=st.integers(0, 1000))
def test_closed_forms_equal_the_workgroup_arrays(name, nodes, g, mult, tile, rank_seed):
    n = nodes * g
    params = {
        "embedding_all_to_all": {"tables_per_gpu": mult, "rows": 100, "dim": 8, "pooling": 2,
                                 "global_batch": n * 6 * mult, "bags_per_wg": tile},
        "gemm_all_to_all": {"tokens": n * 4 * mult, "hidden": 24, "ffn": 16, "experts_per_gpu": 2, "top_k": 1,
                            "tile_m": tile, "tile_n": tile},
        "gemv_all_reduce": {"n": n * 12 * mult, "k": n * 4, "tokens": 2, "rows_per_wg": tile},
        "gemm_reduce_scatter": {"m": n * 12 * mult, "n": 24, "k": n * 4, "tile_m": tile, "tile_n": tile},
    }[name]
    op = make_op(name, params, nodes, g)
    rank = rank_seed % n
    closed = op.destination_summary(rank)
    assert type(op).destination_summary is not FusedOp.destination_summary  # a closed form of its own
    assert _tally(*closed) == _per_workgroup(op, rank)
    assert _tally(*FusedOp.destination_summary(op, rank)) == _per_workgroup(op, rank)  # the default, too


@settings(max_examples=40, deadline=None)
@given(g=st.integers(1, 4), N=st.integers(1, 3), t=st.integers(0, 3), kb=st.integers(1, 4),
       rank_seed=st.integers(0, 1000))
def test_twrw_closed_form_equals_the_workgroup_arrays(g, N, t, kb, rank_seed):
    lay = Layout(N, g)
    n, bags = lay.n, 2
    B = n * kb * bags
    rank = rank_seed % n
    work = KernelWork("embedding_bag", t * B // bags, 1.0, 1.0) if t else None
    op = ops.TwrwEmbeddingPush(work, lay, np.full(n, t), rank, B, bags, 8, 4)
    assert _tally(*op.destination_summary(rank)) == _per_workgroup(op, rank)


# -- signatures of fused nodes -----------------------------------------------------------------------------------
def _fused_graph(nodes, g, op_of_rank, knobs=None) -> Graph:
    graph = Graph(nodes, g)
    graph.add_group(world(nodes * g))
    for r in range(nodes * g):
        graph.program(r).add(FusedNode(name="f", op=op_of_rank(r), group="world", knobs=knobs))
    return graph


@pytest.fixture
def no_workgroup_arrays(monkeypatch):
    """Every operator's per-workgroup arrays raise: a signature must not need them."""
    def refuse(self, rank):
        raise AssertionError(f"{type(self).__name__}.wg_destinations read for a signature")

    for cls in (ops.EmbeddingAllToAll, ops.GemmAllToAll, ops.GemvAllReduce, ops.GemmReduceScatter,
                ops.TwrwEmbeddingPush, FusedOp):
        monkeypatch.setattr(cls, "wg_destinations", refuse)


def test_symmetric_fused_ranks_share_a_signature(no_workgroup_arrays):
    nodes, g = 2, 2
    op = make_op("embedding_all_to_all", {"tables_per_gpu": 2, "rows": 1000, "dim": 32, "pooling": 4,
                                          "global_batch": 256}, nodes, g)
    graph = _fused_graph(nodes, g, lambda r: op)
    sigs = {relative_signature(graph, r) for r in range(nodes * g)}
    assert len(sigs) == 1
    assert list(fold(graph).programs) == [0]


def test_folded_embedding_push_runs_as_fast_as_full_simulation():
    # what "same signature" promises: the representative rank alone gives the full simulation's time
    nodes, g = 2, 2
    op = make_op("embedding_all_to_all", {"tables_per_gpu": 2, "rows": 1000, "dim": 32, "pooling": 4,
                                          "global_batch": 256}, nodes, g)
    graph = _fused_graph(nodes, g, lambda r: op, FusedKnobs(slice_wgs=4))
    sysm = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))
    full, fast = execute(sysm, graph), execute(sysm, fold(graph))
    assert (full.sim_mode, fast.sim_mode) == ("full", "symmetric")
    assert fast.time_s == pytest.approx(full.time_s, rel=1e-9)


def test_asymmetric_fused_ranks_get_other_signatures(no_workgroup_arrays):
    nodes, g = 2, 2
    n = nodes * g
    lay = Layout(nodes, g)
    # table-row-wise shards on node 0 only: node 0's ranks push to their reducers, node 1's push nothing
    tables = np.array([1, 1, 0, 0])
    B, bags = n * 2, 2

    def twrw(r):
        t = int(tables[r])
        return ops.TwrwEmbeddingPush(KernelWork("embedding_bag", t * B // bags, 1.0, 1.0) if t else None, lay,
                                     tables, r, B, bags, 8, 4)

    assert signature_classes(_fused_graph(nodes, g, twrw)).tolist() == [0, 0, 1, 1]
    # the same kernel everywhere, the bytes differ only in where they go: rank 3 sends its 2 KiB to the next
    # node's GPU of the other local index, every other rank to the next node's GPU of its own
    work = KernelWork("gemm", 8, 1.0, 1.0)

    def push(r):
        node, local = divmod(r, g)
        peer_local = 1 - local if r == 3 else local
        dst = ((node + 1) % nodes) * g + peer_local
        return ops.PushKernel(work, [dst], [2048.0])

    graph = _fused_graph(nodes, g, push)
    assert signature_classes(graph).tolist() == [0, 0, 0, 1]
    assert fold(graph) is graph
    # relabelled: every rank sends to the next node's GPU of the other local index, so all agree again
    same = _fused_graph(nodes, g, lambda r: ops.PushKernel(work, [((r // g + 1) % nodes) * g + 1 - r % g],
                                                           [2048.0]))
    assert signature_classes(same).tolist() == [0, 0, 0, 0]


def test_relay_and_all_gather_signatures(no_workgroup_arrays):
    # operators without a per-workgroup push (the all-gather GEMM, a relaying push, its relay wait) have
    # signatures too; a relaying push differs from a plain one with the same bytes
    nodes, g = 1, 4
    ag_params = {"m": 256, "n": 256, "k": 64, "tile_m": 64, "tile_n": 64}
    ag = make_op("all_gather_gemm", {**ag_params, "tp": 4}, nodes, g)
    assert signature_classes(_fused_graph(nodes, g, lambda r: ag)).tolist() == [0, 0, 0, 0]
    # TP pairs inside a node: the first of a pair sends to local offset +1, the second to +3; only a reflection
    # (not among the local shifts the signature relabels by) maps one onto the other, so they stay apart
    ag2 = make_op("all_gather_gemm", {**ag_params, "tp": 2}, nodes, g)
    assert signature_classes(_fused_graph(nodes, g, lambda r: ag2)).tolist() == [0, 1, 0, 1]
    lay = Layout(nodes, g)
    work = KernelWork("gemm", 8, 1.0, 1.0)

    def push(r, relay):
        dst = [(r + 1) % g]
        return ops.PushKernel(work, dst, [512.0], layout=lay, relay_bytes=[256.0] if relay else None,
                              relay_channel="c" if relay else "")

    mixed = _fused_graph(nodes, g, lambda r: push(r, relay=r == 0))
    assert signature_classes(mixed).tolist() == [0, 1, 1, 1]
    waits = _fused_graph(nodes, g, lambda r: ops.RelayWait("c", 256.0 * (2 if r == 2 else 1), nodes, g))
    assert signature_classes(waits).tolist() == [0, 0, 1, 0]
