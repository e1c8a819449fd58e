"""Record a PyTorch profiler (Kineto) trace of dense kernels with shapes, for ``simfuse calibrate --kind kineto``.

Run on the GPU machine: ``python3 experiments/gpu_campaigns/dense_trace.py OUT_DIR`` (not run yet: no GPU was lent when it was
written; the trace it writes has not been looked at).  Writes ``torch_profiler_dense_<gpu>.json.gz``:
``torch.profiler`` with ``record_shapes=True`` (so every CPU op carries ``Input Dims`` / ``Input type``, and the
kernels it launches are linked to it by ``External id``) over

* GEMMs ``torch.mm`` in bf16 and fp32: M in 16 .. 16384 against N = K in {1024, 4096} (the M sweep is what the
  saturating efficiency-vs-M model of simfuse.calibrate.dense is fitted on), plus square 8192 bf16;
* element-wise ``add`` / ``mul`` / ``relu`` in bf16 and fp32, 1 MiB .. 1 GiB per operand;
* ``F.embedding_bag`` (sum, 128-wide fp32 rows, pooling 32).

Each op runs 3 warm-up times outside the profiler and 5 times inside it.  The trace is the raw export, gzipped.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def main(out_dir: str) -> None:
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    ops = []
    for dt in (torch.bfloat16, torch.float32):
        for nk in (1024, 4096):
            w = torch.randn(nk, nk, device=dev, generator=g).to(dt)
            for m in (16, 64, 256, 1024, 4096, 16384):
                a = torch.randn(m, nk, device=dev, generator=g).to(dt)
                ops.append(lambda a=a, w=w: torch.mm(a, w))
    sq = torch.randn(8192, 8192, device=dev, generator=g).to(torch.bfloat16)
    ops.append(lambda: torch.mm(sq, sq))
    for dt in (torch.bfloat16, torch.float32):
        eb = torch.finfo(dt).bits // 8
        for mib in (1, 16, 256, 1024):
            n = mib * 2**20 // eb
            x = torch.randn(n, device=dev, generator=g).to(dt)
            y = torch.randn(n, device=dev, generator=g).to(dt)
            ops += [lambda x=x, y=y: torch.add(x, y), lambda x=x, y=y: torch.mul(x, y), lambda x=x: torch.relu(x)]
    rows = 1 << 20
    table = torch.randn(rows, 128, device=dev, generator=g)
    for bags in (1024, 16384):
        ix = torch.randint(0, rows, (bags * 32,), device=dev, generator=g)
        of = torch.arange(bags + 1, device=dev) * 32
        ops.append(lambda ix=ix, of=of: F.embedding_bag(ix, table, of, mode="sum", include_last_offset=True))
    for op in ops:
        for _ in range(3):
            op()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for op in ops:
            for _ in range(5):
                op()
            torch.cuda.synchronize()
    name = torch.cuda.get_device_name().replace("NVIDIA ", "").replace(" ", "_").lower()
    tmp = Path(tempfile.mkdtemp()) / "p.json"
    prof.export_chrome_trace(str(tmp))
    out = Path(out_dir) / f"torch_profiler_dense_{name}.json.gz"
    with open(tmp, "rb") as fi, gzip.open(out, "wb", compresslevel=9) as fo:
        shutil.copyfileobj(fi, fo)
    print(out, out.stat().st_size, "bytes;", torch.__version__, torch.cuda.get_device_name())


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(f"usage: python {Path(__file__).name} OUT_DIR  (needs a CUDA GPU; {__doc__.splitlines()[0]})",
              file=sys.stderr if len(sys.argv) != 2 else sys.stdout)
        sys.exit(0 if sys.argv[1:] in (["--help"], ["-h"]) else 2)
    main(sys.argv[1])
