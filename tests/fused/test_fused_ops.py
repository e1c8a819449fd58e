import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.costs import RooflineCostModel
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError
from simfuse.fused import FusedKnobs, make_op
from simfuse.workloads.op import run_op

from ..conftest import make_topology

SMALL = {
    "embedding_all_to_all": {"tables_per_gpu": 2, "rows": 10000, "dim": 64, "pooling": 8, "global_batch": 1024},
    "gemv_all_reduce": {"n": 2048, "k": 1024, "tokens": 4},
    "gemm_all_to_all": {"tokens": 256, "hidden": 512, "ffn": 256, "experts_per_gpu": 2, "top_k": 2},
}
NO_GI = {"put_issue_us": 0.0, "store_issue_us": 0.0, "nic_proxy_latency_us": 0.0, "flag_latency_us": 0.0}


def topo(**kw):
    return make_topology(**kw)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_free_communication_gives_compute_bound_time(name):
    t = make_topology(gpus_per_node=4, nics_per_node=4, nvl_gbps=1e9, nvl_lat_us=0, nic_gbit=1e10, nic_lat_us=0,
                      gpu_initiated=NO_GI)
    op = make_op(name, SMALL[name], 2, 4)
    knobs = FusedKnobs(hbm_comm_factor=0.0)
    r = run_op(op, t, 2, knobs=knobs)
    alone = simulate_kernel(op.work("fused"), RooflineCostModel(t.device)).time_s
    if name == "gemv_all_reduce":
        # the owner still reduces the last slice (n partials at one compute unit's HBM share) after the kernel
        d = t.device
        slice_bytes = op.M * op.rows * op.eb
        alone += op.layout.n * slice_bytes / (d.hbm_bw_bytes_per_s * d.hbm_efficiency / d.compute_units)
    assert r.fused_time_s == pytest.approx(alone, rel=1e-3)
    # nothing exposed but (for GEMV) the final reduction tail
    assert r.fused_exposed_comm_s == pytest.approx(alone - r.fused_compute_s, abs=alone * 1e-3)


@pytest.mark.parametrize("name", ["embedding_all_to_all", "gemm_all_to_all"])
def test_single_wave_is_baseline_plus_injection(name):
    # one wave: everything finishes together, so nothing overlaps; with zero launch/sync gaps the fused run is
    # the baseline plus the injection overheads
    gi = {"put_issue_us": 0.7, "store_issue_us": 0.2, "nic_proxy_latency_us": 1.5, "flag_latency_us": 0.4}
    t = make_topology(gpus_per_node=4, nics_per_node=4, gpu_initiated=gi, launch_us=0.0, sync_us=0.0)
    t0 = make_topology(gpus_per_node=4, nics_per_node=4, gpu_initiated=NO_GI, launch_us=0.0, sync_us=0.0)
    params = dict(SMALL[name])
    if name == "embedding_all_to_all":
        params.update(bags_per_wg=16)
    op = make_op(name, params, 2, 4)
    assert op.work("compute").num_workgroups <= 200  # one wave on the test device (200 slots)
    knobs = FusedKnobs(hbm_comm_factor=0.0, baseline_algorithm="direct")
    r0 = run_op(op, t0, 2, knobs=knobs)
    assert r0.fused_time_s == pytest.approx(r0.baseline_time_s, rel=1e-9)
    r = run_op(op, t, 2, knobs=knobs)
    overhead = (0.7 + 1.5 + 0.4) * 1e-6  # an inter-node put's issue + proxy + flag (the critical path)
    assert r.fused_time_s - r.baseline_time_s == pytest.approx(overhead, rel=1e-6)


@pytest.mark.parametrize("name", ["embedding_all_to_all", "gemm_all_to_all"])
def test_whole_kernel_slice_is_bulk_without_launch_gap(name):
    t = make_topology(gpus_per_node=4, nics_per_node=4, gpu_initiated=NO_GI, launch_us=5.0, sync_us=0.0)
    params = dict(SMALL[name])
    if name == "embedding_all_to_all":
        params["global_batch"] = 16384  # many waves
    op = make_op(name, params, 2, 4)
    W = op.work("compute").num_workgroups
    r = run_op(op, t, 2, knobs=FusedKnobs(slice_wgs=W, hbm_comm_factor=0.0, baseline_algorithm="direct"))
    assert r.fused_time_s == pytest.approx(r.baseline_time_s - 5e-6, rel=1e-9)


@st.composite
def op_cases(draw):
    name = draw(st.sampled_from(sorted(SMALL)))
    g = draw(st.sampled_from([2, 4]))
    nodes = draw(st.integers(1, 2))
    knobs = FusedKnobs(slice_wgs=draw(st.sampled_from([1, 3, 16])),
                       tile_order=draw(st.sampled_from(["remote_first", "natural"])),
                       occupancy_loss=draw(st.sampled_from([0.0, 0.125])))
    t = make_topology(gpus_per_node=g, nics_per_node=draw(st.sampled_from([1, g])),
                      nvl_gbps=draw(st.floats(20, 500)), nic_gbit=draw(st.floats(20, 800)),
                      fabric=draw(st.sampled_from(["fat_tree", "rail_optimized"])),
                      oversub=draw(st.sampled_from([1.0, 2.0])))
    return name, g, nodes, knobs, t


