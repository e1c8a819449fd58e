"""GEMM + ReduceScatter and AllGather + GEMM (tensor parallelism with sequence parallelism)."""

import numpy as np
import pytest

from simfuse.costs import RooflineCostModel
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError
from simfuse.fused import FusedKnobs, make_op
from simfuse.workloads.op import run_op

from ..conftest import make_topology

NO_GI = {"put_issue_us": 0.0, "store_issue_us": 0.0, "nic_proxy_latency_us": 0.0, "flag_latency_us": 0.0}
RS = {"m": 1024, "n": 512, "k": 2048}
AG = {"m": 1024, "n": 2048, "k": 512}


@pytest.mark.parametrize("name,params", [("gemm_reduce_scatter", RS), ("all_gather_gemm", AG)])
@pytest.mark.parametrize("tp", [2, 4])
def test_symmetric_equals_full_on_node_local_groups(name, params, tp):
    t = make_topology(gpus_per_node=4, nics_per_node=4)
    op = make_op(name, {**params, "tp": tp}, 1, 4)
    sym = run_op(op, t, 1, mode="symmetric")
    full = run_op(op, t, 1, mode="full")
    assert sym.fused_time_s == pytest.approx(full.fused_time_s, rel=1e-9)
    assert sym.baseline_time_s == pytest.approx(full.baseline_time_s, rel=1e-9)


def test_gemm_rs_tiles_go_to_the_owner_of_their_row_chunk():
    op = make_op("gemm_reduce_scatter", {**RS, "tp": 4}, 2, 4)
    for rank in (0, 5):
        dst, out = op.wg_destinations(rank)
        base = rank // 4 * 4
        # every owner of the rank's TP group gets 1/tp of the m x n output, in bytes
        counts = np.bincount(dst - base, weights=out, minlength=4)
        assert np.allclose(counts, RS["m"] * RS["n"] * 2 / 4)
        assert set(dst.tolist()) == set(range(base, base + 4))


@pytest.mark.parametrize("name,params", [("gemm_reduce_scatter", RS), ("all_gather_gemm", AG)])
def test_fused_moves_the_reduce_scatter_or_all_gather_volume(name, params):
    # per rank (tp - 1) / tp of the collective's buffer leaves the GPU, as in the bulk collective
    t = make_topology(gpus_per_node=4, nics_per_node=4)
    op = make_op(name, {**params, "tp": 4}, 1, 4)
    _res, sims = run_op(op, t, 1, mode="symmetric", return_sims=True)
    want = 3 / 4 * op.collective_size_bytes()
    assert sims["fused"][2].injected_bytes == pytest.approx(want, rel=1e-9)
    assert sims["baseline"][2].injected_bytes == pytest.approx(want, rel=1e-9)


def test_free_communication_leaves_the_gemm():
    t = make_topology(gpus_per_node=4, nics_per_node=4, nvl_gbps=1e9, nvl_lat_us=0, gpu_initiated=NO_GI)
    cost = RooflineCostModel(t.device)
    rs = make_op("gemm_reduce_scatter", {**RS, "tp": 4}, 1, 4)
    r = run_op(rs, t, 1, knobs=FusedKnobs(hbm_comm_factor=0.0))
    alone = simulate_kernel(rs.work("fused"), cost).time_s
    d = t.device
    # plus the owner's reduction of the last slice: tp partial tiles at one compute unit's HBM share
    tail = 4 * rs.BM * rs.BN * rs.eb / (d.hbm_bw_bytes_per_s * d.hbm_efficiency / d.compute_units)
    assert r.fused_time_s == pytest.approx(alone + tail, rel=1e-6)
    ag = make_op("all_gather_gemm", {**AG, "tp": 4}, 1, 4)
    r = run_op(ag, t, 1, knobs=FusedKnobs(hbm_comm_factor=0.0))
    assert r.fused_time_s == pytest.approx(simulate_kernel(ag.work("fused"), cost).time_s, rel=1e-6)


def test_all_gather_gemm_waits_for_the_peer_shards():
    # slow NVLink: the shards arrive after the local shard's tiles are done, so the kernel cannot finish before
    # a shard has crossed the link: kernel end >= shard bytes / link bandwidth
    t = make_topology(gpus_per_node=4, nics_per_node=4, nvl_gbps=1.0, gpu_initiated=NO_GI)
    ag = make_op("all_gather_gemm", {**AG, "tp": 4}, 1, 4)
    r = run_op(ag, t, 1, knobs=FusedKnobs(hbm_comm_factor=0.0))
    assert r.fused_compute_s >= ag.shard_bytes() / 1e9


@pytest.mark.parametrize("name", ["gemm_reduce_scatter", "all_gather_gemm"])
def test_fused_never_beats_launch_plus_one_push(name):
    """Physical floor on a tiny shape: the fused kernel's pushes leave only once it is launched, so a peer's
    data lands no sooner than launch + store issue + the link's latency; all_gather_gemm once pushed before its
    launch and came out at the launch latency alone."""
    t = make_topology(gpus_per_node=4, nics_per_node=4, nvl_lat_us=1.0,
                      gpu_initiated={"store_issue_us": 0.1, "flag_latency_us": 0.0})
    op = make_op(name, {"m": 8, "n": 8, "k": 8, "tp": 4}, 1, 4)
    r = run_op(op, t, 1, mode="full")
    floor = t.device.kernel_launch_latency_s + 0.1e-6 + 1.0e-6
    assert r.fused_time_s >= floor * (1 - 1e-9)


@pytest.mark.parametrize("name,params,field", [
    ("gemm_reduce_scatter", {**RS, "tp": 3}, "tp"),
    ("gemm_reduce_scatter", {**RS, "m": 1026, "tp": 4}, "m"),
    ("gemm_reduce_scatter", {**RS, "k": 2050, "tp": 4}, "k"),
    ("all_gather_gemm", {**AG, "n": 2050, "tp": 4}, "n"),
    ("all_gather_gemm", {**AG, "tile_n": 64}, "tile_n"),
])
def test_bad_parameters(name, params, field):
    with pytest.raises(SpecError) as exc:
        make_op(name, params, 1, 4)
    assert exc.value.field == field
