"""Triton kernels of fused computation + collective operators (optional extra ``kernels``).

Importing this package needs torch and triton (``pip install 'simfuse[kernels]'``); ``import simfuse``
does not.  Submodules are loaded on first attribute access.
"""

from __future__ import annotations

import importlib

try:  # fail early with a clear message; torch/triton are the optional extra
    import torch as _torch_mod  # noqa: F401
    import triton as _triton_mod  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "simfuse.kernels needs torch and triton: install the optional extra with "
        "`pip install 'simfuse[kernels]'`"
    ) from exc

_EXPORTS = {
    "EmulatedGroup": "peer", "SymmetricGroup": "peer", "PeerBuffer": "peer", "Workspace": "peer",
    "EmbeddingConfig": "embedding", "embedding_all_to_all": "embedding", "embedding_compute": "embedding",
    "embedding_all_to_all_baseline": "embedding", "embedding_reference": "embedding", "all_to_all_rows": "embedding",
    "wait_flags": "embedding",
    "GemvConfig": "gemv", "gemv_all_reduce": "gemv", "gemv_compute": "gemv", "gemv_all_reduce_baseline": "gemv",
    "gemv_reference": "gemv", "all_reduce_sum": "gemv",
    "GemmConfig": "gemm", "gemm_all_to_all": "gemm", "gemm_compute": "gemm", "gemm_all_to_all_baseline": "gemm",
    "gemm_reference": "gemm", "moe_routing": "gemm", "scatter_rows": "gemm", "scatter_plan": "gemm",
    "TraceRecorder": "trace", "KernelTrace": "trace", "write_trace": "trace", "read_trace": "trace",
    "register_ops": "library",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'simfuse.kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
