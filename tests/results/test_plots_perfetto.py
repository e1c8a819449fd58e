"""Perfetto/Chrome trace writer and plot helpers: valid output, required events, determinism."""

import json

import numpy as np
import pandas as pd
import pytest

from simfuse.engine import Simulation
from simfuse.fused.ops import make_op
from simfuse.results.perfetto import chrome_trace, link_counter_series, write_chrome_trace
from simfuse.results.plots import plot_breakdown, plot_speedup_vs_nodes, plot_speedup_vs_size, plot_timeline
from simfuse.workloads.op import run_op

SMALL = {"global_batch": 1024, "dim": 32, "tables_per_gpu": 1, "rows": 1000, "pooling": 4}


@pytest.fixture(scope="module")
def runs(h200):
    op = make_op("embedding_all_to_all", SMALL, 2, 2)
    res, sims = run_op(op, h200, 2, mode="full", record=True, record_usage=True, return_sims=True)
    return res, [("baseline", *sims["baseline"]), ("fused", *sims["fused"])]


class _Net:
    """A stand-in FlowNetwork with hand-made usage."""

    def __init__(self, names, usage):
        self.names = names
        self.capacity = np.full(len(names), 100e9)
        self.usage = usage


def test_trace_is_valid_json_with_metadata_events_and_counters(tmp_path, runs):
    _res, rr = runs
    path = write_chrome_trace(tmp_path / "t.json", rr)
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ns"
    ev = data["traceEvents"]
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"baseline / rank 0", "fused / rank 0", "baseline / links (GB/s)", "fused / links (GB/s)"} <= names
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"compute", "collectives", "fused ops"} <= threads
    spans = [e for e in ev if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"kernel", "collective", "fused"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and all("GB/s" in e["args"] for e in counters)
    # every pid used by an event is named; timestamps in microseconds (the run lasts microseconds, not 1e-6)
    named = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert {e["pid"] for e in ev} <= named
    fused_end = max(e["ts"] + e["dur"] for e in spans if e["cat"] == "fused")
    assert fused_end == pytest.approx(_res.fused_time_s * 1e6, rel=1e-6)
    # each counter series ends idle
    last = {}
    for e in counters:
        last[(e["pid"], e["name"])] = e["args"]["GB/s"]
    assert set(last.values()) == {0.0}


def test_trace_is_deterministic(tmp_path, runs):
    _res, rr = runs
    a = write_chrome_trace(tmp_path / "a.json", rr).read_bytes()
    b = write_chrome_trace(tmp_path / "b.json", rr).read_bytes()
    assert a == b
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_counter_series_skips_idle_links_caps_and_marks_gaps():
    usage = [(0.0, 1e-6, np.array([10e9, 0.0, 5e9])),
             (2e-6, 3e-6, np.array([10e9, 0.0, 1e9]))]
    net = _Net(["a", "idle", "c"], usage)
    series = dict(link_counter_series(net))
    assert set(series) == {"a", "c"}
    # gap between 1 us and 2 us: goes to 0 then back up; ends at 0
    assert series["a"] == [(0.0, 10.0), (1e-6, 0.0), (2e-6, 10.0), (3e-6, 0.0)]
    assert [n for n, _ in link_counter_series(net, max_links=1)] == ["a"]  # busiest kept


def test_trace_without_network_or_usage():
    sim = Simulation()
    sim.recorder.add("kernel", "k", "gpu0/compute", 0, 0.0, 1e-6)
    sim.recorder.add("other", "x", "custom", 0, 0.0, 2e-6)
    ev = chrome_trace([("run", sim, None)])["traceEvents"]
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {"compute", "custom"}
    assert not [e for e in ev if e["ph"] == "C"]


def _png_ok(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_plot_speedup_vs_size(tmp_path):
    rows = []
    for op in ("embedding_all_to_all", "gemm_all_to_all"):
        for nodes, g in ((1, 4), (2, 8)):
            for size in (1e6, 4e6, 16e6):
                rows.append({"op": op, "nodes": nodes, "gpus_per_node": g, "comm_bytes_per_rank": size,
                             "speedup": 1.0 + size / 1e8 + nodes / 10})
    _png_ok(plot_speedup_vs_size(pd.DataFrame(rows), tmp_path / "s.png"))


def test_plot_timeline_path_and_axes(tmp_path, runs):
    from matplotlib.figure import Figure

    _res, rr = runs
    _png_ok(plot_timeline(tmp_path / "t.png", rr, title="x"))
    _png_ok(plot_timeline(tmp_path / "t2.png", rr, links=["nic_tx[0,0]", "nvl_tx[0]", "no_such_link"]))
    ax = Figure().add_subplot(1, 1, 1)
    assert plot_timeline(ax, rr) is ax
    assert len(ax.get_yticklabels()) >= 4


def _dlrm_frame(with_model=True, with_speedup=True):
    rows = []
    for model in (["a", "b"] if with_model else [None]):
        for nodes in (1, 2, 4, 8):
            base_c, base_x = 10e-3, 2e-3 * nodes
            fused_c, fused_x = 10.5e-3, 0.5e-3 * nodes
            r0 = {"nodes": nodes, "gpus": nodes * 8, "mode": "baseline", "iteration_time_s": base_c + base_x,
                  "compute_time_s": base_c, "exposed_comm_time_s": base_x}
            r1 = {"nodes": nodes, "gpus": nodes * 8, "mode": "fused", "iteration_time_s": fused_c + fused_x,
                  "compute_time_s": fused_c, "exposed_comm_time_s": fused_x}
            if with_speedup:
                r0["speedup"] = np.nan
                r1["speedup"] = (base_c + base_x) / (fused_c + fused_x)
            if with_model:
                r0["model"] = r1["model"] = model
            rows += [r0, r1]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("with_model,with_speedup", [(True, True), (False, False)])
def test_plot_speedup_vs_nodes_and_breakdown(tmp_path, with_model, with_speedup):
    df = _dlrm_frame(with_model, with_speedup)
    _png_ok(plot_speedup_vs_nodes(df, tmp_path / "n.png"))
    _png_ok(plot_breakdown(df, tmp_path / "b.png"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.png", "n.png"]
