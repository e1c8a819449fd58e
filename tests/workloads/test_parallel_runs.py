"""The independent simulations of a run in worker processes (simfuse/workloads/parallel.py): the same results as
one process, bit for bit, for the fused candidates of a planned DLRM point and for the runs of an interval."""

import dataclasses
import sys

import pytest

from simfuse.errors import SimfuseError, SpecError
from simfuse.fused.knobs import ExecutionSpec
from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads import dlrm_candidates as cands
from simfuse.workloads import parallel, run
from simfuse.workloads.parallel import Pool
from simfuse.workloads.run import simulate_workload, summary_rows
from tests.workloads.small_models import planned_dlrm


@pytest.fixture(scope="module")
def h200(root):
    return System.load(root / "topologies" / "h200_nvl8_ib_ndr.yaml")


_dlrm = planned_dlrm


def _rows(res, ex, nodes, g):
    """The run's table rows, NaN (a quantile without an interval, a speedup that does not apply) as None so
    that equal rows compare equal."""
    rows = summary_rows("t", "h200", nodes, nodes * g, res, ex)
    return [{k: None if isinstance(v, float) and v != v else v for k, v in r.items()} for r in rows]


@pytest.fixture
def eager(monkeypatch):
    """Workers for every run, however short its simulations (the threshold guards wall time, not results)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_SIM_S", 0.0)


@pytest.fixture
def whole_grid(monkeypatch):
    """Every knob point simulated (the screen open): the orchestration of the whole grid under test."""
    monkeypatch.setattr(cands, "KNOB_SCREEN_POST_SHARE", 0.0)


def _count_sims(monkeypatch):
    calls = []
    orig = cands.simulate_dlrm

    def counted(*a, **k):
        calls.append(k.get("mode"))
        return orig(*a, **k)

    monkeypatch.setattr(cands, "simulate_dlrm", counted)
    return calls


@pytest.mark.parametrize("uncertainty", ["bound", "mc"])
def test_workers_change_no_result(h200, eager, whole_grid, uncertainty):
    ex = ExecutionSpec(uncertainty=uncertainty, uncertainty_draws=3)
    one = simulate_workload(_dlrm(), h200, 2, execution=ex, workers=1)
    two = simulate_workload(_dlrm(), h200, 2, execution=ex, workers=2)
    assert _rows(one, ex, 2, 8) == _rows(two, ex, 2, 8)
    for m in one:
        assert one[m].phases == two[m].phases
        assert one[m].extras.plan.to_frame().equals(two[m].extras.plan.to_frame())
    assert one["fused"].extras.tuned and two["fused"].extras.tuned  # the knob grid ran (planned placement, tune_knobs auto)


def test_candidates_ran_in_workers(h200, eager, whole_grid, monkeypatch):
    """Each mode has two candidate plans here (its own and the other mode's), and the fused mode two knob
    settings: with workers the parent runs the first candidate (its time says whether workers pay) and the
    workers every other one; serially the parent runs the 2 baseline and the 4 fused candidates."""
    calls = _count_sims(monkeypatch)
    res = simulate_workload(_dlrm(), h200, 2, execution=ExecutionSpec(uncertainty="none"), workers=2)
    assert calls == ["baseline"]
    calls.clear()
    one = simulate_workload(_dlrm(), h200, 2, execution=ExecutionSpec(uncertainty="none"), workers=1)
    assert calls == ["baseline"] * 2 + ["fused"] * 4
    assert {m: r.iteration_time_s for m, r in res.items()} == {m: r.iteration_time_s for m, r in one.items()}


def test_a_long_run_sends_its_first_candidate_to_the_workers(h200, eager, whole_grid, monkeypatch):
    """A run the guard expects to be long (its estimate, ``expected_s``) does not run a first candidate here to
    see whether workers pay: every simulation goes to the workers; the results are the serial ones."""
    calls = _count_sims(monkeypatch)
    ex = ExecutionSpec(uncertainty="none")
    long = simulate_workload(_dlrm(), h200, 2, execution=ex, workers=2, expected_s=parallel.MIN_PARALLEL_RUN_S)
    assert calls == []
    short = simulate_workload(_dlrm(), h200, 2, execution=ex, workers=2, expected_s=0.1)
    assert calls == ["baseline"]
    assert _rows(long, ex, 2, 8) == _rows(short, ex, 2, 8)


@pytest.mark.parametrize("matters", [(True, False), (False, True), (False, False)])
def test_plans_that_disagree_on_tuning_keep_the_serial_choice(h200, eager, monkeypatch, matters):
    """When only some plans' first results say the knobs matter, the loop asks for exactly the serial loop's
    simulations (computing in turn what the workers did not): same result, same tuned flag."""
    ex = ExecutionSpec(uncertainty="none")
    spec = _dlrm()

    def fake(res):  # tuning matters for the candidates marked True: the fused plan, the baseline's plan
        return matters[1] if res.extras.plan.candidate.startswith("baseline:") else matters[0]

    monkeypatch.setattr(cands, "_tuning_matters", fake)
    calls = _count_sims(monkeypatch)
    one = simulate_workload(spec, h200, 2, execution=ex, workers=1)
    serial = list(calls)
    calls.clear()
    two = simulate_workload(spec, h200, 2, execution=ex, workers=2)
    assert _rows(one, ex, 2, 8) == _rows(two, ex, 2, 8)
    assert one["fused"].extras.tuned == two["fused"].extras.tuned
    assert serial[:2] == ["baseline"] * 2 and 2 <= serial.count("fused") <= 2 + matters[0] + matters[1]
    assert calls.count("baseline") == 1 and calls.count("fused") <= serial.count("fused") - 2  # the rest: workers


def test_non_dlrm_interval_runs_in_workers(h200, eager, root):
    model = load_workload(root / "models" / "transformer_tp_decode.yaml")
    ex = ExecutionSpec(uncertainty="mc", uncertainty_draws=4, seed=3)
    one = simulate_workload(model, h200, 2, execution=ex, workers=1)
    two = simulate_workload(model, h200, 2, execution=ex, workers=2)
    assert {m: r.interval for m, r in one.items()} == {m: r.interval for m, r in two.items()}
    assert one["fused"].speedup_interval == two["fused"].speedup_interval


def test_short_runs_stay_in_the_parent(h200, monkeypatch):
    """Below MIN_PARALLEL_SIM_S a run's simulations stay in its own process (no pool is started)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_SIM_S", 1e9)
    started = []
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", lambda *a, **k: started.append(1) or None)
    res = simulate_workload(_dlrm(), h200, 2, execution=ExecutionSpec(), workers=4)
    assert not started and res["fused"].interval["p10"] <= res["fused"].interval["p90"]


def _boom(x):
    if x == 2:
        raise SpecError("<test>", "x", "bad value 2")
    return x * x


def _die(x):
    import os

    os._exit(3)


def test_pool_keeps_task_order_and_forwards_errors():
    with Pool(2) as pool:
        assert pool.map(_boom, [(3,), (1,), (4,)]) == [9, 1, 16]
        with pytest.raises(SpecError, match="x: bad value 2"):
            pool.map(_boom, [(1,), (2,)])
    with Pool(1) as pool:  # no workers: in this process
        assert pool.map(_boom, [(5,)]) == [25] and pool._pool is None
    with Pool(2) as pool, pytest.raises(SimfuseError, match="worker process died"):
        pool.map(_die, [(1,), (2,)])


def test_cli_refuses_bad_worker_counts(root, capsys):
    from simfuse.cli import main

    for bad in ("0", "5000"):
        rc = main(["run", "--model", str(root / "models/transformer_tp_decode.yaml"), "--topology",
                   str(root / "topologies/h200_nvl8_ib_ndr.yaml"), "--workers", bad])
        assert rc == 2 and "--workers: must be in 1..1024" in capsys.readouterr().err


def test_results_pickle_without_simulator_objects(h200):
    """A worker's DLRM result crosses processes: everything but the simulator objects survives pickling."""
    import pickle

    spec = run.scaled_spec(_dlrm(), 2, 8, ExecutionSpec())
    r = cands._dlrm_one(spec, h200, 2, 8, "fused", "auto", 0, ExecutionSpec().knobs, None, None)
    back = pickle.loads(pickle.dumps(r))
    assert back.sim is None and back.net is None
    assert dataclasses.asdict(back.extras.knobs) == dataclasses.asdict(r.extras.knobs) and back.phases == r.phases


def test_a_one_point_sweep_gives_its_workers_to_the_point(root, tmp_path, eager, monkeypatch):
    """A sweep of one node count runs that point with the sweep's workers (its fused candidates in them); the
    table is the one a single process writes."""
    from simfuse.sweeps import run_sweep

    model = tmp_path / "m.yaml"
    model.write_text((root / "models/dlrm_dcnv2_mlperf_16n.yaml").read_text())
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")
    settings = {"batch_per_gpu": "64", "placement": "planned", "uncertainty": "none"}
    calls = _count_sims(monkeypatch)
    one = run_sweep(str(model), topo, [2], tmp_path / "one", workers=1, progress=False, plots=False,
                    settings=settings)
    n_serial = len(calls)
    calls.clear()
    two = run_sweep(str(model), topo, [2], tmp_path / "two", workers=2, progress=False, plots=False,
                    settings=settings)
    assert one.equals(two)
    assert "fused" not in calls and len(calls) < n_serial and n_serial > 2  # the candidates ran in the workers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc: Linux")
def test_workers_exit_when_the_run_is_killed(tmp_path):
    """A run killed with SIGKILL leaves no simulation running on in its workers (the sweep's initializer)."""
    import os
    import signal
    import subprocess
    import time

    script = tmp_path / "run.py"
    script.write_text(
        "import os, sys, time\n"
        "from simfuse.workloads.parallel import Pool\n"
        "def task(d, i):\n"
        "    tmp = os.path.join(d, f'{i}.tmp')\n"
        "    open(tmp, 'w').write(str(os.getpid()))\n"
        "    os.rename(tmp, os.path.join(d, f'{i}.pid'))  # whole: the test reads it as soon as it exists\n"
        "    time.sleep(60)\n"
        "with Pool(2) as p:\n"
        "    p.map(task, [(sys.argv[1], 0), (sys.argv[1], 1)])\n")
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("*.pid"))) < 2:
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

        def alive(pid):  # a zombie (killed, not yet reaped by whoever adopted it) is not running
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in pids)
    finally:
        proc.kill()


