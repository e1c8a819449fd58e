"""LLM training step with tensor + data parallelism (llm_tp_dp): traffic volumes against their formulas,
symmetric = full, DDP buckets and their overlap with backward, bad specs."""

import dataclasses

import pytest
import yaml

from simfuse.errors import SpecError
from simfuse.fused.knobs import ExecutionSpec
from simfuse.graph import CollectiveNode, FusedNode
from simfuse.graph.executor import Executor
from simfuse.spec import LLMSpec, load_workload, workload_from_dict
from simfuse.system import as_system
from simfuse.workloads.llm import attention_work, build_llm_graph, param_counts, simulate_llm
from simfuse.workloads.run import simulate_workload

from ..conftest import make_topology

TINY = {"name": "tiny", "kind": "llm_tp_dp", "layers": 2, "hidden": 256, "ffn": 512, "heads": 8, "kv_heads": 4,
        "vocab": 1000, "seq_len": 128, "micro_batch": 2, "tp": 2}
BF16, FP32 = 2, 4


def tiny(**kw) -> LLMSpec:
    return workload_from_dict({**TINY, **kw}, "<test>")


def topo4():
    return as_system(make_topology(gpus_per_node=4, nics_per_node=4))


def run_graph(spec, system, nodes, mode="baseline", sim_mode="auto", **ex):
    exe = ExecutionSpec(sim_mode=sim_mode, **ex)
    graph = build_llm_graph(spec, system, nodes, mode, execution=exe)
    res = Executor(system, graph, forced_algorithms=exe.forced_algorithms()).run()
    return graph, res


def tp_nodes(graph):
    return [nd for nd in graph.programs[0].nodes if getattr(nd, "group", "").startswith("tp")]


def dp_nodes(graph):
    return [nd for nd in graph.programs[0].nodes if getattr(nd, "group", "").startswith("dp")]


