"""simpy engine: the Simulation object, GPU compute (waves of workgroups)."""

from .compute import KernelResult, effective_slots, run_kernel, simulate_kernel
from .simulation import Record, Recorder, Simulation

__all__ = ["KernelResult", "Record", "Recorder", "Simulation", "effective_slots", "run_kernel", "simulate_kernel"]
