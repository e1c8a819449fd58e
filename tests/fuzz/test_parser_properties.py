"""Property tests of every input parser: random bytes, random truncations of a valid file, random byte flips and
truncated gzip give success or a :class:`~simfuse.errors.SimfuseError` (CLI exit 2), never another exception, a hang
or unbounded memory.  The examples run in a child process under a wall-time kill and an address-space limit
(:mod:`tests.fuzz.harness`); the inputs are deterministic (a seeded numpy Generator)."""

from __future__ import annotations

import pytest

from .harness import run_limited
from .parser_targets import TARGETS

CHILD = "import runpy, sys; sys.argv = ['x', *sys.argv[1:]]; runpy.run_module('tests.fuzz.parser_targets', " \
        "run_name='__main__')"


def _run(names: list[str], n: int, seed: int, tmp_path, timeout_s: float):
    res = run_limited(CHILD, args=[",".join(names), str(n), str(seed), str(tmp_path)], timeout_s=timeout_s)
    assert not res.hung, f"parsers {names} did not finish within {timeout_s} s (a hang?)"
    assert res.returncode == 0, res.stderr[-3000:]
    return res.json()


def test_every_parser_survives_hostile_bytes(tmp_path):
    """All parsers in one child (imports paid once), 16 hostile inputs each."""
    failures = _run(list(TARGETS), 16, 37, tmp_path, timeout_s=240)
    assert failures == [], "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("name", TARGETS)
def test_each_parser_survives_many_hostile_inputs(name, tmp_path):
    failures = _run([name], 200, 1037, tmp_path, timeout_s=600)
    assert failures == [], "\n".join(failures)