def _in_daemon(_):
    with Pool(2) as pool:
        return pool.map(_boom, [(3,), (4,)]), pool._pool is None


def test_a_daemonic_process_runs_its_tasks_itself():
    """Inside a multiprocessing.Pool worker (daemonic: no children allowed) the tasks run in that process."""
    import multiprocessing

    with multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn").Pool(1) as mp:
        assert mp.map(_in_daemon, [0]) == [([9, 16], True)]


def test_no_process_to_start_runs_the_tasks_here(monkeypatch):
    """When no worker can be started (fork refused: a process limit, no memory), the tasks run in this process."""
    def refuse(*a, **k):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", refuse)
    with Pool(2) as pool:
        assert pool.map(_boom, [(3,), (4,)]) == [9, 16] and pool.workers == 1


@pytest.mark.parametrize("rel, want_first", [(1e-12, True), (1e-6, False)])
def test_candidates_that_tie_keep_the_first(h200, monkeypatch, rel, want_first):
    """A later candidate replaces the best only when faster by more than TIE_REL: candidates that differ by
    round-off (the knob grid often ties to 1e-16) keep the first in (plan, knob) order, so the choice does not
    hang on the last bit of a rate solve."""
    orig = cands.simulate_dlrm
    seen = []

    def shifted(*a, **k):  # each fused candidate `rel` faster than the one before it
        r = orig(*a, **k)
        if k.get("mode") == "fused":
            seen.append(k["knobs"])
            r.iteration_time_s = 1e-3 * (1 - rel) ** len(seen)
        return r

    monkeypatch.setattr(cands, "simulate_dlrm", shifted)
    monkeypatch.setattr(cands, "_tuning_matters", lambda res: True)
    res = simulate_workload(_dlrm(), h200, 2, execution=ExecutionSpec(uncertainty="none"), workers=1)
    assert len(seen) == 2 * len(cands.TUNE_GRID)
    assert res["fused"].extras.knobs == (seen[0] if want_first else seen[-1])