@settings(max_examples=25, deadline=None)
@given(op_cases())
def test_fused_invariants(case):
    name, g, nodes, knobs, t = case
    op = make_op(name, SMALL[name], nodes, g)
    res, sims = run_op(op, t, nodes, knobs=knobs, mode="full", record_usage=True, return_sims=True)
    sim, fabric, net = sims["fused"]
    # bytes sent = bytes received
    assert net.delivered_bytes == pytest.approx(net.injected_bytes, rel=1e-9)
    # pushes carry every remote byte of the output (plus, for GEMV, the all-gather of reduced chunks)
    n = fabric.n_ranks
    remote = 0.0
    for r in range(n):
        dst, out = op.wg_destinations(r)
        remote += float(out[dst != r].sum())
    if name == "gemv_all_reduce":
        remote += op.collective_size_bytes() / n * (n - 1) * n
    assert net.injected_bytes == pytest.approx(remote, rel=1e-9)
    # no link above capacity
    for _a, _b, loads in net.usage:
        assert np.all(loads <= fabric.capacities * (1 + 1e-9))
    # never slower than the baseline (same collective algorithm: direct) plus its injection overheads: issue
    # costs of the slices, proxy and flag latency, the fused kernel's extra HBM traffic and, for GEMV, the
    # owner's reduction of the last slice
    if knobs.occupancy_loss == 0:
        direct = run_op(op, t, nodes, knobs=FusedKnobs(slice_wgs=knobs.slice_wgs, tile_order=knobs.tile_order,
                                                        baseline_algorithm="direct"), mode="full")
        gi = t.gpu_initiated
        slices = -(-op.work("fused").num_workgroups // knobs.slice_wgs)
        bound = (direct.baseline_time_s + slices * gi.put_issue_s + gi.nic_proxy_latency_s + gi.flag_latency_s
                 + (res.fused_compute_s - res.baseline_compute_s))
        if name == "gemv_all_reduce":
            d = t.device
            slice_b = op.M * op.rows * op.eb * min(knobs.slice_wgs, op.wgs_per_chunk)
            bound += n * slice_b / (d.hbm_bw_bytes_per_s * d.hbm_efficiency / d.compute_units) + gi.store_issue_s
            bound += gi.nic_proxy_latency_s + gi.flag_latency_s  # second phase
        assert res.fused_time_s <= bound * (1 + 1e-9)
    # symmetric fast path agrees with full simulation for the symmetric (shifted) order
    if knobs.tile_order == "remote_first":
        sym = run_op(op, t, nodes, knobs=knobs, mode="symmetric")
        assert sym.fused_time_s == pytest.approx(res.fused_time_s, rel=0.01)
        assert sym.baseline_time_s == pytest.approx(res.baseline_time_s, rel=1e-6)


def test_deterministic():
    t = make_topology()
    op = make_op("embedding_all_to_all", SMALL["embedding_all_to_all"], 2, 8)
    a = run_op(op, t, 2).as_dict()
    b = run_op(op, t, 2).as_dict()
    a["params"].pop("wall_s"), b["params"].pop("wall_s")
    assert a == b


def test_remote_first_not_slower_than_natural_under_incast():
    t = make_topology(gpus_per_node=4, nics_per_node=4)
    params = dict(SMALL["embedding_all_to_all"], global_batch=16384)
    op = make_op("embedding_all_to_all", params, 2, 4)
    rf = run_op(op, t, 2, knobs=FusedKnobs(tile_order="remote_first"), mode="full")
    nat = run_op(op, t, 2, knobs=FusedKnobs(tile_order="natural"), mode="full")
    assert rf.fused_time_s <= nat.fused_time_s * (1 + 1e-9)


@pytest.mark.parametrize("name,params,field", [
    ("embedding_all_to_all", {"global_batch": 1001}, "global_batch"),
    ("embedding_all_to_all", {"dim": -3}, "dim"),
    ("embedding_all_to_all", {"dtype": "fp12"}, "dtype"),
    ("gemv_all_reduce", {"n": 100}, "n"),
    ("gemm_all_to_all", {"tokens": 3}, "tokens"),
    ("nope", {}, "op"),
])
def test_bad_params(name, params, field):
    with pytest.raises(SpecError) as exc:
        make_op(name, params, 1, 8)
    assert exc.value.field == field


def test_bad_knobs():
    with pytest.raises(SpecError):
        FusedKnobs(slice_wgs=0).validate()
    with pytest.raises(SpecError):
        FusedKnobs(tile_order="random").validate()


def test_cli_op_json(root):
    r = subprocess.run([sys.executable, "-m", "simfuse.cli", "op", "--op", "gemm_all_to_all", "--topology",
                        str(root / "topologies/h200_nvl8_ib_ndr.yaml"), "--nodes", "2", "--set", "tokens=1024",
                        "--format", "json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["speedup"] == pytest.approx(d["baseline_time_s"] / d["fused_time_s"])
    assert set(d["breakdown"]) == {"baseline", "fused"}
