"""``async_wgrad`` (HugeCTR's DenseLayerComputeConfig): the DLRM builder puts every weight-gradient GEMM of a
layer with a data gradient on a second compute stream; the graph keeps every kernel, the gradients' all-reduces
wait for their wgrads, each layer block joins the streams, and the step gets no longer."""

import collections
import dataclasses

import pytest

from simfuse.errors import SpecError
from simfuse.graph import CollectiveNode, ComputeNode, DelayNode, FusedNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.dlrm_kernels import _dense_layers

from ..conftest import make_topology

G, NODES = 4, 2


def _spec(layers=2, batch=8 * 64, **kw):
    d = {"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13, "bottom_mlp": [32, 16],
         "top_mlp": [64, 32, 1], "interaction": {"kind": "dcn", "layers": layers, "low_rank": 8},
         "dense_dtype": "bf16",
         "embedding": {"dim": 16, "tables": [{"rows": 1000 + 100 * i, "pooling": 2} for i in range(3)]}}
    d.update(kw)
    return workload_from_dict(d, "<test>")


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


def _works(graph):
    return collections.Counter(nd.work for nd in graph.programs[0].nodes
                               if isinstance(nd, ComputeNode) and nd.work is not None)


@pytest.mark.parametrize("mode", ["baseline", "fused"])
def test_wgrads_move_to_the_side_stream_and_no_kernel_is_lost(small, mode):
    spec = _spec()
    b = spec.global_batch // (G * NODES)
    seq = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full")
    asy = build_dlrm_graph(dataclasses.replace(spec, async_wgrad=True), small, NODES, gpus_per_node=G, mode=mode,
                           sim_mode="full")
    assert _works(seq) == _works(asy)  # the same kernels, only their streams differ
    nodes = asy.programs[0].nodes
    side = [nd for nd in nodes if nd.stream == "compute_wgrad"]
    assert all(isinstance(nd, ComputeNode) and nd.work.name == "gemm" for nd in side)
    assert all(nd.work.shape_dict()["k"] == b for nd in side)  # wgrads: the batch is their reduction dimension
    bottom, inter, top = _dense_layers(spec, b)
    # every layer with a dgrad: all but the first bottom layer (its input is the data); in fused mode the first
    # cross layer's v wgrad stays on the main stream (it is issued before the pushing dgrad, HugeCTR's order)
    want = len(bottom + inter + top) - 1 - (1 if mode == "fused" else 0)
    assert len(side) == want
    assert not any(nd.stream == "compute_wgrad" for nd in seq.programs[0].nodes)
    # three layer blocks (top MLP, cross layers, bottom MLP), each joined back onto the main stream
    joins = [nd for nd in nodes if isinstance(nd, DelayNode) and nd.name == "wgrad_join"]
    assert len(joins) == 3 and all(nd.stream == "compute" for nd in joins)
    if mode == "fused":
        assert any(isinstance(nd, FusedNode) for nd in nodes)


def test_gradient_all_reduces_wait_for_their_wgrads(small):
    spec = dataclasses.replace(_spec(ddp_bucket_mib=0.0005), async_wgrad=True)
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full")
    nodes = graph.programs[0].nodes
    by_id = {nd.id: nd for nd in nodes}
    ars = [nd for nd in nodes if isinstance(nd, CollectiveNode) and nd.name.startswith("ddp_allreduce")]
    assert len(ars) > 3
    for nd in ars:
        (dep,) = nd.deps
        assert by_id[dep].work is not None and by_id[dep].work.name == "gemm"
    assert sum(by_id[nd.deps[0]].stream == "compute_wgrad" for nd in ars) >= len(ars) - 1


@pytest.mark.parametrize("batch", [8 * 16, 8 * 256, 8 * 2048])
def test_a_second_stream_never_lengthens_one_gpu_step(batch):
    """One GPU (no communication): the same kernels, their launch latencies free to overlap, the SMs
    time-shared: no longer than on one stream, and no shorter than the SMs' busy time (the one-stream step
    less every kernel's launch latency)."""
    one = System.from_topology(make_topology(gpus_per_node=1, nics_per_node=1))
    spec = _spec(batch=batch)
    seq = simulate_dlrm(spec, one, 1, gpus_per_node=1, mode="baseline")
    asy = simulate_dlrm(dataclasses.replace(spec, async_wgrad=True), one, 1, gpus_per_node=1, mode="baseline")
    assert asy.iteration_time_s <= seq.iteration_time_s * (1 + 1e-12)
    graph = build_dlrm_graph(dataclasses.replace(spec, async_wgrad=True), one, 1, gpus_per_node=1,
                             mode="baseline", sim_mode="full")
    lat = sum(one.cost.launch_latency_s(nd.work) for nd in graph.programs[0].nodes
              if isinstance(nd, ComputeNode) and nd.work is not None)
    assert asy.iteration_time_s >= seq.iteration_time_s - lat - 1e-12
    assert asy.iteration_time_s < seq.iteration_time_s  # some launch latency was hidden


def test_async_wgrad_must_be_a_boolean():
    with pytest.raises(SpecError, match="async_wgrad"):
        _spec(async_wgrad="sometimes")


def test_hugectr_model_files_declare_it(tmp_path):
    from simfuse.spec import load_workload

    for f in ("dlrm_dcnv2_mlperf_hugectr.yaml", "dlrm_dcnv2_mlperf_hugectr_8n.yaml",
              "dlrm_dcnv2_mlperf_hugectr_16n.yaml"):
        assert load_workload(f"models/{f}").async_wgrad is True
    assert load_workload("models/dlrm_dcnv2_mlperf.yaml").async_wgrad is False
