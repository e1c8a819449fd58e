"""Calibration: fit the simulator's cost models from measured traces, and validate them.

* :mod:`.kernel_trace`, :mod:`.torch_trace`, :mod:`.nccl_tests` -- streaming readers (errors name file and
  line or key);
* :mod:`simfuse.profile.fit` -- non-negative least squares and alpha-beta fits;
* :mod:`.build` -- ``simfuse calibrate``: inputs -> profile YAML;
* :mod:`simfuse.profile` (the runtime profile, low in the layers) -- :func:`load_profile`,
  :func:`apply_to_topology`, :func:`cost_model_for`;
* :mod:`.validate` -- ``simfuse validate``: simulated vs measured, calibration and held-out points;
* :mod:`simfuse.cli.calibrate` -- argparse wiring (:func:`add_calibrate_parser`, :func:`add_validate_parser`).
"""

from ..profile.load import CalibrationProfile, apply_to_topology, cost_model_for, load_profile

__all__ = ["CalibrationProfile", "apply_to_topology", "cost_model_for", "load_profile"]
