"""The public network corpus (data/network_corpus/): its loader, the consistency of every transcribed number, and
its use by ``simfuse fit-fabric`` and ``simfuse validate``."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from simfuse.calibrate.corpus import (
    default_connections,
    load_corpus,
    min_ctas,
    min_nchannels,
    nvlink_gbyte_per_s,
    topology_for_run,
)
from simfuse.cli import main
from simfuse.errors import SpecError
from simfuse.spec import load_topology

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "network_corpus"
TOPO = ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"
BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(CORPUS)


def test_corpus_size_and_coverage(corpus):
    assert len(corpus.runs) >= 30
    assert len({r.source_id for r in corpus.runs}) >= 10
    assert {r.collective for r in corpus.runs} == set(BUSBW_FACTOR)
    assert any(r.collective == "all_to_all" and r.nodes >= 8 for r in corpus.runs)
    assert max(r.nodes for r in corpus.runs) >= 64
    for r in corpus.runs:
        assert r.source_id in corpus.sources and corpus.sources[r.source_id]["citation"].strip()


def test_transcribed_numbers_agree_with_each_other(corpus):
    """Every measured row: algbw = size / time and busbw = algbw x the collective's factor at the run's rank
    count, to the rounding of the printed numbers -- a check of the transcription and of the rank counts."""
    checked = 0
    for run in corpus.runs:
        f = BUSBW_FACTOR[run.collective](run.ranks)
        for r, ts in zip(run.rows, run.time_sources, strict=True):
            if ts != "measured" or r.algbw_gbyte_per_s is None or r.algbw_gbyte_per_s < 1.0:
                continue
            assert r.size_bytes / r.time_s / 1e9 == pytest.approx(r.algbw_gbyte_per_s, rel=0.02, abs=0.01), \
                (run.run_id, r.size_bytes)
            assert r.busbw_gbyte_per_s == pytest.approx(r.algbw_gbyte_per_s * f, rel=0.02, abs=0.01), \
                (run.run_id, r.size_bytes)
            checked += 1
    assert checked > 100


def test_topology_for_run_takes_the_runs_hardware(corpus):
    base = load_topology(TOPO)
    p5 = corpus.run("p5_h100_ar_2x8_nccl2223")
    topo, notes = topology_for_run(p5, base)
    # 32 x 100 Gb/s EFA for 8 GPUs: each GPU's four NICs become one of 400 Gb/s (same rate per GPU and node)
    assert topo.scale_out.nics_per_node == 8 and topo.scale_out.nic_bw_bytes_per_s == pytest.approx(50e9)
    assert notes == ["32 NICs of 100 Gb/s for 8 GPUs simulated as 8 NICs of 400 Gb/s"]
    a3, notes = topology_for_run(corpus.run("a3mega_ar_2x8"), base)
    assert a3.scale_out.nics_per_node == 8 and a3.scale_out.nic_bw_bytes_per_s == pytest.approx(25e9) and not notes
    _, notes = topology_for_run(corpus.run("xxrjun_c01_10x8_all_to_all"), base)
    assert any("NICs per node not stated" in n for n in notes)
    b200 = corpus.run("together_b200_ar_16x8_collnetdirect")
    topo, _ = topology_for_run(b200, base)
    assert topo.scale_out.sharp and topo.scale_up.bw_bytes_per_s == pytest.approx(900e9)
    assert b200.algorithm == "collnet"
    with pytest.raises(SpecError, match="MI350X"):
        topology_for_run(corpus.run("rocm9406_mi350x_ar_2x8_after"), base)
    assert nvlink_gbyte_per_s("NVIDIA H800") == 200.0 and nvlink_gbyte_per_s("NVIDIA H100 80GB HBM3") == 450.0


def test_topology_for_run_has_nvls_only_where_the_gpu_and_run_allow_it(corpus):
    base = load_topology(TOPO)
    assert base.scale_up.nvls
    # NVLink SHARP needs a third-generation NVSwitch: none on A100 / V100 nodes, whatever the base file says
    for rid in ("ncclt152_a100_ar_2x8", "ncclt78_v100_ar_16x16"):
        topo, _ = topology_for_run(corpus.run(rid), base)
        assert not topo.scale_up.nvls and topo.device.name == corpus.run(rid).gpu
    # a B200 run that turned NVLS off runs without it; an H100 run whose setting is unknown keeps the base's
    assert not topology_for_run(corpus.run("together_b200_ar_2x8_collnetdirect"), base)[0].scale_up.nvls
    assert topology_for_run(corpus.run("a3mega_ar_2x8"), base)[0].scale_up.nvls


def test_default_connections_from_the_runs_settings_and_fabric(corpus):
    # NCCL's defaults on InfiniBand / RoCE (or a fabric not stated)
    for rid in ("ncclt309b_h100_ar_8x8", "ncclt309a_h100_ar_4x8", "ncclt152_a100_ar_2x8",
                "xxrjun_c01_10x8_all_reduce"):
        assert default_connections(corpus.run(rid)), rid
    # more CTAs / QPs per connection (the same cluster's tuned run, the B200 report, OCI's shape settings), or a
    # fabric that spreads a connection over paths (EFA), routes adaptively (Slingshot), runs TCP (TCPXO) or Google's
    # own network and tuner plugins (gIB)
    for rid in ("ncclt309b_h100_ar_8x8_tuned", "together_b200_ar_8x8_ring", "oci_a100_ar_2x8",
                "p5_h100_ar_2x8_nccl2203", "kestrel_h100_ar_16x4", "a3mega_ar_2x8", "dranet_a3u_h200_ag_2x1",
                "dranet_a4_b200_ag_2x8"):
        assert not default_connections(corpus.run(rid)), rid


def test_topology_for_run_drops_the_full_node_efficiency_where_the_run_tuned_its_connections(corpus):
    base = load_topology(TOPO).with_overrides({"scale_out.full_node_efficiency": 0.85})
    topo, notes = topology_for_run(corpus.run("ncclt309b_h100_ar_8x8_tuned"), base)
    assert topo.scale_out.full_node_efficiency is None and any("full_node_efficiency" in n for n in notes)
    topo, _ = topology_for_run(corpus.run("ncclt309b_h100_ar_8x8"), base)
    assert topo.scale_out.full_node_efficiency == 0.85


def test_topology_for_run_takes_the_runs_min_ctas(corpus):
    # the tuned run sets NCCL_MIN_CTAS=24 (its env column); the default run leaves NCCL's own channel counts
    base = load_topology(TOPO)
    tuned = corpus.run("ncclt309b_h100_ar_8x8_tuned")
    assert "NCCL_MIN_CTAS=24" in tuned.env and min_ctas(tuned) == 24
    assert topology_for_run(tuned, base)[0].collectives.min_ctas == 24
    assert topology_for_run(corpus.run("ncclt309b_h100_ar_8x8"), base)[0].collectives.min_ctas == 0
    other = dataclasses.replace(tuned, env="NCCL_MIN_CTAS_X=3 NCCL_IB_QPS_PER_CONNECTION=2")
    assert min_ctas(other) == 0
    # nccl-tests#322's ring sets NCCL_MIN_NCHANNELS=32 (ring and tree channels, not NVLS ones)
    ll128 = corpus.run("ncclt322_h100_ar_128x8_ring_ll128")
    assert min_nchannels(ll128) == 32 and min_ctas(ll128) == 0
    topo = topology_for_run(ll128, base)[0]
    assert topo.collectives.min_nchannels == 32 and topo.collectives.min_ctas == 0
    assert min_nchannels(dataclasses.replace(tuned, env="NCCL_MIN_NRINGS=8")) == 8


def _copy(tmp_path):
    d = tmp_path / "corpus"
    shutil.copytree(CORPUS, d)
    return d


@pytest.mark.parametrize("edit, match", [
    (("runs.csv", "a3mega_ar_2x8,gcp_a3mega_fork", "a3mega_ar_2x8,nowhere"), "runs.csv: line 2 column source_id"),
    (("runs.csv", ",2,16,8,200,", ",2,15,8,200,"), "runs.csv: line 2 column ranks"),
    (("points.csv", "a3mega_ar_2x8,65536,159.4", "a3mega_ar_2x8,65536,fast"), "points.csv: line 2 column time_us"),
    (("points.csv", "a3mega_ar_2x8,65536", "no_such_run,65536"), "points.csv: line 2 column run_id"),
    # review: a repeated size of one run, and a time that disagrees with the row's own algbw, were taken as data
    (("points.csv", "a3mega_ar_2x8,131072,", "a3mega_ar_2x8,65536,"), "points.csv: line 3 column size_bytes: 65536 is "
                                                                     "repeated for run a3mega_ar_2x8"),
    (("points.csv", "a3mega_ar_2x8,262144,167.1,", "a3mega_ar_2x8,262144,0.001,"),
     r"points.csv: line 4 column time_us: 0.001 us for 262144 B is 2.621e\+05 GB/s, but algbw_gbyte_per_s says 1.57"),
    # audit: a collective simfuse does not simulate, channel settings that are not 1..64, absurd hardware
    (("runs.csv", "a3mega_ar_2x8,gcp_a3mega_fork,all_reduce", "a3mega_ar_2x8,gcp_a3mega_fork,broadcast"),
     "runs.csv: line 2 column collective: 'broadcast': expected one of"),
    (("runs.csv", "NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2,ok", "NCCL_MIN_CTAS=abc NCCL_IB_QPS_PER_CONNECTION=2,ok"),
     r"runs.csv: line \d+ column env: NCCL_MIN_CTAS='abc'"),
    (("runs.csv", "NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2,ok", "NCCL_MIN_CTAS=999 NCCL_IB_QPS_PER_CONNECTION=2,ok"),
     r"runs.csv: line \d+ column env: NCCL_MIN_CTAS='999'"),
    (("runs.csv", ",2,16,8,200,", ",2,16,1000000,200,"), r"runs.csv: line 2 column nics_per_node: '1000000' out of range"),
    (("runs.csv", ",2,16,8,200,", ",2,16,8,1e9,"), r"runs.csv: line 2 column nic_gbps: '1e9' out of range"),
])
def test_bad_corpus_names_file_line_and_column(tmp_path, edit, match):
    d = _copy(tmp_path)
    name, old, new = edit
    text = (d / name).read_text()
    assert old in text
    (d / name).write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError, match=match):
        load_corpus(d)


def test_fit_fabric_reads_a_corpus_run(tmp_path, capsys):
    rc = main(["fit-fabric", str(CORPUS), "--topology", str(TOPO), "--format", "json"])
    assert rc == 2 and "--run" in capsys.readouterr().err
    rc = main(["fit-fabric", str(CORPUS), "--run", "nccl1357_h100_ar_2x1_tree", "--topology", str(TOPO),
               "--format", "json", "--force"])
    out = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out)
    # the run forced NCCL_ALGO=Tree and had 4 NICs for one GPU per node
    assert {p["algorithm"].split("/")[0] for p in res["points"]} == {"tree"}
    assert res["level"] == "scale_out" and res["overhead_field"] is None and 0 < res["efficiency"] <= 1


def test_validate_corpus_cli(tmp_path, capsys):
    out = tmp_path / "v"
    rc = main(["validate", "--corpus", str(CORPUS), "--topology", str(TOPO), "--runs", "nccl1357", "rocm9406",
               "--format", "json", "--out", str(out)])
    assert rc == 0
    s = json.loads(capsys.readouterr().out)
    assert s["runs"] == 1 and s["all"]["points"] == 5
    assert {k["run_id"] for k in s["skipped"]} == {"rocm9406_mi350x_ar_2x8_before", "rocm9406_mi350x_ar_2x8_after"}
    assert (out / "corpus_validation.csv").exists()
    rc = main(["validate", "--corpus", str(CORPUS), "--topology", str(TOPO), "--runs", "nope"])
    assert rc == 2
    capsys.readouterr()
    # audit: runs named that are all skipped checked nothing (was rc 0, "no points"); --runs without --corpus
    out2 = tmp_path / "v2"
    rc = main(["validate", "--corpus", str(CORPUS), "--topology", str(TOPO), "--runs", "ncclt78_v100_ar_8x8",
               "rocm9406", "--out", str(out2)])
    err = capsys.readouterr().err
    assert rc == 2 and "none of the runs named is simulated" in err and "anomalous" in err and not out2.exists()
    assert main(["validate", "--topology", str(TOPO), "--runs", "xxrjun"]) == 2
    assert "needs --corpus" in capsys.readouterr().err


@pytest.mark.parametrize("run_id, why", [("coreweave_gb200_ar_18x4_nvl72", "multi-node NVLink domain"),
                                         ("ncclt78_v100_ar_8x8", "quality anomalous")])
def test_fit_fabric_refuses_the_corpus_runs_validate_skips(run_id, why, tmp_path, capsys):
    out = tmp_path / "fit.yaml"
    rc = main(["fit-fabric", str(CORPUS), "--run", run_id, "--topology", str(TOPO), "--force", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and f"run {run_id}: not simulated: " in err and why in err and not out.exists()


def test_fit_fabric_run_needs_a_corpus_folder(capsys):
    log = ROOT / "tests" / "data" / "calibrate" / "nccl_2nodes.log"
    assert main(["fit-fabric", str(log), "--run", "xxrjun_c01_10x8_all_to_all", "--topology", str(TOPO)]) == 2
    assert "--run: names a run of a network corpus folder" in capsys.readouterr().err


def test_corpus_csv_with_a_byte_order_mark_is_read(tmp_path):
    """A spreadsheet's "CSV UTF-8" export starts with a byte-order mark: before, 'missing column(s) run_id'."""
    d = _copy(tmp_path)
    for name in ("runs.csv", "points.csv", "sources.csv"):
        (d / name).write_text("\ufeff" + (d / name).read_text(), encoding="utf-8")
    assert len(load_corpus(d).runs) == len(load_corpus(CORPUS).runs)


