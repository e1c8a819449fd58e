"""Run a piece of Python in a child process with a wall-time kill and an address-space limit.

A hang is a kill at the wall limit; unbounded memory is a ``MemoryError`` (or a kill) once the child's address
space reaches ``mem_bytes`` (``resource.setrlimit(RLIMIT_AS)``).  These limits are failure detectors, not timing
assertions: a case that finishes well inside them passes however long it took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Address space of a child: the interpreter with numpy, pandas and simpy imported reserves ~1.5 GiB of it.
DEFAULT_MEM_BYTES = 3 << 30


@dataclass
class ChildResult:
    returncode: int | None  # None: killed at the wall limit
    stdout: str
    stderr: str

    @property
    def hung(self) -> bool:
        return self.returncode is None

    def json(self):
        """The last stdout line, parsed (children report what they saw as one JSON line)."""
        lines = [x for x in self.stdout.splitlines() if x.strip()]
        return json.loads(lines[-1]) if lines else None


def _limit(mem_bytes: int):
    def apply():  # runs in the child between fork and exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    return apply


def run_limited(code: str, *, timeout_s: float = 60.0, mem_bytes: int = DEFAULT_MEM_BYTES,
                args: list[str] | None = None, cwd: Path | None = None) -> ChildResult:
    """Run ``python -c code args...`` with simfuse importable from this checkout, under the limits."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[k] = "1"  # BLAS thread pools reserve address space per thread
    try:
        p = subprocess.run([sys.executable, "-c", code, *(args or [])], capture_output=True, text=True,
                           timeout=timeout_s, env=env, cwd=str(cwd or ROOT), preexec_fn=_limit(mem_bytes))
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return ChildResult(None, out, err)
    return ChildResult(p.returncode, p.stdout, p.stderr)


#: A child that runs ``simfuse.cli.main(argv)`` and prints ``{"rc": ..., "err": ...}`` (exit 2 or 0 expected).
CLI_CHILD = """
import json, sys, io, contextlib
from simfuse.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        rc = main(sys.argv[1:])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
print(json.dumps({"rc": rc, "err": err.getvalue()[-2000:]}))
"""


def run_cli_limited(argv: list[str], *, timeout_s: float = 60.0, mem_bytes: int = DEFAULT_MEM_BYTES,
                    cwd: Path | None = None) -> ChildResult:
    return run_limited(CLI_CHILD, timeout_s=timeout_s, mem_bytes=mem_bytes, args=[str(a) for a in argv], cwd=cwd)
