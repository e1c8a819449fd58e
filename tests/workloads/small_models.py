"""Small workload specs shared by the workload tests."""

from simfuse.spec import workload_from_dict


def planned_dlrm(batch=4096):
    """A six-table DLRM with a planned placement: small enough for seconds-long runs, uneven enough that the two
    modes' plans and the fused knob grid all come into play."""
    tables = [(200_000, 20), (40_000, 4), (1_000_000, 8), (5_000, 1), (300_000, 2), (60_000, 3)]
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [128, 64], "top_mlp": [128, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": 64, "placement": "planned",
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")
