"""Physical bounds a fabric fit must respect before a profile applies it (:func:`simfuse.profile.apply_to_topology`)
or ``simfuse calibrate`` writes it (:mod:`simfuse.calibrate.plausibility`)."""

from __future__ import annotations

#: largest fitted alpha (whole-collective latency) per level: fabric_fit.BOUNDS' per-hop latency + launch bound
MAX_ALPHA_S = {"scale_up": 5e-6 + 50e-6, "scale_out": 50e-6 + 50e-6}
#: Measurement noise allowed above a line rate.
LINE_RATE_TOLERANCE = 0.03


def per_nic_rate(beta: float, gpus_per_node: int, nics_per_node: int) -> float:
    """A per-GPU bus bandwidth as the rate of each NIC its node's GPUs share (``G / min(nics, G)``)."""
    g = max(1, int(gpus_per_node))
    return beta * g / min(int(nics_per_node), g)


__all__ = ["LINE_RATE_TOLERANCE", "MAX_ALPHA_S", "per_nic_rate"]
