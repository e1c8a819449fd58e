"""simfuse: simulate (and run) fused computation-collective operators.

Python API (each returns pandas DataFrames; see :mod:`simfuse.api`)::

    import simfuse
    system = simfuse.load_topology("topologies/h200_nvl8_ib_ndr.yaml")
    df = simfuse.run("models/dlrm_dcnv2_tablewise.yaml", system, nodes=16, slice_wgs=2)
    df = simfuse.sweep("models/dlrm_dcnv2_tablewise.yaml", "topologies/h200_nvl8_ib_ndr.yaml", "8..64", "runs/x")
    df = simfuse.collective(system, 16, "all_reduce", 64 * 2**20)
    df = simfuse.op("embedding_all_to_all", system, nodes=2, global_batch=65536)

Layers (data flows one way): specs -> System -> graph builders -> executor (simpy) -> results.  The Triton
kernels (``simfuse.kernels``) are an optional extra imported lazily.
"""

from .version import __version__  # noqa: F401

__all__ = ["collective", "load_topology", "load_workload", "op", "run", "sweep"]


def __getattr__(name):  # import the API (and pandas) on first use
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'simfuse' has no attribute {name!r}")
