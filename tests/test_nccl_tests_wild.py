"""nccl-tests logs as users have them (tests/data/nccl_tests/README.md) and the plausibility of fabric fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simfuse.calibrate.detect import NCCL_TESTS, TORCH_PROFILER, detect_format
from simfuse.calibrate.nccl_tests import read_nccl_tests, strip_launcher_prefix
from simfuse.calibrate.plausibility import ImplausibleFit, check_fabric, min_bytes_each_way
from simfuse.cli import main
from simfuse.errors import TraceError
from simfuse.names import canonical_collective

DATA = Path(__file__).parent / "data" / "nccl_tests"
ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"

# file -> (options, collective, ranks, nodes, rows)
PARSED = {
    "h100_2x8_all_reduce_srun_label.log": ({}, "all_reduce", 16, 2, 11),
    "h100_1x8_all_reduce_nvls.log": ({}, "all_reduce", 8, 1, 6),
    "h100_2x8_all_reduce_soperator.log": ({}, "all_reduce", 16, 2, 5),
    "mscclpp_alltoall_2x8_tag_output.log": ({"ranks": 16, "nodes": 2}, "all_to_all", 16, 2, 1),
    "nccl28_256gpu_all_reduce_na.log": ({}, "all_reduce", 256, 16, 7),
    "prepend_rank_split_writes.log": ({"ranks": 24, "nodes": 3}, "all_reduce", 24, 3, 12),
    "msccl_alltoall_2x8_empty_redop.log": ({"ranks": 16, "nodes": 2}, "all_to_all", 16, 2, 8),
    "gb200_nvl72_excerpt.log": ({"nodes": 18}, "all_reduce", 72, 18, 5),
    "h100_crash_after_rows.log": ({"ranks": 64, "nodes": 8}, "all_reduce", 64, 8, 5),
    "old_all_gather_no_redop.log": ({"ranks": 8, "nodes": 1, "collective": "allgather"}, "all_gather", 8, 1, 14),
    "old_error_column_2x8.log": ({}, "all_reduce", 16, 2, 11),
    "sendrecv_perf_2x8.log": ({}, "sendrecv", 16, 2, 11),
}
REFUSED_READ = {
    "v100_2x1_duplicate_rank0.log": "several independent 1-rank runs",
    "nccl1_crash_before_results.log": "this run produced no results: it failed: NCCL failure all_reduce.cu:71",
    "openmpi_preamble_crash.log": "this run produced no results: it failed: .*Segmentation fault",
}


def test_every_fixture_is_covered():
    assert {p.name for p in DATA.glob("*.log")} == set(PARSED) | set(REFUSED_READ)
    assert len(PARSED) + len(REFUSED_READ) >= 8


@pytest.mark.parametrize("name", sorted(set(PARSED) | set(REFUSED_READ)))
def test_detected_as_nccl_tests(name):
    assert detect_format(DATA / name) == NCCL_TESTS  # also the ones starting with "[host:pid]" / "[1,0]<stdout>:"


@pytest.mark.parametrize("name", sorted(PARSED))
def test_parses(name):
    opts, coll, ranks, nodes, rows = PARSED[name]
    log = read_nccl_tests(DATA / name, **opts)
    assert (log.collective, log.ranks, log.nodes, len(log.rows)) == (coll, ranks, nodes, rows)
    assert all(r.time_s > 0 for r in log.rows)
    assert log.level == ("scale_out" if nodes > 1 else "scale_up")


@pytest.mark.parametrize("name", sorted(REFUSED_READ))
def test_refused_with_one_line(name):
    with pytest.raises(TraceError, match=REFUSED_READ[name]) as exc:
        read_nccl_tests(DATA / name)
    assert "\n" not in str(exc.value)


def test_details_of_formats():
    srun = read_nccl_tests(DATA / "h100_2x8_all_reduce_srun_label.log")
    assert srun.hosts == ["node-a", "node-b"] and srun.rows[0].size_bytes == 8 << 20
    assert srun.rows[0].wrong == "N/A" and srun.devices == ["NVIDIA H100 80GB HBM3"]
    a2a = read_nccl_tests(DATA / "msccl_alltoall_2x8_empty_redop.log", ranks=16, nodes=2)
    assert a2a.rows[0].redop == "none" and a2a.rows[0].dtype == "float"
    assert a2a.rows[0].time_s > 100 * a2a.rows[0].time_inplace_s  # out-of-place kept, broken in-place ignored
    oop = read_nccl_tests(DATA / "mscclpp_alltoall_2x8_tag_output.log", ranks=16, nodes=2)
    assert oop.rows[0].time_inplace_s is None and oop.rows[0].time_s == pytest.approx(23275e-6)
    crash = read_nccl_tests(DATA / "h100_crash_after_rows.log", ranks=64, nodes=8)
    assert any("failure after 5 row(s)" in n for n in crash.notes)
    split = read_nccl_tests(DATA / "prepend_rank_split_writes.log", ranks=24, nodes=3)
    assert split.rows[0].time_s == pytest.approx(184.6e-6)


@pytest.mark.parametrize("name, message", [
    ("gb200_nvl72_excerpt.log", "pass --nodes M"),
    ("msccl_alltoall_2x8_empty_redop.log", "pass --ranks N"),
])
def test_missing_rank_information_asks_for_options(name, message):
    with pytest.raises(TraceError, match=message):
        read_nccl_tests(DATA / name)


@pytest.mark.parametrize("line, expected", [
    ("[1,0]<stdout>:#  Rank  0 Group", "#  Rank  0 Group"),
    (" 0: #  Rank  0 Group", "#  Rank  0 Group"),
    ("12:      8388608  2097152  float", "     8388608  2097152  float"),
    ("[0]  1048576  262144  float  sum  -1[0]  1626.5  0.64", " 1048576  262144  float  sum  -1   1626.5  0.64"),
    ("node01: # nThread 1 nGpus 1", "# nThread 1 nGpus 1"),
    ("host:123:456 [0] NCCL INFO x", "host:123:456 [0] NCCL INFO x"),
])
def test_launcher_prefixes(line, expected):
    assert strip_launcher_prefix(line) == expected


def test_json_is_still_json(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('[{"ph": "X", "name": "k", "ts": 1, "dur": 2}]')
    assert detect_format(p) == TORCH_PROFILER
    q = tmp_path / "ompi.log"
    q.write_text("[node-a:41017] WARNING: remote shell type not recognised, assuming sh\n")
    with pytest.raises(TraceError, match="unrecognised input"):
        detect_format(q)  # neither JSON nor nccl-tests: no "invalid JSON" message


def test_aliases():
    for alias in ("alltoall", "AllToAll", "all-to-all", "a2a", "alltoall_perf", "all_to_all"):
        assert canonical_collective(alias) == "all_to_all"
    assert canonical_collective("allreduce") == "all_reduce"
    with pytest.raises(Exception, match="unknown collective"):
        canonical_collective("allfoo")


# ---------------------------------------------------------------- plausibility

def test_lower_bounds():
    assert min_bytes_each_way("all_reduce", 1e9, 2) == 1e9
    assert min_bytes_each_way("all_to_all", 1e9, 4, 8) == pytest.approx(8e9 * 3 / 4)
    assert min_bytes_each_way("all_gather", 1e9, 1) == 0.0


def _calibrate(tmp_path, *args):
    return main(["calibrate", *map(str, args), "--out", str(tmp_path / "p.yaml")])


@pytest.mark.parametrize("name, opts, reason", [
    ("h100_2x8_all_reduce_srun_label.log", [], "maps to 156 GB/s per NIC, above the topology's NIC line rate 50"),
    ("h100_2x8_all_reduce_soperator.log", [], "196 GB/s per NIC, above"),
    ("h100_1x8_all_reduce_nvls.log", [], "above the topology's scale-up line rate 450 GB/s"),
    ("nccl28_256gpu_all_reduce_na.log", [], "above the topology's NIC line rate"),
    ("mscclpp_alltoall_2x8_tag_output.log", ["--ranks", 16, "--nodes", 2], "only 1 distinct non-zero message size"),
    ("prepend_rank_split_writes.log", ["--ranks", 24, "--nodes", 3], "poor fit, max relative residual"),
])
def test_implausible_fits_are_refused(tmp_path, capsys, name, opts, reason):
    rc = _calibrate(tmp_path, DATA / name, *opts, "--topology", H100)
    err = capsys.readouterr().err
    assert rc == 2 and reason in err and "--force" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.yaml").exists()


def test_force_writes_with_warning_and_note(tmp_path, capsys):
    rc = _calibrate(tmp_path, DATA / "h100_2x8_all_reduce_srun_label.log", "--topology", H100, "--force")
    err = capsys.readouterr().err
    assert rc == 0 and err.startswith("warning: applied with --force")
    import yaml

    prof = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert prof["notes"] and "per NIC" in prof["notes"][0]


def test_plausible_fit_passes_and_json(tmp_path, capsys):
    data = Path(__file__).parent / "data" / "calibrate" / "nccl_2nodes.log"  # 45 GB/s busbw over 2 x 8 ranks
    rc = _calibrate(tmp_path, data, "--topology", H100, "--format", "json")
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fabric"]["scale_out"]["use"] == "all_reduce" and out["warnings"] == []


def test_measured_rate_above_line_rate(tmp_path):
    # 1 GiB all-reduce over 2 nodes in 1 ms needs >= 1 GiB / 8 NICs / 1 ms = 134 GB/s per NIC: not this topology.
    from simfuse.calibrate.nccl_tests import NcclRow, NcclTestLog
    from simfuse.spec import load_topology

    rows = [NcclRow(1 << 30, 1 << 28, "float", "sum", 1e-3, None, None, None, 1)]
    log = NcclTestLog("x.log", "all_reduce", 16, ["a", "b"], [], rows)
    problems = check_fabric({"fabric": {}}, [log], load_topology(H100))
    assert problems and "needs at least 134 GB/s per NIC" in problems[0]


def test_latency_without_bandwidth_refused():
    prof = {"fabric": {"scale_up": {"collectives": {"all_reduce": {
        "alpha_s": 6e-2, "beta_bytes_per_s": None, "ranks": 8, "sources": ["one.log"],
        "fit": {"rel_residual_max": 0.0}}}}}}
    problems = check_fabric(prof, [])
    assert any("latency without bandwidth" in p for p in problems)
    with pytest.raises(ImplausibleFit, match="implausible fabric fit refused"):
        from simfuse.calibrate.plausibility import refuse_or_warn

        refuse_or_warn(problems, force=False)


def test_collective_alias_option(tmp_path):
    rc = _calibrate(tmp_path, DATA / "old_all_gather_no_redop.log", "--ranks", 8, "--nodes", 1, "--collective",
                    "allgather", "--force")
    assert rc == 0


def test_mapped_rate_uses_the_logs_gpus_per_node():
    """A 2 x 1-GPU log on an 8-GPU / 4-NIC topology: its one GPU per node drives min(4, 1) = 1 NIC, so a 40 GB/s
    bus bandwidth is 40 GB/s per NIC -- below the 50 GB/s line rate (issue 35: it was mapped x 8 / 4 and refused)."""
    from simfuse.calibrate.nccl_tests import NcclRow, NcclTestLog
    from simfuse.spec import load_topology

    topo = load_topology(H100).with_overrides({"scale_out.nics_per_node": 4})
    rows = [NcclRow(s, s // 4, "float", "sum", 5e-6 + s / 40e9, None, None, None, i)
            for i, s in enumerate(2 ** k for k in range(20, 31))]
    log = NcclTestLog("x.log", "all_reduce", 2, ["a", "b"], [], rows)
    prof = {"fabric": {"scale_out": {"ranks": 2, "hosts": 2, "collectives": {"all_reduce": {
        "alpha_s": 5e-6, "beta_bytes_per_s": 40e9, "ranks": 2, "sources": ["x.log"],
        "fit": {"rel_residual_max": 0.0}}}}}}
    assert check_fabric(prof, [log], topo) == []
    prof["fabric"]["scale_out"]["collectives"]["all_reduce"]["beta_bytes_per_s"] = 60e9  # truly above 50 GB/s
    assert any("60 GB/s per NIC" in p for p in check_fabric(prof, [log], topo))


def test_calibrate_and_fit_fabric_share_the_residual_limits():
    from simfuse.calibrate import fabric_fit, plausibility

    assert plausibility.MAX_REL_RESIDUAL_LARGE == fabric_fit.MAX_REL_RESIDUAL_LARGE
    assert plausibility.MAX_REL_RESIDUAL_ALL == fabric_fit.MAX_REL_RESIDUAL_ALL
    assert plausibility.LARGE_BYTES == fabric_fit.LARGE_BYTES


def test_logs_of_another_rank_count_do_not_judge_the_fit(tmp_path, capsys):
    """An 8-rank nccl-tests log and a 2-rank Kineto trace of the same level and collective: the profile keeps the
    8-rank fit, and only the 8-rank log judges it (before, the 2-rank rows made a 'poor fit, 80%' refusal that
    blamed the 8-rank log)."""
    log8 = ROOT / "tests" / "data" / "calibrate" / "all_reduce_perf_1node.log"
    trace2 = ROOT / "tests" / "data" / "kineto" / "ddp_nccl_2ranks_rank0.json"
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", str(log8), str(trace2), "--out", str(out), "--format", "json", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    import yaml

    fab = yaml.safe_load(out.read_text())["fabric"]["scale_up"]["collectives"]["all_reduce"]
    assert fab["ranks"] == 8 and fab["sources"] == [str(log8)]