def expected_params_per_tp_rank(s: LLMSpec) -> int:
    """Independent closed form: Llama block (no biases) sharded over tp, two RMSNorms, untied embeddings."""
    d = s.hidden // s.heads
    attn = s.hidden * (s.heads * d + 2 * s.kv_heads * d) + s.hidden * s.hidden
    mlp = 3 * s.hidden * s.ffn
    vocab_rows = -(-s.vocab // s.tp)
    return s.layers * ((attn + mlp) // s.tp + 2 * s.hidden) + 2 * s.hidden * vocab_rows + s.hidden


def test_param_counts_match_the_closed_form():
    for tp in (1, 2):
        s = tiny(tp=tp)
        assert param_counts(s)["total"] == expected_params_per_tp_rank(s)
    # Llama-3-8B (tp=1, every parameter on one rank): about 8.0e9 parameters
    s8 = dataclasses.replace(load_workload("models/llm_tp_dp.yaml"), tp=1)
    assert param_counts(s8)["total"] == pytest.approx(8.03e9, rel=0.01)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_core_flops(causal):
    s = tiny(causal=causal, tp=2)
    w = attention_work(s)
    full = 4 * s.seq_len ** 2 * s.hidden / s.tp * s.micro_batch  # 4 s^2 h / tp per sequence
    assert w.total_flops == pytest.approx(full * (0.5 if causal else 1.0))
    assert attention_work(s, backward=True).total_flops == pytest.approx(2.5 * w.total_flops)


@pytest.mark.parametrize("sp", [False, True])
def test_tp_collectives_and_wire_bytes(sp):
    # one node, tp = 4 = the node: DP size 1, so every byte on the wire is TP traffic
    spec = tiny(tp=4, sequence_parallel=sp, fuse=False)
    system = topo4()
    graph, res = run_graph(spec, system, 1, allreduce_algorithm="ring")
    S = spec.seq_len * spec.micro_batch * spec.hidden * BF16  # one activation: s * b * h * dtype
    tp = tp_nodes(graph)
    assert all(nd.size_bytes == S for nd in tp)
    L = spec.layers
    ops = [nd.op for nd in tp]
    if sp:  # per layer 2 reduce-scatters + 2 all-gathers forward and backward; embedding and LM head 1 each way
        assert ops.count("reduce_scatter") == ops.count("all_gather") == 4 * L + 2
    else:  # per layer 2 all-reduces forward, 2 backward; embedding forward, LM head backward
        assert ops == ["all_reduce"] * (4 * L + 2)
    assert not dp_nodes(graph)
    n = 4
    # ring all-reduce: 2 (n - 1) / n * size per rank; reduce-scatter + all-gather: the same together
    assert res.net.injected_bytes == pytest.approx((4 * L + 2) * 2 * (n - 1) / n * S, rel=1e-9)


def test_fused_mode_moves_the_same_tp_bytes():
    spec = tiny(tp=4, sequence_parallel=True, fuse=True)
    system = topo4()
    gb, rb = run_graph(spec, system, 1, "baseline")
    gf, rf = run_graph(spec, system, 1, "fused")
    fused = [nd for nd in gf.programs[0].nodes if isinstance(nd, FusedNode)]
    assert len(fused) == 8 * spec.layers + 2  # 4 GEMM+RS and 4 AG+GEMM per layer; LM head forward + backward
    assert rf.net.injected_bytes == pytest.approx(rb.net.injected_bytes, rel=1e-9)


def test_tp1_has_no_tp_collectives_and_dp_moves_all_gradients():
    spec = tiny(tp=1)
    system = topo4()
    graph, res = run_graph(spec, system, 2, allreduce_algorithm="ring")  # 8 ranks: DP size 8
    assert not tp_nodes(graph)
    grad_bytes = expected_params_per_tp_rank(spec) * FP32
    assert sum(nd.size_bytes for nd in dp_nodes(graph)) == pytest.approx(grad_bytes)
    n = 8
    assert res.net.injected_bytes == pytest.approx(2 * (n - 1) / n * grad_bytes, rel=1e-9)


def test_dp_allreduce_total_is_parameter_bytes_over_tp():
    spec = tiny(tp=2)
    graph = build_llm_graph(spec, topo4(), 2, "baseline")
    full_params = expected_params_per_tp_rank(tiny(tp=1))
    dp = dp_nodes(graph)
    # sharded parameters split over tp; only the (tiny) replicated norms are not divided
    replicated = (2 * spec.layers + 1) * spec.hidden
    assert sum(nd.size_bytes for nd in dp) == pytest.approx(((full_params - replicated) / 2 + replicated) * FP32)
    assert {nd.group for nd in dp} == {"dp0"} and all(nd.stream == "comm_dp" for nd in dp)
    assert graph.groups["dp0"].ranks == (0, 2, 4, 6) and graph.groups["tp0"].ranks == (0, 1)


def test_bucket_count_and_launch_points():
    system = topo4()
    small = build_llm_graph(tiny(ddp_bucket_mib=1e-6), system, 2, "baseline")
    # every unit (LM head, each layer, embedding) fills a bucket of its own
    assert len(dp_nodes(small)) == tiny().layers + 2
    nodes = small.programs[0].nodes
    for nd in dp_nodes(small):
        (dep,) = nd.deps
        assert nodes[dep].name in ("lm_head_wgrad", "embedding_bwd") or nodes[dep].name.startswith("qkv_wgrad")
    assert len(dp_nodes(build_llm_graph(tiny(ddp_bucket_mib=1e6), system, 2, "baseline"))) == 1
    # buckets a little smaller than one layer's gradients: the LM head (smaller than a layer) shares the first
    # bucket with the last layer, every other layer closes its own, the embedding is the remainder
    spec = tiny()
    c = {k: v * FP32 for k, v in param_counts(spec).items()}
    assert c["lm_head"] < c["layer"] and c["embedding"] < c["layer"]
    g = build_llm_graph(tiny(ddp_bucket_mib=0.999 * c["layer"] / 2**20), system, 2, "baseline")
    assert [nd.size_bytes for nd in dp_nodes(g)] == pytest.approx(
        [c["lm_head"] + c["layer"]] + [c["layer"]] * (spec.layers - 1) + [c["embedding"]])


def test_dp_allreduce_overlaps_backward():
    # long backward (many layers, long sequences), buckets of one layer: all but the last buckets' all-reduces
    # hide behind backward compute
    spec = tiny(layers=8, seq_len=1024, ddp_bucket_mib=1e-6)
    system = as_system(make_topology(gpus_per_node=4, nics_per_node=4, nic_gbit=100))
    graph, res = run_graph(spec, system, 2)
    dp = [(t0, t1) for (lbl, t0, t1) in res.critical.phases if lbl.startswith("allreduce_bucket")]
    assert len(dp) == spec.layers + 2
    total_dp = sum(t1 - t0 for t0, t1 in dp)
    exposed_dp = res.time_s - res.kernel_end_s
    assert min(t0 for t0, _ in dp) < res.kernel_end_s  # the first bucket starts during backward
    assert 0 <= exposed_dp < total_dp
    assert res.time_s == pytest.approx(max(t1 for _, t1 in dp))  # the step ends with the last bucket


@pytest.mark.parametrize("mode,sp", [("baseline", False), ("baseline", True), ("fused", True)])
def test_symmetric_equals_full(mode, sp):
    # 2 nodes x 4 GPUs, tp = 2, 2 layers: TP groups {0,1} {2,3} ..., DP groups {0,2,4,6} {1,3,5,7}
    spec = tiny(sequence_parallel=sp)
    system = topo4()
    g_sym, sym = run_graph(spec, system, 2, mode, allreduce_algorithm="ring")
    g_full, full = run_graph(spec, system, 2, mode, sim_mode="full", allreduce_algorithm="ring")
    assert sym.sim_mode == "symmetric" and full.sim_mode == "full"
    assert len(g_full.programs) == 8 and len(g_sym.programs) == 1
    assert sym.time_s == pytest.approx(full.time_s, rel=1e-9)
    assert full.net.injected_bytes == pytest.approx(8 * sym.net.injected_bytes, rel=1e-9)


def test_simulate_llm_and_run_hook():
    system = topo4()
    res = simulate_llm(tiny(sequence_parallel=True), system, 2)
    assert set(res) == {"baseline", "fused"}
    for r in res.values():
        assert r.iteration_time_s > 0 and r.compute_time_s <= r.iteration_time_s * (1 + 1e-9)
        # the step is the critical rank's compute plus the communication it waits on, nothing else
        assert r.exposed_comm_time_s == pytest.approx(r.iteration_time_s - r.compute_time_s, rel=1e-9, abs=1e-15)
    via = simulate_workload(tiny(sequence_parallel=True), system, 2, mode="baseline")
    assert via["baseline"].iteration_time_s == pytest.approx(res["baseline"].iteration_time_s, rel=1e-12)
    # more data-parallel replicas never shorten the step (same per-GPU work, bigger DP all-reduce)
    assert simulate_llm(tiny(), system, 4, execution=ExecutionSpec(mode="baseline"))["baseline"]\
        .iteration_time_s >= simulate_llm(tiny(), system, 2, execution=ExecutionSpec(mode="baseline"))[
        "baseline"].iteration_time_s * (1 - 1e-9)


@pytest.mark.parametrize("name", ["llm_tp_dp", "llm_tp_dp_70b"])
def test_model_files_load_and_run_two_layers(root, h200, name):
    spec = load_workload(root / "models" / f"{name}.yaml")
    assert spec.kind == "llm_tp_dp" and spec.sequence_parallel and set(spec.fuse) == {"gemm_rs", "ag_gemm"}
    res = simulate_llm(dataclasses.replace(spec, layers=2), h200, 2)
    assert res["fused"].iteration_time_s > 0 and res["baseline"].iteration_time_s > 0


@pytest.mark.parametrize("change,field", [
    ({"tp": 3}, "tp"),                          # does not divide the heads
    ({"kv_heads": 3}, "kv_heads"),              # does not divide the heads
    ({"heads": 3}, "heads"),                    # does not divide hidden
    ({"tp": 4, "kv_heads": 2}, "tp"),           # replicated KV heads are not modelled
    ({"fuse": True}, "fuse"),                   # fused operators need sequence parallelism
    ({"fuse": "gemm_ag"}, "fuse"),
    ({"sequence_parallel": True, "seq_len": 3, "micro_batch": 1}, "seq_len"),
    ({"dtype": "int4"}, "dtype"),
    ({"ddp_bucket_mib": 0}, "ddp_bucket_mib"),
    ({"layers": 0}, "layers"),
    ({"sequence_paralel": True}, "sequence_paralel"),
])
def test_bad_specs(tmp_path, change, field):
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({**TINY, **change}))
    with pytest.raises(SpecError) as exc:
        load_workload(p)
    assert exc.value.field == field and str(p) in str(exc.value)


def test_tp_must_divide_the_gpus_per_node():
    spec = tiny(tp=4, heads=8, kv_heads=4)
    system = as_system(make_topology(gpus_per_node=2, nics_per_node=2))
    with pytest.raises(SpecError) as exc:
        simulate_llm(spec, system, 2)
    assert exc.value.field == "tp"


def test_fuse_choices():
    assert tiny(sequence_parallel=True).fuse == ("gemm_rs", "ag_gemm")  # default with sequence parallelism
    assert tiny().fuse == ()
    assert tiny(sequence_parallel=True, fuse="gemm_rs").fuse == ("gemm_rs",)
    assert tiny(sequence_parallel=True, fuse=["ag_gemm"]).fuse == ("ag_gemm",)
    spec = tiny(sequence_parallel=True, fuse="gemm_rs")
    g = build_llm_graph(spec, topo4(), 1, "fused")
    kinds = {type(nd.op).__name__ for nd in g.programs[0].nodes if isinstance(nd, FusedNode)}
    assert kinds == {"GemmReduceScatter"}
    assert any(isinstance(nd, CollectiveNode) and nd.op == "all_gather" for nd in g.programs[0].nodes)
