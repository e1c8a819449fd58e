"""Detect the format of a calibration input from its content (gzip is detected by magic bytes)."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import TraceError
from ._io import not_a_file, peek_text
from .kernel_trace import COLUMNS
from .nccl_tests import looks_like_nccl_tests

KERNEL_TRACE = "kernel_trace"
TORCH_PROFILER = "torch_profiler"
NCCL_TESTS = "nccl_tests"
HELDOUT_CSV = "kernel_measurements"
CAMPAIGN = "kernel_campaign"  # experiments/gpu_campaigns/trace_campaign.py: one timed launch per shape (simfuse.calibrate.wavefit)
CAMPAIGN_COLUMNS = ("kernel", "variant", "dtype", "grid", "bags_per_wg", "flops_per_wg", "bytes_per_wg", "median_s")
HELDOUT_COLUMNS = ("kernel", "variant", "backend", "world_size", "dtype", "shape", "grid", "num_warps", "median_s",
                   "p10_s", "p90_s", "flops", "bytes", "device", "date")


_JSON_START = re.compile(r'^(\{\s*("|\}|$)|\[\s*(\{|\[|\]|"|$))')


def _looks_like_json(stripped: str) -> bool:
    """A JSON document starts with an object or an array of values; ``[host:1234] warning`` does not."""
    return bool(_JSON_START.match(stripped[:200]))


def detect_format(path: str | Path) -> str:
    """One of :data:`KERNEL_TRACE`, :data:`TORCH_PROFILER`, :data:`NCCL_TESTS`, :data:`HELDOUT_CSV`, :data:`CAMPAIGN`."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(str(p), "", not_a_file(str(p)))
    text = peek_text(p)
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped:
        raise TraceError(str(p), "line 1", "empty file")
    if looks_like_nccl_tests(text):
        return NCCL_TESTS  # before JSON: an MPI log may start with "[host:pid]" or "[1,0]<stdout>:"
    if _looks_like_json(stripped):
        return TORCH_PROFILER
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        cols = {c.strip() for c in s.split(",")}
        if set(CAMPAIGN_COLUMNS) <= cols:
            return CAMPAIGN
        if set(COLUMNS) <= cols:
            return KERNEL_TRACE
        if set(HELDOUT_COLUMNS) - {"device", "date", "p10_s", "p90_s"} <= cols:
            return HELDOUT_CSV
        break
    raise TraceError(str(p), "line 1", "unrecognised input: not a simfuse kernel trace (CSV), a PyTorch profiler "
                                       "trace (JSON) or an nccl-tests log")
