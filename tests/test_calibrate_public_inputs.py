"""Inputs as the public has them (issue 35's parser gaps), each with a fixture of our own in that format:
result rows pasted without their header, sendrecv logs, the old ``error`` column, PyTorch 1.8-1.9 Kineto traces,
and what a profiler trace gave and lacked."""

from pathlib import Path

import pytest

from simfuse.calibrate.dense import gemm_dtype_from_kernels, read_dense_samples
from simfuse.calibrate.nccl_tests import read_nccl_tests
from simfuse.calibrate.torch_trace import nccl_collective, normalize_event, read_torch_trace
from simfuse.cli import main
from simfuse.errors import TraceError

DATA = Path(__file__).parent / "data"
NT = DATA / "nccl_tests"


def _calibrate(tmp_path, *args):
    return main(["calibrate", *map(str, args), "--out", str(tmp_path / "p.yaml")])


def test_rows_only_paste_needs_kind_nccl_tests(tmp_path, capsys):
    with pytest.raises(TraceError, match="no '#  size  count  type ...' column header"):
        read_nccl_tests(NT / "pastes" / "rows_only_paste_all_reduce.log", ranks=16, nodes=2)
    log = read_nccl_tests(NT / "pastes" / "rows_only_paste_all_reduce.log", ranks=16, nodes=2, headerless=True)
    assert log.collective == "all_reduce" and len(log.rows) == 11 and log.rows[0].size_bytes == 2**20
    # out-of-place time of the first row; in-place kept too
    assert log.rows[0].time_s == pytest.approx(39.0e-6) and log.rows[0].time_inplace_s == pytest.approx(39.4e-6)
    assert any("rows-only paste" in n for n in log.notes)
    rc = _calibrate(tmp_path, NT / "pastes" / "rows_only_paste_all_reduce.log", "--kind", "nccl-tests", "--ranks", 16,
                    "--nodes", 2)
    assert rc == 0, capsys.readouterr().err
    rc = _calibrate(tmp_path, NT / "pastes" / "rows_only_paste_all_reduce.log", "--ranks", 16, "--nodes", 2)
    assert rc == 2  # without --kind the format is not guessed


def test_rows_only_paste_of_the_old_layout():
    log = read_nccl_tests(NT / "pastes" / "rows_only_paste_old_error.log", ranks=16, nodes=2, headerless=True)
    assert len(log.rows) == 11 and log.rows[0].error == "2e-07" and log.rows[0].wrong == "0"
    assert not any("wrong" in n or "numeric error" in n for n in log.notes)


def test_headerless_refuses_what_has_no_rows(tmp_path):
    f = tmp_path / "prose.log"
    f.write_text("the test ran fine\nbusbw was 190 GB/s\n")
    with pytest.raises(TraceError, match="no nccl-tests result rows found"):
        read_nccl_tests(f, ranks=16, nodes=2, headerless=True)


def test_old_error_column_is_numeric_error_not_wrong_results():
    log = read_nccl_tests(NT / "old_error_column_2x8.log")
    assert log.ranks == 16 and log.nodes == 2 and len(log.rows) == 11
    # ten rows of 1e-07-class rounding are fine; the one 1e+00 row is a wrong result
    assert [n for n in log.notes if "numeric error" in n] == [
        "1 row(s) with a numeric error above 0.01 (error column; smaller values are float rounding): timings kept"]
    assert not any("wrong results" in n for n in log.notes)


def test_sendrecv_log_is_refused_with_its_reason(tmp_path, capsys):
    log = read_nccl_tests(NT / "sendrecv_perf_2x8.log")
    assert log.collective == "sendrecv" and len(log.rows) == 11 and log.nccl_version == "2.19.3"
    rc = _calibrate(tmp_path, NT / "sendrecv_perf_2x8.log")
    err = capsys.readouterr().err
    assert rc == 2 and "this is a sendrecv log (11 rows over 16 ranks)" in err and "no collective model" in err
    assert not (tmp_path / "p.yaml").exists()


