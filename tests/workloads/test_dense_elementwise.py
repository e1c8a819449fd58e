"""The dense network's element-wise kernels (``dense_fusion``, simfuse.workloads.dlrm_kernels.dense_elementwise): byte
and kernel counts against the formulas read from HugeCTR's and PyTorch's kernels, their place in the iteration
graph, the kernel the fused backward pushes from, the SGD step, and bad input."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.graph import AllToAllVNode, ComputeNode, FusedNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.dlrm_kernels import _dense_layers, dense_elementwise

from ..conftest import make_topology

G, NODES = 4, 2


def _spec(interaction="dcn", layers=2, tables=3, dim=16, batch=256, bottom=(32, 16), top=(64, 32, 1), **kw):
    inter = {"kind": interaction}
    if interaction == "dcn":
        inter.update(layers=layers, low_rank=8)
    d = {"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13, "bottom_mlp": list(bottom),
         "top_mlp": list(top), "interaction": inter, "dense_dtype": "bf16",
         "embedding": {"dim": dim, "tables": [{"rows": 1000 + 100 * i, "pooling": 2} for i in range(tables)]}}
    d.update(kw)
    return workload_from_dict(d, "<test>")


def _bytes(works) -> float:
    return sum(w.bytes_per_wg * w.num_workgroups for _lbl, w in works)


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 5000), T=st.integers(1, 30), D=st.sampled_from([8, 16, 64, 128]), L=st.integers(0, 4))
def test_epilogue_bytes_follow_hugectr_kernels(b, T, D, L):
    """HugeCTR's MultiCross/Concat/MLP kernels: forward concat copies (2 b T D + 2 b D) and one fused
    ``x0 .* h + x_l`` per layer (4 b x; 3 b x in layer 0, where x_l is x0); backward a memset (b x), one fused_mul_fma3 per layer (6 b x), the final
    matrix_add (3 b x) and the concat copies back; the bottom MLP's last ReLU layer: a mask copy (2 b D) and
    reverse_relu (3 b D); the loss one kernel."""
    spec = _spec(layers=L, tables=T, dim=D, bottom=(32, D))
    dew = dense_elementwise(spec, b)
    eb, x = 2, (T + 1) * D
    fwd = dew.inter_fwd_head + [w for ws in dew.inter_fwd for w in ws]
    assert _bytes(fwd) == pytest.approx((2 * b * T * D + 2 * b * D + (4 * L - (1 if L else 0)) * b * x) * eb)
    bwd = dew.inter_bwd_head + [w for ws in dew.inter_bwd_pre + dew.inter_bwd_post for w in ws] + \
        [dew.emb_grad] + dew.emb_grad_copy + dew.inter_bwd_tail
    assert _bytes(bwd) == pytest.approx((b * x + 6 * L * b * x + 3 * b * x + 2 * b * T * D + 2 * b * D) * eb)
    assert len(fwd) == 2 + L and len(bwd) == 1 + L + 1 + 2
    assert [lbl for lbl, _w in dew.emb_grad_copy] == ["concat_bwd_embeddings"]
    # MLPs: only the bottom MLP's last layer (ReLU) has kernels of its own; the top MLP's last layer has no ReLU
    assert [len(k) for k in dew.bottom_fwd] == [0, 1] and [len(k) for k in dew.bottom_bwd] == [0, 1]
    assert _bytes(dew.bottom_fwd[1]) == pytest.approx(2 * b * D * eb)
    assert _bytes(dew.bottom_bwd[1]) == pytest.approx(3 * b * D * eb)
    assert all(not k for k in dew.top_fwd + dew.top_bwd)
    assert len(dew.loss_fwd) == 1 and not dew.loss_bwd


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 5000), T=st.integers(1, 30), D=st.sampled_from([8, 16, 64]), L=st.integers(1, 4))
def test_unfused_bytes_follow_pytorch_autograd(b, T, D, L):
    """PyTorch's kernels: per cross layer forward mul + add (3 b x each), backward two muls, a bias reduction
    (b x) and 2 adds (the residual, the accumulation into dx0: 2 L adds in all, the last the producer); the cat
    (2 b x) and the embedding part's copy back (2 b T D); per MLP layer with ReLU a ReLU (2 b n) and its backward
    (3 b n), per layer a bias reduction (b n)."""
    top = (64, 32, 1)
    spec = _spec(layers=L, tables=T, dim=D, bottom=(32, D), top=top, dense_fusion="unfused")
    dew = dense_elementwise(spec, b)
    eb, x = 2, (T + 1) * D
    fwd = dew.inter_fwd_head + [w for ws in dew.inter_fwd for w in ws]
    assert _bytes(fwd) == pytest.approx((2 * b * x + 6 * L * b * x) * eb)
    bwd = [w for ws in dew.inter_bwd_pre + dew.inter_bwd_post for w in ws] + [dew.emb_grad]
    assert _bytes(bwd) == pytest.approx((6 + 1 + 6) * L * b * x * eb)
    adds = [lbl for lbl, _w in bwd if "add" in lbl or "accumulate" in lbl]
    assert len(adds) == 2 * L and dew.emb_grad[0] == "dcn0_accumulate_dx0"
    assert _bytes(dew.emb_grad_copy) == pytest.approx(2 * b * T * D * eb) and not dew.inter_bwd_tail
    for widths, fw, bk, last_relu in ((spec.bottom_mlp, dew.bottom_fwd, dew.bottom_bwd, True),
                                      (spec.top_mlp, dew.top_fwd, dew.top_bwd, False)):
        for i, n in enumerate(widths):
            relu = last_relu or i < len(widths) - 1
            assert _bytes(fw[i]) == pytest.approx(2 * b * n * eb if relu else 0.0)
            assert _bytes(bk[i]) == pytest.approx(((3 * b * n) if relu else 0.0) * eb + b * n * eb)


def test_unfused_moves_more_than_epilogue_and_legacy_is_one_kernel_each_way():
    spec = _spec(layers=3, tables=26, dim=128, bottom=(512, 256, 128), top=(1024, 1024, 512, 256, 1))
    tot = {f: _bytes(dense_elementwise(dataclasses.replace(spec, dense_fusion=f), 6912).all())
           for f in ("legacy", "epilogue", "unfused")}
    assert tot["legacy"] < tot["epilogue"] < tot["unfused"]
    legacy = dense_elementwise(dataclasses.replace(spec, dense_fusion="legacy"), 6912)
    assert len(legacy.all()) == 2 and legacy.emb_grad is None


@pytest.mark.parametrize("fusion", ["epilogue", "unfused"])
@pytest.mark.parametrize("interaction", ["dcn", "dot"])
def test_graph_carries_every_kernel_in_order_and_the_push_rides_on_the_producer(small, fusion, interaction):
    spec = _spec(interaction=interaction, dense_fusion=fusion)
    b = spec.global_batch // (G * NODES)
    dew = dense_elementwise(spec, b)
    base = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full")
    nodes = base.programs[0].nodes
    names = [nd.name for nd in nodes if isinstance(nd, ComputeNode)]
    for lbl, _w in dew.all():  # every element-wise kernel is in the graph
        assert lbl in names
    bottom, inter, top = _dense_layers(spec, b)
    n_gemm = sum(nd.name == "gemm" for nd in nodes if isinstance(nd, ComputeNode))
    assert n_gemm == 3 * len(bottom + inter + top) - 1  # forward, dgrad, wgrad; no dgrad for the data input
    # baseline: the backward All-to-All waits for the last kernel of the interaction backward
    (a2a,) = [nd for nd in nodes if isinstance(nd, AllToAllVNode) and nd.name == "a2a_bwd"]
    (dep,) = a2a.deps
    last_inter = [nd for nd in nodes if isinstance(nd, ComputeNode) and nd.phase == "interaction_bwd"][-1]
    assert dep == last_inter.id
    # fused: the push rides on the kernel that writes the embedding gradient, and the copy of the embedding
    # gradient for the bulk exchange is gone
    fused = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full")
    fnodes = fused.programs[0].nodes
    (push,) = [nd for nd in fnodes if isinstance(nd, FusedNode) and nd.name == "interaction_bwd_fused"]
    fused_names = [nd.name for nd in fnodes]
    assert "concat_bwd_embeddings" not in fused_names
    if interaction == "dcn" and fusion == "epilogue":
        # HugeCTR's final matrix_add folded into the first cross layer's dgrad GEMM: it reads the accumulator too
        x = (len(spec.tables) + 1) * spec.dim
        k = push.op.kernel
        assert k.name == "gemm" and k.shape_dict()["m"] == b and k.shape_dict()["n"] == x
        (plain,) = {w.bytes_per_wg for w in (nd.work for nd in nodes if isinstance(nd, ComputeNode))
                    if w.name == "gemm" and w.shape == k.shape}  # the same GEMM in the baseline graph
        assert (k.bytes_per_wg - plain) * k.num_workgroups == pytest.approx(b * x * 2)
        assert "dcn_dx_add" not in fused_names
    else:
        assert push.op.kernel == dew.emb_grad[1]
        assert fused_names.count(dew.emb_grad[0]) == names.count(dew.emb_grad[0]) - 1  # the push replaces it


def _compute_names(graph, rank=0, phase=None):
    return [nd.name for nd in graph.programs[rank].nodes if isinstance(nd, ComputeNode)
            and (phase is None or nd.phase == phase)]


@pytest.mark.parametrize("fusion", ["epilogue", "unfused"])
def test_interaction_backward_runs_its_kernels_in_issue_order(small, fusion):
    """Baseline: the interaction backward's element-wise kernels in dense_elementwise's order (memset, per cross
    layer last to first its pre and post kernels, the producer, the copy, the tail), the four GEMMs of a layer
    between its pre and post kernels; the first bottom layer has no dgrad (its input is the data)."""
    spec = _spec(layers=3, dense_fusion=fusion)
    b = spec.global_batch // (G * NODES)
    dew = dense_elementwise(spec, b)
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full")
    got = _compute_names(graph, phase="interaction_bwd")
    want = [lbl for lbl, _w in dew.inter_bwd_head]
    for li in reversed(range(3)):
        want += [lbl for lbl, _w in dew.inter_bwd_pre[li]] + ["gemm"] * 4 + [lbl for lbl, _w in dew.inter_bwd_post[li]]
    want += [dew.emb_grad[0]] + [lbl for lbl, _w in dew.emb_grad_copy + dew.inter_bwd_tail]
    assert got == want
    bottom_bwd = _compute_names(graph, phase="bottom_mlp_bwd")
    assert bottom_bwd.count("gemm") == 2 * len(spec.bottom_mlp) - 1


def test_fold_keeps_every_gradient_all_reduce_after_its_wgrad(small):
    """Fused (epilogue, DCN): the pushing GEMM is the last of the first cross layer's (after its wgrad); every
    DDP bucket all-reduce of the baseline is there with the same size, after a wgrad GEMM."""
    spec = _spec(layers=2, batch=8 * 48, ddp_bucket_mib=0.001)  # b = 48, a width no layer has; many buckets
    b = spec.global_batch // (G * NODES)
    graphs = {m: build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=m, sim_mode="full")
              for m in ("baseline", "fused")}
    ars = {}
    for m, gr in graphs.items():
        nodes = gr.programs[0].nodes
        by_id = {nd.id: nd for nd in nodes}
        ars[m] = [(nd.name, nd.size_bytes) for nd in nodes if nd.name.startswith("ddp_allreduce")]
        for nd in nodes:
            if nd.name.startswith("ddp_allreduce"):
                (dep,) = nd.deps
                assert by_id[dep].name == "gemm" and by_id[dep].work.shape_dict()["k"] == b  # a wgrad: k is the batch
    assert ars["baseline"] == ars["fused"] and len(ars["fused"]) > 3
    fnodes = graphs["fused"].programs[0].nodes
    i_push = next(i for i, nd in enumerate(fnodes) if nd.name == "interaction_bwd_fused")
    before = [nd for nd in fnodes[:i_push] if isinstance(nd, ComputeNode)]
    assert before[-1].name == "gemm" and before[-1].phase == "interaction_bwd"  # the first layer's v wgrad


@pytest.mark.parametrize("interaction", ["dcn", "dot"])
@pytest.mark.parametrize("batch", [64, 512, 4096])
def test_more_element_wise_work_never_makes_the_iteration_shorter(small, interaction, batch):
    """On an uncontended system (one node: no rail traffic for collectives to meet on), legacy <= epilogue <=
    unfused, strictly for DCN (more bytes each step); dot has the same interaction kernel in all three."""
    times = {f: simulate_dlrm(_spec(interaction=interaction, dense_fusion=f, batch=batch), small, 1,
                              gpus_per_node=G, mode="baseline").iteration_time_s
             for f in ("legacy", "epilogue", "unfused")}
    assert times["legacy"] <= times["epilogue"] <= times["unfused"]
    if interaction == "dcn":
        assert times["legacy"] < times["epilogue"] < times["unfused"]


def test_sgd_step_reads_weights_and_gradients_and_writes_weights(small):
    spec = _spec(dense_optimizer="sgd")
    b = spec.global_batch // (G * NODES)
    bottom, inter, top = _dense_layers(spec, b)
    params = sum(k * n + n for (_l, _m, n, k) in bottom + inter + top)
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full")
    (upd,) = [nd for nd in graph.programs[0].nodes if isinstance(nd, ComputeNode) and nd.phase == "dense_update"]
    assert upd.work.bytes_per_wg * upd.work.num_workgroups == pytest.approx(params * (2 * 2 + 4))  # bf16, fp32 grads
    none = build_dlrm_graph(_spec(), small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full")
    assert not [nd for nd in none.programs[0].nodes if isinstance(nd, ComputeNode) and nd.phase == "dense_update"]


def test_unknown_dense_fusion_is_refused_with_the_field():
    with pytest.raises(SpecError) as exc:
        _spec(dense_fusion="tensorrt")
    assert exc.value.field == "dense_fusion" and "epilogue" in exc.value.message


def test_execution_setting_overrides_the_model_file_and_is_reported(small):
    """``--set dense_fusion=...`` (DLRMSettings.dense_fusion) replaces the model file's setting for DLRM, is
    reported on the result, and is refused for other workloads."""
    from simfuse.fused.knobs import ExecutionSpec
    from simfuse.spec.workload import DLRMSettings
    from simfuse.workloads.run import scaled_spec, simulate_workload

    spec = _spec()
    ex = ExecutionSpec(mode="baseline", settings=(DLRMSettings(dense_fusion="unfused"),), uncertainty="none")
    res = simulate_workload(spec, small, NODES, gpus_per_node=G, execution=ex)
    direct = simulate_dlrm(dataclasses.replace(spec, dense_fusion="unfused"), small, NODES, gpus_per_node=G,
                           mode="baseline")
    assert res["baseline"].iteration_time_s == direct.iteration_time_s
    assert res["baseline"].extras.dense_fusion == "unfused"
    assert scaled_spec(spec, NODES, G, ExecutionSpec()).dense_fusion == "epilogue"  # no override: the file's
    from simfuse.spec import MoESpec

    moe = MoESpec(name="m", layers=1, tokens_per_gpu=8, hidden=16, ffn=32, experts_per_gpu=1, top_k=1)
    with pytest.raises(SpecError) as exc:
        scaled_spec(moe, 1, G, ex)
    assert exc.value.field == "dense_fusion"
