"""The runtime calibration profile: what :class:`~simfuse.system.System` needs to load a profile and apply it to
a topology and its cost model.  It sits low in the layers (above :mod:`simfuse.costs` and :mod:`simfuse.spec`);
the tools that write and validate profiles (:mod:`simfuse.calibrate`) sit above the simulator.

* :mod:`.load` -- :func:`load_profile`, :func:`profile_from_dict`, :func:`apply_to_topology`, :func:`cost_model_for`;
* :mod:`.fit` -- the alpha-beta collective formulas of the profile format and the small least-squares fits.
"""

from .load import CalibrationProfile, apply_to_topology, cost_model_for, load_profile, profile_from_dict

__all__ = ["CalibrationProfile", "apply_to_topology", "cost_model_for", "load_profile", "profile_from_dict"]
