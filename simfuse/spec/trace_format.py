"""The per-program kernel trace record (``docs/trace_format.md``, v1), defined once: :mod:`simfuse.kernels.trace`
writes it and :mod:`simfuse.calibrate.kernel_trace` reads it.  Plain Python, so reading a trace needs no torch."""

from __future__ import annotations

FORMAT_LINE = "# simfuse-kernel-trace v1"
#: the columns, in the order a trace is written
COLUMNS = (
    "run_id", "kernel", "variant", "backend", "world_size", "rank", "dtype", "shape", "grid", "num_warps",
    "launch_ns", "kernel_end_ns", "program_id", "start_ns", "end_ns", "smid", "flops_per_program",
    "bytes_per_program",
)
STRING_COLUMNS = ("run_id", "kernel", "variant", "backend", "dtype", "shape")
FLOAT_COLUMNS = ("flops_per_program", "bytes_per_program")
INT_COLUMNS = tuple(c for c in COLUMNS if c not in STRING_COLUMNS + FLOAT_COLUMNS)
KERNELS = ("embedding_all_to_all", "gemv_all_reduce", "gemm_all_to_all")
VARIANTS = ("fused", "compute")
BACKENDS = ("emulated", "symmetric")

__all__ = ["BACKENDS", "COLUMNS", "FLOAT_COLUMNS", "FORMAT_LINE", "INT_COLUMNS", "KERNELS", "STRING_COLUMNS",
           "VARIANTS"]