def test_the_docs_coverage_line_matches_the_corpus(corpus):
    """docs/network_corpus.md's counts are the corpus's (audit: they went stale when a source was added)."""
    import collections
    import re

    text = " ".join((ROOT / "docs" / "network_corpus.md").read_text().split())
    by_coll = collections.Counter(r.collective for r in corpus.runs)
    assert (f"Coverage: all-reduce {by_coll['all_reduce']} runs, all-gather {by_coll['all_gather']}, all-to-all "
            f"{by_coll['all_to_all']}, reduce-scatter {by_coll['reduce_scatter']};") in text
    gpus = collections.Counter(re.search(r"(?<![A-Z0-9])(GB200|H200|H100|B200|V100|A100)(?![0-9])", r.gpu.upper())
                               .group(1) for r in corpus.runs
                               if re.search(r"(?<![A-Z0-9])(GB200|H200|H100|B200|V100|A100)(?![0-9])", r.gpu.upper()))
    assert f"B200 {gpus['B200']} runs, H100 {gpus['H100']}, V100 {gpus['V100']}, GB200 {gpus['GB200']}, " \
           f"A100 {gpus['A100']}" in text
    nodes = sorted({r.nodes for r in corpus.runs if r.collective == "all_to_all"})
    assert "all-to-all at " + ", ".join(map(str, nodes[:-1])) + f" and {nodes[-1]} nodes" in text
    sources = {r.source_id for r in corpus.runs}
    assert f"{len(corpus.runs)} runs ({sum(len(r.rows) for r in corpus.runs)} message sizes) from {len(sources)} " \
           "independent sources" in text
