"""experiments/validation/network_validation.py on its smoke subset: the leave-source-out table, the fitted ranges and the
summary are written, every held-out source is predicted with terms fitted without it, and the ranges hold the
nominal fit."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_network_validation_smoke(root, tmp_path):
    r = subprocess.run([sys.executable, "experiments/validation/network_validation.py", "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    table = pd.read_csv(tmp_path / "leave_source_out.csv")
    folds = pd.read_csv(tmp_path / "fits_per_fold.csv")
    assert set(table["held_out_source"]) == set(folds["held_out_source"]) and len(folds) == 3
    # each held-out source is predicted with the terms of its fabric class fitted on the other sources only
    for _, f in folds.iterrows():
        rows = table[table["held_out_source"] == f["held_out_source"]]
        prefix = "tcpxo." if (rows["fabric_class"] == "gpudirect_tcpxo").all() else ""
        assert len(rows) and (rows["scale_out.efficiency"] == f[prefix + "scale_out.efficiency"]).all()
        assert f["held_out_source"] not in str(f["tcpxo_trained_on"]) + str(f["rdma_trained_on"])
    # the TCPXO terms of the A3 Mega fork's fold come from the other A3 Mega source (a ring all-gather), never from
    # an InfiniBand run
    fork = folds.set_index("held_out_source").loc["gcp_a3mega_fork"]
    assert fork["tcpxo_trained_on"] == "dstack_a3mega" and fork["rdma_trained_on"] == "nccl_tests_152"
    err = 100 * (table["simulated_s"] / table["measured_s"] - 1)
    assert (abs(err - table["pct_error"]) < 1e-3).all()  # the CSV keeps 6 significant digits
    ranges = pd.read_csv(tmp_path / "fitted_ranges.csv")
    assert set(ranges["parameter"]) == {"scale_out.efficiency", "scale_out.latency_us", "collectives.net_overhead_us",
                                        "scale_out.full_node_efficiency", "tcpxo.scale_out.efficiency",
                                        "tcpxo.scale_out.latency_us"}
    # the full-node efficiency applies to the A100 run (8 GPUs on 4 InfiniBand NICs, NCCL's defaults), not to the
    # TCPXO runs; it is trained only where a training run takes it (not in the A100 source's own fold)
    assert set(table.loc[table["full_node"], "run_id"]) == {"ncclt152_a100_ar_2x8"}
    assert fork["full_node_trained_on"] == "nccl_tests_152"
    assert pd.isna(folds.set_index("held_out_source").loc["nccl_tests_152", "full_node_trained_on"])
    assert ((ranges["low"] <= ranges["nominal"]) & (ranges["nominal"] <= ranges["high"])).all()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["smoke"] and summary["runs_simulated"] == 3 and "target_met" in summary
    # every simulated point is reported, whatever its evaluation set
    from simfuse.calibrate.corpus import load_corpus

    nv, corpus = _nv(), load_corpus(root / "data" / "network_corpus")
    simulated = [r for r in corpus.runs if r.source_id in nv.SMOKE_SOURCES]
    assert len(table) == sum(len(nv._sizes(r, True)) for r in simulated)
    # the target set is H100/H200 with a known NIC rate; the A100 run has its own row
    sets = pd.read_csv(tmp_path / "summary_by_evaluation_set.csv").set_index("evaluation_set")
    assert set(sets.index) == {"H100/H200", "A100"} and sets.loc["A100", "runs"] == 1
    target = table[(table["evaluation_set"] == "H100/H200") & (table["size_bytes"] >= 64 * 2**20)]
    assert summary["target_set_ge64MiB"]["points"] == len(target)


def _nv():
    import importlib.util

    path = ROOT / "experiments" / "validation" / "network_validation.py"
    spec = importlib.util.spec_from_file_location("network_validation_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fit_keeps_the_nominal_value_of_a_term_the_training_points_do_not_move():
    nv = _nv()
    rows = []
    # one run; its simulated time depends on the efficiency only (best at 0.9), not on the overhead
    for eff in (0.8, 0.9, 1.0):
        for ov in (0.0, 1e-6, 2e-6):
            rows.append(("r", 1 << 20, eff, 3e-6, ov, 1.0 + abs(eff - 0.9), "ring"))
    sim = pd.DataFrame(rows, columns=["run_id", "size_bytes", "scale_out.efficiency", "scale_out.latency_s",
                                      "collectives.net_overhead_s", "simulated_s", "algorithm"])
    meas = {("r", 1 << 20): 1.0}
    nominal = {"scale_out.efficiency": 0.8, "scale_out.latency_s": 3e-6, "collectives.net_overhead_s": 1e-6}
    got = nv.fit(sim, meas, ["r"], {"r": "s"}, None, nominal)
    # the efficiency is pinned by the data; the flat overhead keeps its nominal, not the grid's first value
    assert got == {"scale_out.efficiency": 0.9, "scale_out.latency_s": 3e-6, "collectives.net_overhead_s": 1e-6}
    assert nv.fit(sim, meas, ["r"], {"r": "s"}, None)["collectives.net_overhead_s"] == 0.0


def test_a_full_node_efficiency_without_training_points_is_the_fitted_efficiency():
    nv = _nv()
    rows = []
    # the run's time moves with the efficiency (best at 0.96) and not with the full-node efficiency
    for eff in (0.92, 0.96, 1.0):
        for fn in (0.8, 0.9, 0.96):
            rows.append(("r", 1 << 20, eff, 3e-6, 1e-6, fn, 1.0 + abs(eff - 0.96), "ring"))
    sim = pd.DataFrame(rows, columns=["run_id", "size_bytes", "scale_out.efficiency", "scale_out.latency_s",
                                      "collectives.net_overhead_s", nv.FULL_NODE, "simulated_s", "algorithm"])
    nominal = {"scale_out.efficiency": 0.92, "scale_out.latency_s": 3e-6, "collectives.net_overhead_s": 1e-6,
               nv.FULL_NODE: 0.92}
    got = nv.fit(sim, {("r", 1 << 20): 1.0}, ["r"], {"r": "s"}, None, nominal)
    assert got["scale_out.efficiency"] == 0.96 and got[nv.FULL_NODE] == 0.96


def test_runs_without_a_nic_rate_are_tested_not_trained_on():
    from simfuse.calibrate.corpus import load_corpus

    nv = _nv()
    corpus = load_corpus(ROOT / "data" / "network_corpus")
    untrained = {r.run_id for r in corpus.runs if not nv.trains(r)}
    assert {"nccl1531_h800_a2a_8x8", "xxrjun_c00_2x8_all_to_all"} <= untrained
    assert all(r.nic_gbps is None for r in corpus.runs if r.run_id in untrained)
    assert nv.trains(corpus.run("xxrjun_c01_10x8_all_to_all"))


def test_evaluation_sets_split_the_target_gpus_from_the_rest_and_unknown_hardware():
    from simfuse.calibrate.corpus import load_corpus

    nv = _nv()
    assert [nv.gpu_name(g) for g in ("H100 80GB HBM3", "H20", "H200", "GH200", "H800", "A100-SXM4-80GB", "B200",
                                     "V100 (DGX-2 class, 16 per node)", "GB200")] == \
        ["H100", "H20", "H200", "GH200", "H800", "A100", "B200", "V100", "GB200"]
    corpus = load_corpus(ROOT / "data" / "network_corpus")
    sets = {r.run_id: nv.evaluation_set(r) for r in corpus.runs}
    # H20 and H800 are Hopper but not the target's GPUs; a run whose NIC rate is not known is no test of the
    # network model, whatever its GPU
    assert sets["nccl1244_h20_ar_2x8_default"] == "H20"
    assert sets["xxrjun_c00_2x8_all_to_all"] == sets["nccl1531_h800_a2a_8x8"] == "hardware unknown"
    assert sets["ncclt152_a100_ar_2x8"] == "A100" and sets["together_b200_ar_2x8_ring"] == "B200"
    assert sets["a3mega_ar_2x8"] == sets["xxrjun_c01_10x8_all_gather"] == "H100/H200"
    assert all(sets[r.run_id] == "hardware unknown" for r in corpus.runs if r.nic_gbps is None)


def test_tcpxo_runs_form_their_own_fabric_class_with_a_wider_latency_grid():
    from simfuse.calibrate.corpus import load_corpus

    nv = _nv()
    corpus = load_corpus(ROOT / "data" / "network_corpus")
    tcpxo = {r.run_id for r in corpus.runs if nv.fabric_class(r) == nv.TCPXO}
    assert tcpxo == {"a3mega_ar_2x8", "dstack_a3mega_ag_2x8", "mgcafe_a3mega_ag_2x8"}
    assert len({corpus.run(r).source_id for r in tcpxo}) == 3  # three independent sources: leave-source-out works
    g = nv.grid_for(corpus.run("a3mega_ar_2x8"), nv.GRID, smoke=False)
    assert set(nv.GRID["scale_out.latency_s"]) < set(g["scale_out.latency_s"])
    assert nv.grid_for(corpus.run("ncclt152_a100_ar_2x8"), nv.GRID, smoke=False) is nv.GRID


def test_tcpxo_terms_come_only_from_plain_tcpxo_training_runs():
    nv = _nv()
    rows = []
    # two RDMA runs best at efficiency 1.0, one TCPXO ring best at 0.8, one TCPXO tree (not plain) best at 0.6
    for eff in (0.6, 0.8, 1.0):
        for run, best, algo in (("ib1", 1.0, "ring"), ("ib2", 1.0, "ring"), ("tx", 0.8, "ring"),
                                ("txtree", 0.6, "tree")):
            rows.append((run, 1 << 26, eff, 3e-6, 1e-6, 1.0 + abs(eff - best), algo))
    sim = pd.DataFrame(rows, columns=["run_id", "size_bytes", "scale_out.efficiency", "scale_out.latency_s",
                                      "collectives.net_overhead_s", "simulated_s", "algorithm"])
    meas = {(r, 1 << 26): 1.0 for r in ("ib1", "ib2", "tx", "txtree")}
    class_of = {"ib1": nv.RDMA, "ib2": nv.RDMA, "tx": nv.TCPXO, "txtree": nv.TCPXO}
    source_of = {"ib1": "a", "ib2": "b", "tx": "c", "txtree": "d"}
    nominal = {"scale_out.efficiency": 1.0, "scale_out.latency_s": 3e-6, "collectives.net_overhead_s": 1e-6}
    params, trained = nv.fit_classes(sim, meas, list(class_of), class_of, source_of, ("ring", "direct"), nominal)
    assert params[nv.RDMA]["scale_out.efficiency"] == 1.0 and params[nv.TCPXO]["scale_out.efficiency"] == 0.8
    assert trained == {nv.RDMA: ["a", "b"], nv.TCPXO: ["c"]}
    # without a plain TCPXO training run, the TCPXO runs are predicted with the RDMA terms
    params, trained = nv.fit_classes(sim, meas, ["ib1", "txtree"], class_of, source_of, ("ring", "direct"), nominal)
    assert params[nv.TCPXO] == params[nv.RDMA] and trained[nv.TCPXO] == []


def test_terms_said_not_to_move_a_run_do_not_move_it(root):
    """static_terms (simulated once, copied to every value) against simulation at each value: the full-node
    efficiency moves only runs whose GPUs drive every NIC with NCCL's default connections, and replaces the
    efficiency there; the per-message overhead moves every run (a multi-node ring's NVLink hops too)."""
    from simfuse.calibrate.corpus import load_corpus, topology_for_run
    from simfuse.collectives import run_collective
    from simfuse.spec import load_topology

    nv = _nv()
    corpus = load_corpus(root / "data" / "network_corpus")
    grid = {"scale_out.efficiency": (0.8, 1.0), "collectives.net_overhead_s": (0.0, 2e-6), nv.FULL_NODE: (0.7, 0.9)}
    expect = {"ncclt309b_h100_ar_8x8": {"scale_out.efficiency"}, "xxrjun_c01_10x4_all_gather": {nv.FULL_NODE},
              "xxrjun_c01_10x8_all_to_all": {"scale_out.efficiency"}, "ncclt309b_h100_ar_8x8_tuned": {nv.FULL_NODE}}
    for rid, static in expect.items():
        run = corpus.run(rid)
        base = load_topology(root / "topologies" / "h100_nvl8_ib_ndr.yaml").with_overrides(
            {nv.FULL_NODE: 0.75})  # a file that sets it: topology_for_run drops it for the tuned run
        topo, _ = topology_for_run(run, base)
        assert nv.static_terms(run, topo, grid) == static, rid

        def time(over, run=run, topo=topo):
            t = topo.with_overrides(over) if over else topo
            return run_collective(t, run.nodes, run.collective, 256 * 2**20, gpus_per_node=run.gpus_per_node).time_s
        for k, values in grid.items():
            if k == nv.FULL_NODE and topo.scale_out.full_node_efficiency is None:
                continue  # not set for this run: nothing to move
            times = {time({k: v}) for v in values}
            if k in static:
                assert len(times) == 1, (rid, k)
            elif k != "collectives.net_overhead_s":  # the overhead may be hidden behind the flows at this size
                assert len(times) == len(values), (rid, k)  # the efficiency that applies moves it


def test_docs_quote_the_committed_leave_source_out_result(root):
    """The README, the corpus page and the validation's own README quote the committed summary.json (its target
    set's held-out median and maximum) and the corpus's size, not an earlier run's."""
    import re

    summary = json.loads((root / "experiments/results/network_validation/summary.json").read_text())
    target = summary["target_set_ge64MiB"]
    median, worst = target["median_abs_pct"], target["max_abs_pct"]
    runs = len(pd.read_csv(root / "data/network_corpus/runs.csv"))
    sources = len(pd.read_csv(root / "data/network_corpus/sources.csv"))
    readme = (root / "README.md").read_text()
    m = re.search(r"against (\d+) public runs from (\d+) sources.*?held-out median error is ([\d.]+)% and the "
                  r"maximum ([\d.]+)%", readme, re.S)
    assert m, "README: the network validation sentence"
    assert (int(m[1]), int(m[2])) == (runs, sources)
    assert float(m[3]) == pytest.approx(median, abs=0.05) and float(m[4]) == pytest.approx(worst, abs=0.5)
    corpus_doc = (root / "docs/network_corpus.md").read_text()
    m = re.search(r"held-out median error is ([\d.]+)% and the maximum ([\d.]+)%", corpus_doc)
    assert m and float(m[1]) == pytest.approx(median, abs=0.05) and float(m[2]) == pytest.approx(worst, abs=0.05)
    assert f"{runs} runs" in corpus_doc and f"{sources} independent sources" in corpus_doc
    nv = (root / "experiments/results/network_validation/README.md").read_text()
    m = re.search(r"\*\*Result: (\d+) points, median ([\d.]+)% \(met\), max ([\d.]+)%", nv)
    assert m and int(m[1]) == target["points"]
    assert float(m[2]) == pytest.approx(median, abs=0.05) and float(m[3]) == pytest.approx(worst, abs=0.05)


@pytest.mark.parametrize("args, needle", [(["--jobs", "0"], "--jobs"), (["--corpus", "/nonexistent"], "nonexistent"),
                                          (["--topology", "/nonexistent.yaml"], "nonexistent.yaml"),
                                          (["--out", "/proc/simfuse_x"], "--out")])
def test_network_validation_bad_arguments_exit_2_without_traceback(root, tmp_path, args, needle):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "experiments/validation/network_validation.py", "--smoke", "--out", str(out),
                        *args], capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 2 and needle in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
