"""Calibration: fit the simulator's cost models from measured traces, and validate them.  These tools sit above
the workloads in the layers and may run the simulator; what a run needs of a profile is :mod:`simfuse.profile`.

* :mod:`.kernel_trace`, :mod:`.torch_trace`, :mod:`.nccl_tests` -- streaming readers (errors name file and
  line or key);
* :mod:`simfuse.profile.fit` -- non-negative least squares and alpha-beta fits;
* :mod:`.build` -- ``simfuse calibrate``: inputs -> profile YAML;
* :mod:`.campaign`, :mod:`.wavefit` -- kernel timing campaigns read, and the wave models fitted on them;
* :mod:`.fabric_fit`, :mod:`.corpus` -- ``simfuse fit-fabric`` and the public network corpus;
* :mod:`simfuse.profile` (the runtime profile, low in the layers) -- :func:`load_profile`,
  :func:`apply_to_topology`, :func:`cost_model_for`;
* :mod:`.validate` -- ``simfuse validate``: simulated vs measured, calibration and held-out points;
* :mod:`simfuse.cli.calibrate` -- argparse wiring (:func:`add_calibrate_parser`, :func:`add_validate_parser`).
"""

from ..profile.load import CalibrationProfile, apply_to_topology, cost_model_for, load_profile

__all__ = ["CalibrationProfile", "apply_to_topology", "cost_model_for", "load_profile"]
