"""Progress of long work (simfuse/progress.py): the reporter is called by the simulation loop, a run's simulations
and a sweep's points; it writes to stderr only, throttled; a sweep's time left is weighted by the points' cost;
a resumed sweep says how many points it reused."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simfuse.progress import Progress, StderrProgress

ROOT_MODEL = "models/dlrm_synthetic.yaml"
H100 = "topologies/h100_nvl8_ib_ndr.yaml"


class Recorder(Progress):
    """Records every call (a reporter as a test sees it)."""

    def __init__(self, level: int = 0, log=None):
        self.level = level
        self.log = log if log is not None else []

    def begin(self, what, total=None, *, up_to=False):
        self.log.append(("begin", self.level, what, total))

    def advance(self, note="", *, eta_s=None):
        self.log.append(("advance", self.level, note, eta_s))

    def doing(self, note):
        self.log.append(("doing", self.level, note))

    def simulation(self, events, sim_time_s):
        self.log.append(("simulation", events, sim_time_s))

    def note(self, text):
        self.log.append(("note", text))

    def nested(self):
        return Recorder(self.level + 1, self.log)


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


# ---------------------------------------------------------------------------------------------- the reporter

def test_stderr_progress_log_lines_are_throttled():
    """Not a terminal: nothing before 10 s, then one plain line at most every 30 s."""
    clock, out = FakeClock(), io.StringIO()
    p = StderrProgress("simfuse run", stream=out, tty=False, clock=clock)
    p.begin("simulation", 4)
    for t in (1.0, 5.0, 9.9):
        clock.t = t
        p.simulation(1000, 1e-3)
    assert out.getvalue() == ""
    clock.t = 10.0
    p.advance()
    clock.t = 20.0
    p.simulation(20_000, 2e-3)  # within 30 s of the last line: not written
    clock.t = 40.5
    p.simulation(40_000, 3e-3)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("simfuse run [0:10]: simulation 2/4")
    assert "40k events" in lines[1] and "\r" not in out.getvalue()
    p.close()
    assert len(out.getvalue().splitlines()) == 2  # nothing to clear in a log


def test_stderr_progress_terminal_line_is_redrawn_and_cleared():
    clock, out = FakeClock(), io.StringIO()
    p = StderrProgress("simfuse sweep", stream=out, tty=True, clock=clock)
    p.begin("point", 3)
    inner = p.nested()
    inner.begin("simulation", 2, up_to=True)
    clock.t = 1.0
    inner.doing("fused")
    text = out.getvalue()
    assert text.startswith("\r") and "point 1/3 | simulation 1/<=2 (fused)" in text and "\n" not in text
    p.close()
    assert out.getvalue().endswith("\r\x1b[K")


def test_stderr_progress_time_left_counts_down():
    clock = FakeClock()
    p = StderrProgress("x", stream=io.StringIO(), tty=False, clock=clock)
    p.begin("point", 2)
    clock.t = 5.0
    p.advance(eta_s=60.0)
    clock.t = 35.0
    assert "~0:30 left" in p.line()
    clock.t = 70.0
    assert "finishing" in p.line()


# ------------------------------------------------------------------------------------------ the engine's hook

def test_simulation_reports_every_n_events(monkeypatch):
    """The simulation loop tells the reporter every SIMULATION_EVERY_EVENTS events, with the events so far and the
    simulated time reached; the run itself is the same with and without a reporter."""
    import simfuse.progress as prog
    from simfuse.engine.simulation import Simulation

    monkeypatch.setattr(prog, "SIMULATION_EVERY_EVENTS", 100)

    def run(progress):
        sim = Simulation(progress=progress)

        def ticker():
            for _ in range(1050):
                yield sim.env.timeout(1e-6)

        sim.process(ticker())
        return sim.run(), sim.events

    rec = Recorder()
    with_hook, without = run(rec), run(None)
    assert with_hook == without
    calls = [c for c in rec.log if c[0] == "simulation"]
    assert [c[1] for c in calls] == list(range(100, with_hook[1] + 1, 100))
    times = [c[2] for c in calls]
    assert times == sorted(times) and 0 < times[-1] <= with_hook[0]


def test_run_reports_each_simulation_and_its_events(monkeypatch):
    """simulate_workload tells the reporter how many simulations it will make (an upper bound), each one it
    makes, and the events inside them; the results equal those of a run without a reporter."""
    import simfuse.progress as prog
    from simfuse.spec import load_workload
    from simfuse.system import System
    from simfuse.workloads.run import simulate_workload

    monkeypatch.setattr(prog, "SIMULATION_EVERY_EVENTS", 100)  # the runs make ~700 events each
    spec, system = load_workload(ROOT_MODEL), System.load(H100)
    rec = Recorder()
    res = simulate_workload(spec, system, 2, progress=rec)
    ref = simulate_workload(spec, system, 2)
    assert {m: r.iteration_time_s for m, r in res.items()} == {m: r.iteration_time_s for m, r in ref.items()}
    begins = [c for c in rec.log if c[0] == "begin"]
    assert begins and begins[0][2] == "simulation"
    n_adv = sum(1 for c in rec.log if c[0] == "advance")
    assert 1 <= n_adv <= begins[0][3]
    assert n_adv == len(res)  # table-wise: one simulation per mode
    events = [c[1] for c in rec.log if c[0] == "simulation"]
    assert events and sum(r.events for r in res.values()) >= max(events)


def test_pool_map_advances_once_per_task():
    from simfuse.workloads.parallel import Pool

    def square(x, progress=None):
        return x * x

    rec = Recorder()
    with Pool(1) as pool:
        assert pool.map(square, [(1,), (2,), (3,)], progress=rec) == [1, 4, 9]
    assert sum(1 for c in rec.log if c[0] == "advance") == 3


def test_run_json_stdout_stays_clean(capsys):
    """Progress goes to stderr only: --format json prints one JSON document on stdout."""
    from simfuse.cli import main

    assert main(["run", "--model", ROOT_MODEL, "--topology", H100, "--nodes", "1", "--format", "json",
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["rows"]


# ------------------------------------------------------------------------------------------------- sweeps

def test_eta_weights_points_by_cost():
    """Seven cheap points done in 7 s and one point 100x as costly left: about 100 s left, not the 1 s that
    counting points gives."""
    from simfuse.sweeps import eta_by_cost

    assert eta_by_cost(7.0, 7.0, 100.0) == pytest.approx(100.0)
    assert eta_by_cost(7.0, 0.0, 100.0) is None
    assert eta_by_cost(7.0, 7.0, 0.0) == 0.0


@given(costs=st.lists(st.floats(0.01, 1000.0), min_size=2, max_size=12), rate=st.floats(0.001, 100.0),
       k=st.integers(1, 11))
def test_eta_is_exact_when_time_is_proportional_to_cost(costs, rate, k):
    from simfuse.sweeps import eta_by_cost

    k = min(k, len(costs) - 1)
    elapsed = rate * sum(costs[:k])
    assert eta_by_cost(elapsed, sum(costs[:k]), sum(costs[k:])) == pytest.approx(rate * sum(costs[k:]))


def test_sweep_progress_uses_point_costs():
    from simfuse.sweeps import _SweepProgress

    clock, rec = FakeClock(), Recorder()
    bar = _SweepProgress(rec, {8: 1.0, 16: 1.0, 1024: 98.0}, clock=clock)
    clock.t = 2.0
    bar.update(8)
    clock.t = 4.0
    bar.update(16)
    etas = [c[3] for c in rec.log if c[0] == "advance"]
    assert etas == [pytest.approx(2.0 * 99.0), pytest.approx(4.0 * 98.0 / 2.0)]


def test_resumed_sweep_says_how_many_points_it_reused(tmp_path):
    from simfuse.sweeps import run_sweep

    first = Recorder()
    df = run_sweep(ROOT_MODEL, H100, [1, 2], tmp_path, progress=first, plots=False, workers=1)
    assert df.attrs["reused_points"] == 0 and not [c for c in first.log if c[0] == "note"]
    assert sum(1 for c in first.log if c[0] == "advance" and c[1] == 0) == 2
    again = Recorder()
    df2 = run_sweep(ROOT_MODEL, H100, [1, 2, 4], tmp_path, progress=again, plots=False, workers=1)
    notes = [c[1] for c in again.log if c[0] == "note"]
    assert df2.attrs["reused_points"] == 2
    assert len(notes) == 1 and "reused 2 of 3 points" in notes[0] and "computing 1" in notes[0]


def test_op_reports_its_simulations():
    """simfuse op: baseline and fused, and with residuals the three quantile runs of each (8 in all)."""
    from simfuse.fused.ops import make_op
    from simfuse.system import System
    from simfuse.workloads.op import run_op

    for topo, n in ((H100, 2), ("topologies/h200_nvl8_ib_ndr.yaml", 8)):
        rec = Recorder()
        run_op(make_op("gemv_all_reduce", {}, 1, 8), System.load(topo), 1, progress=rec)
        assert [c for c in rec.log if c[0] == "begin"] == [("begin", 0, "simulation", n)]
        assert sum(1 for c in rec.log if c[0] == "advance") == n


def test_ticking_refreshes_while_a_long_call_runs():
    import threading

    from simfuse.progress import ticking

    out = io.StringIO()
    p = StderrProgress("simfuse validate", stream=out, tty=False, first_s=0.0, every_s=0.0)
    with ticking(p, "fitting", every_s=0.01):
        threading.Event().wait(0.2)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith("simfuse validate [") and line.endswith(": fitting")
                                   for line in lines)
