"""The result of one simulated iteration, shared by every workload (:class:`IterationResult`).

A workload keeps what only it knows (DLRM: its sharding plan, fused knobs and batch) in ``extras``, an object of
its own type; the pipeline (:mod:`simfuse.workloads.run`) never reads it, the workload's
:meth:`~simfuse.workloads.base.Workload.row_columns` turns it into result columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IterationResult:
    """One mode of one run: times on the critical rank and what the simulation cost."""

    mode: str
    iteration_time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    sim_mode: str
    classes: int
    events: int
    wall_s: float
    phases: list = field(default_factory=list)  # (phase, start_s, end_s) of the critical rank, over one step
    #: identical back-to-back steps (transformer layers, ``Graph.repeat``) the iteration is made of: ``phases`` and a
    #: recorded trace cover one of them, the times above all of them
    repeat: int = 1
    sim: object = None  # the simulator objects of a recorded run (a Perfetto trace reads them); None otherwise
    net: object = None
    launch: str = "eager"  # how its kernels were launched (eager | graph: simfuse.system.System.with_launch)
    #: the workload's own result (DLRM: :class:`~simfuse.workloads.dlrm.DLRMExtras`); None for none
    extras: object = None
    #: the prediction interval (iteration time p10/p50/p90, s) and how it was made (``bound``, ``mc``,
    #: ``inputs``; ``none``: no interval); None: the run made none (a Chakra trace)
    interval: dict | None = None
    uncertainty: str = "none"
    #: why the run has no interval ("" when it has one)
    uncertainty_note: str = ""
    #: the speedup's interval (the fused result of a run of both modes)
    speedup_interval: dict | None = None
    #: the :class:`~simfuse.uncertainty.InputAnalysis` of an ``uncertainty=inputs`` run
    input_analysis: object = None
