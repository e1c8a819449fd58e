import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")

# Property tests draw the same examples on every run (CI on a fresh clone has no example database, so random
# draws would make its outcome depend on luck); HYPOTHESIS_PROFILE=explore draws new ones for local bug hunting.
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("ci", derandomize=True)
_hyp_settings.register_profile("explore", derandomize=False)
_hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def h200():
    from simfuse.spec import load_topology

    return load_topology(ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml")


def make_topology(gpus_per_node=8, nics_per_node=8, nvl_gbps=450.0, nvl_lat_us=1.0, nic_gbit=400.0,
                  nic_lat_us=3.0, fabric="fat_tree", oversub=1.0, launch_us=0.0, sync_us=0.0, scale_out_extra=None,
                  scale_up_extra=None, collectives_extra=None, device_extra=None, **extra):
    """A topology dict with round numbers for closed-form checks (efficiencies 1).  ``scale_out_extra``,
    ``scale_up_extra``, ``collectives_extra``, ``device_extra``: further keys of those sections (the
    fat_tree_3tier geometry, ``nvls``, ``sharp``, ``protocol_model``, ``gemm_efficiency`` ...)."""
    from simfuse.spec import topology_from_dict

    d = {
        "name": "test",
        "device": {"name": "dev", "compute_units": 100, "max_workgroups_per_cu": 2,
                   "peak_tflops": {"bf16": 1000, "fp32": 100, "fp16": 1000}, "hbm_bw_gbps": 4000,
                   "hbm_efficiency": 1.0, "flops_efficiency": 1.0, "kernel_launch_latency_us": 2.0},
        "scale_up": {"gpus_per_node": gpus_per_node, "bw_gbps": nvl_gbps, "latency_us": nvl_lat_us},
        "scale_out": {"nics_per_node": nics_per_node, "nic_bw_gbit": nic_gbit, "latency_us": nic_lat_us,
                      "fabric": fabric, "oversubscription": oversub},
        "collectives": {"launch_us": launch_us, "sync_us": sync_us},
    }
    d["scale_out"].update(scale_out_extra or {})
    d["scale_up"].update(scale_up_extra or {})
    d["collectives"].update(collectives_extra or {})
    d["device"].update(device_extra or {})
    for k, v in extra.items():
        d[k] = v
    return topology_from_dict(d, "<test>")
