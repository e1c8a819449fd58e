"""Problems an independent review found by using the CLI (stop 23): each is a regression test.

* an input error raised inside a simulation process reached the user as a TypeError traceback (simpy rebuilds a
  process's exception as ``type(e)(*e.args)``);
* the shipped LLM models could not be run from the command line (the cost guard had no estimate for them);
* ``--seed -1`` crashed in numpy; unknown algorithm names passed when the run did not meet that collective;
* the fused GEMM operators' baseline: the operator's own kernel unfused by default (it was priced as cuBLAS on
  the H200), or a library kernel on request.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from simfuse.cli import main
from simfuse.costs import KernelWork
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError, TraceError
from simfuse.fused.knobs import FusedKnobs, parse_execution
from simfuse.fused.ops import make_op
from simfuse.system import System
from simfuse.workloads.op import run_op

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml"


@pytest.mark.parametrize("cls", [SpecError, TraceError])
def test_errors_rebuild_from_their_args_and_pickle(cls):
    e = cls("file.yaml", "field", "went wrong")
    again = type(e)(*e.args)
    assert str(again) == str(e) == "file.yaml: field: went wrong"
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


def test_an_input_error_inside_a_simulation_is_a_clean_exit_2(capsys):
    # nvls_tree is a known all-reduce algorithm, but needs several nodes: the error is raised while simulating
    rc = main(["op", "--op", "gemv_all_reduce", "--topology", str(H200), "--nodes", "1",
               "--set", "baseline_algorithm=nvls_tree"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs at least 2 nodes" in err and "Traceback" not in err


def test_shipped_llm_model_runs_from_the_cli(tmp_path, capsys):
    rc = main(["run", "--model", str(ROOT / "models" / "llm_tp_dp.yaml"), "--topology", str(H200), "--nodes", "1",
               "--set", "uncertainty=none", "--out", str(tmp_path / "o")])
    assert rc == 0 and (tmp_path / "o" / "summary.csv").exists()


@pytest.mark.parametrize("cmd", [["collective", "--op", "all_reduce", "--size", "1MiB"],
                                 ["op", "--op", "gemv_all_reduce"]])
def test_negative_seed_is_refused(capsys, cmd):
    with pytest.raises(SystemExit) as e:
        main([*cmd, "--topology", str(H200), "--nodes", "1", "--seed", "-1"])
    assert e.value.code == 2 and "non-negative" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["allreduce_algorithm", "alltoall_algorithm", "baseline_algorithm"])
def test_unknown_algorithm_names_are_refused_even_if_unused(key):
    with pytest.raises(SpecError, match=key):
        parse_execution({key: "foo"})
    parse_execution({key: "direct"})  # a known name passes


def test_library_kernels_only_are_priced_by_cublas_models():
    """The profile's dense (cuBLAS) fit and the device's small-M curve price ``impl="library"`` GEMMs only."""
    system = System.load(H200)
    cost = system.cost
    lib = KernelWork("gemm", 64, 2.0 * 128 * 128 * 4096, 1e6, "bf16", "compute",
                     (("m", 1024), ("n", 1024), ("k", 4096)))
    own = KernelWork("gemm", 64, lib.flops_per_wg, lib.bytes_per_wg, "bf16", "compute", lib.shape, impl="simfuse")
    inner = getattr(cost, "inner", cost)
    assert inner.dense_time_s(lib) is not None or inner.curve_time_s(lib) is not None
    assert inner.dense_time_s(own) is None and inner.curve_time_s(own) is None


@pytest.mark.parametrize("op_name", ["gemm_reduce_scatter", "gemm_all_to_all"])
def test_baseline_kernel_library_or_the_same_kernel(op_name):
    system = System.load(H200)
    op = make_op(op_name, {}, 1, 8)
    same = run_op(op, system, 1, knobs=FusedKnobs(), uncertainty="none")  # the default
    lib = run_op(op, system, 1, knobs=FusedKnobs(baseline_kernel="library"), uncertainty="none")
    own = simulate_kernel(op.work("compute"), system.cost).time_s
    assert same.baseline_compute_s == pytest.approx(own, rel=1e-9)
    assert lib.fused_time_s == same.fused_time_s  # only the baseline changes
    # on the H200 cuBLAS's measured model is faster than the bundled Triton GEMM's at these shapes
    assert lib.baseline_compute_s < same.baseline_compute_s


def test_unknown_baseline_kernel_is_refused():
    with pytest.raises(SpecError, match="baseline_kernel"):
        parse_execution({"baseline_kernel": "cublas"})
