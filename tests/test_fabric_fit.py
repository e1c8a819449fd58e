"""Fabric calibration by simulation: a log the simulator wrote itself is fitted back to its parameters; every
fixture log either calibrates (simulated times within 15% at >= 64 MiB, no link above line rate) or is refused
with a one-line reason; the CLI writes a loadable topology."""

from pathlib import Path

import pytest

from simfuse.calibrate.fabric_fit import LARGE_BYTES, MAX_REL_RESIDUAL_LARGE, fit_fabric
from simfuse.calibrate.nccl_tests import NcclRow, NcclTestLog, read_nccl_tests
from simfuse.cli import main
from simfuse.collectives import run_collective
from simfuse.errors import SpecError
from simfuse.spec import load_topology
from tests.conftest import make_topology

DATA = Path(__file__).resolve().parent / "data" / "nccl_tests"
ROOT = Path(__file__).resolve().parents[1]
# ranks/nodes of the excerpted fixtures (tests/data/nccl_tests/README.md records these assumptions)
OPTIONS = {"msccl_alltoall_2x8_empty_redop.log": (16, 2), "mscclpp_alltoall_2x8_tag_output.log": (16, 2),
           "h100_crash_after_rows.log": (64, 8), "prepend_rank_split_writes.log": (24, 3),
           "gb200_nvl72_excerpt.log": (72, 18), "old_all_gather_no_redop.log": (16, 2)}


def _synthetic_log(topo, nodes, op, eff, lat_s, ovh_s, sizes):
    t = topo.with_overrides({"scale_out.efficiency": eff, "scale_out.latency_s": lat_s,
                             "collectives.launch_s": ovh_s, "collectives.sync_s": 0.0})
    g = topo.scale_up.gpus_per_node
    rows = [NcclRow(int(s), int(s) // 4, "float", "sum", run_collective(t, nodes, op, s, gpus_per_node=g,
                                                                        algorithm="ring").time_s,
                    None, None, None, i) for i, s in enumerate(sizes)]
    return NcclTestLog("<synthetic>", op, nodes * g, [f"h{i}" for i in range(nodes)], [], rows, nodes=nodes,
                       env={"NCCL_ALGO": "Ring"})


def test_recovers_the_parameters_it_was_made_with():
    topo = make_topology(gpus_per_node=4, nics_per_node=4, launch_us=0.0, sync_us=0.0)
    sizes = [2.0 ** k for k in range(12, 31, 2)]
    # a ring runs the same number of latency hops at every size: latency stays the topology's (3 us), so the
    # log is made with it, and efficiency and overhead are recovered
    log = _synthetic_log(topo, 2, "all_reduce", 0.6, 3e-6, 12e-6, sizes)
    res = fit_fabric(log, topo)
    assert res.efficiency == pytest.approx(0.6, rel=0.02)
    assert res.latency_s == pytest.approx(3e-6)
    assert res.overhead_s == pytest.approx(12e-6, rel=0.1, abs=1e-6)
    assert res.notes and "not identifiable" in res.notes[0]
    assert set(res.algorithms) == {"ring"}
    assert res.max_residual() < 0.01


def test_never_above_line_rate():
    # a log twice as fast as the line rate allows is refused, not fitted to a faster link
    topo = make_topology(gpus_per_node=4, nics_per_node=4)
    sizes = [2.0 ** k for k in range(14, 31, 2)]
    log = _synthetic_log(topo, 2, "all_reduce", 1.0, 1e-6, 1e-6, sizes)
    for r in log.rows:
        r.time_s /= 3.0
    with pytest.raises(SpecError, match="line rate"):
        fit_fabric(log, topo)


def test_too_few_points_refused():
    topo = make_topology(gpus_per_node=4, nics_per_node=4)
    log = _synthetic_log(topo, 2, "all_reduce", 0.5, 1e-6, 1e-6, [2.0 ** 20, 2.0 ** 24])
    with pytest.raises(SpecError, match="distinct message sizes"):
        fit_fabric(log, topo)


SLOW = {"nccl28_256gpu_all_reduce_na.log"}  # 256 ranks: ~40 s of simulation on the 2-core machine


@pytest.mark.parametrize("name", [pytest.param(p.name, marks=(pytest.mark.slow,) if p.name in SLOW else ())
                                  for p in sorted(DATA.glob("*.log"))])
def test_every_fixture_calibrates_or_is_refused(name):
    topo = load_topology(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")
    ranks, nodes = OPTIONS.get(name, (None, None))
    try:
        log = read_nccl_tests(DATA / name, ranks=ranks, nodes=nodes)
        res = fit_fabric(log, topo)
    except SpecError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg  # a one-line reason
        return
    assert res.max_residual(LARGE_BYTES) <= MAX_REL_RESIDUAL_LARGE
    assert 0 < res.efficiency <= 1.0  # links never above line rate


def test_cli_writes_a_loadable_topology(tmp_path, capsys):
    out = tmp_path / "fitted.yaml"
    rc = main(["fit-fabric", str(DATA / "h100_1x8_all_reduce_nvls.log"), "--topology",
               str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"), "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    fitted = load_topology(out)
    assert fitted.scale_up.efficiency <= 1.0 and fitted.name.endswith("_fitted")
    rc = main(["fit-fabric", str(DATA / "h100_2x8_all_reduce_soperator.log"), "--topology",
               str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"), "--out", str(tmp_path / "bad.yaml")])
    assert rc == 2 and not (tmp_path / "bad.yaml").exists()


def test_written_topology_reproduces_the_reported_fit_with_its_own_tuner(tmp_path, capsys):
    """The fitted file is what users run, with the tuner choosing: its collectives at the log's sizes must equal
    the simulated times the fit reports (the fit is refitted with the fitted topology's choices until they
    agree), so the plausibility gate judges the numbers users get."""
    from simfuse.calibrate.fabric_fit import calibrated_topology_yaml

    log_path = ROOT / "tests" / "data" / "calibrate" / "nccl_2nodes.log"
    topo_path = ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml"
    log = read_nccl_tests(log_path)
    res = fit_fabric(log, load_topology(topo_path), force=True)
    out = tmp_path / "fitted.yaml"
    out.write_text(calibrated_topology_yaml(str(topo_path), res))
    fitted = load_topology(out)
    for s, sim in zip(res.sizes_bytes, res.simulated_s, strict=True):
        t = run_collective(fitted, res.nodes, res.collective, s, gpus_per_node=res.gpus_per_node).time_s
        assert t == pytest.approx(sim, rel=1e-5)  # the file rounds its values to 6 decimals
    assert res.max_residual(LARGE_BYTES) <= MAX_REL_RESIDUAL_LARGE