def test_sendrecv_beside_a_fitted_log_is_noted(tmp_path, capsys):
    rc = _calibrate(tmp_path, NT / "sendrecv_perf_2x8.log", DATA / "calibrate" / "nccl_2nodes.log")
    err = capsys.readouterr().err
    assert rc == 0 and "not used" in err and "sendrecv_perf_2x8.log" in err


def test_pytorch_18_trace_categories():
    ev = normalize_event({"ph": "X", "cat": "Kernel", "name": "k", "args": {"external id": 7}})
    assert ev["cat"] == "kernel" and ev["args"]["External id"] == 7
    assert normalize_event({"cat": "Operator"})["cat"] == "cpu_op"
    assert nccl_collective("ncclAllReduceRingLLKernel_sum_f32(ncclColl)") == "all_reduce"
    assert nccl_collective("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)") == "all_gather"
    assert nccl_collective("volta_sgemm_128x64_nn") == ""
    stats = read_torch_trace(DATA / "kineto" / "pytorch18_legacy_categories.json")
    assert {s.cat for s in stats} == {"cpu_op", "kernel"}
    assert sum(s.count for s in stats if s.collective == "all_reduce") == 2


def test_pytorch_18_trace_feeds_the_dense_fit_with_dtype_from_kernel_names():
    skipped: dict = {}
    samples = read_dense_samples(DATA / "kineto" / "pytorch18_legacy_categories.json", skipped)
    assert len(samples) == 8 and {s.dtype for s in samples} == {"fp32"} and not skipped
    assert gemm_dtype_from_kernels(["ampere_bf16_s16816gemm_bf16_128x64"]) == "bf16"
    assert gemm_dtype_from_kernels(["volta_h884gemm_64x64_nn"]) == "fp16"
    assert gemm_dtype_from_kernels(["void at::native::vectorized_elementwise_kernel"]) == ""


def test_calibrate_says_what_each_trace_gave_and_lacked(tmp_path, capsys):
    rc = _calibrate(tmp_path, DATA / "kineto" / "pytorch18_legacy_categories.json")
    err = capsys.readouterr().err
    assert rc == 0
    line = next(x for x in err.splitlines() if "pytorch18_legacy_categories.json: gave" in x)
    assert "8 gemm" in line and "2 NCCL kernel(s) without message sizes" in line
    rc = _calibrate(tmp_path, DATA / "kineto" / "ddp_nccl_2ranks_rank0.json")
    err = capsys.readouterr().err
    assert rc == 0
    line = next(x for x in err.splitlines() if "ddp_nccl_2ranks_rank0.json: gave" in x)
    assert "all_reduce over 2 ranks from NCCL kernels with record_param_comms args" in line


def test_fit_fabric_refuses_a_sendrecv_log_with_its_reason(capsys):
    rc = main(["fit-fabric", str(NT / "sendrecv_perf_2x8.log"), "--topology",
               str(Path(__file__).resolve().parents[1] / "topologies" / "h100_nvl8_ib_ndr.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "a sendrecv log (11 rows over 16 ranks)" in err and len(err.strip().splitlines()) == 1


def test_fit_fabric_reads_a_rows_only_paste_given_its_ranks(capsys):
    topo = str(Path(__file__).resolve().parents[1] / "topologies" / "h100_nvl8_ib_ndr.yaml")
    paste = str(NT / "pastes" / "rows_only_paste_all_reduce.log")
    assert main(["fit-fabric", paste, "--topology", topo]) == 2
    assert "nccl-tests log" in capsys.readouterr().err  # without --ranks the paste is not guessed
    rc = main(["fit-fabric", paste, "--topology", topo, "--ranks", "16", "--nodes", "2", "--force",
               "--format", "json"])
    assert rc == 0, capsys.readouterr().err
