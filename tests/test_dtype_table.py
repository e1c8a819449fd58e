"""One dtype byte table (:data:`simfuse.units.DTYPE_BYTES`): no module keeps its own, and its sizes agree with
torch's element sizes."""

import ast
from pathlib import Path

import pytest

from simfuse.units import DTYPE_BYTES, INDEX_DTYPE_BYTES, TORCH_DTYPE_NAMES, element_bytes

PKG = Path(__file__).resolve().parents[1] / "simfuse"
#: fused/knobs.py still spells the table out (its owner re-points it at simfuse.units); it must stay equal
KNOWN_COPIES = {"fused/knobs.py"}


def _byte_tables(path: Path):
    """Dict literals that map a dtype name (bf16, fp16, float16, bfloat16) to an integer."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            pairs = [(k.value, v.value) for k, v in zip(node.keys, node.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
            if any(k in ("bf16", "fp16", "float16", "bfloat16") and isinstance(v, int) and not isinstance(v, bool)
                   for k, v in pairs):
                yield node.lineno


def test_no_second_dtype_byte_table():
    found = [f"{p.relative_to(PKG)}:{line}" for p in sorted(PKG.rglob("*.py")) if p.name != "units.py"
             for line in _byte_tables(p) if str(p.relative_to(PKG)) not in KNOWN_COPIES]
    assert not found, found


def test_known_copies_equal_the_table():
    from simfuse.fused import knobs

    assert knobs.DTYPE_BYTES == DTYPE_BYTES


def test_dtype_choices_are_the_table():
    from simfuse.spec import topology, workload

    assert set(topology.DTYPES) == set(DTYPE_BYTES)
    assert set(workload.DTYPES) <= set(DTYPE_BYTES)


def test_torch_spellings_have_torch_sizes():
    torch = pytest.importorskip("torch")
    checked = 0
    for name, simfuse_name in TORCH_DTYPE_NAMES.items():
        dt = getattr(torch, name, None)
        if isinstance(dt, torch.dtype):
            assert element_bytes(name) == dt.itemsize, name
            assert element_bytes(simfuse_name) == dt.itemsize, name
            checked += 1
    assert checked >= 10
    assert element_bytes("no_such_dtype", 7) == 7
    assert set(INDEX_DTYPE_BYTES).isdisjoint(DTYPE_BYTES)
