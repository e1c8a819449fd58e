"""Bounds on command-line inputs and output paths, checked at the edge before any work.

Every check raises :class:`~simfuse.errors.SpecError` (one line, CLI exit code 2) naming the argument.  Output
helpers keep every file a command writes inside its ``--out``: names are fixed by simfuse (never derived from input
content), and a symbolic link inside ``--out`` that points elsewhere is refused.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import SpecError, short_repr

#: Most nodes one simulation may have (65,536 nodes = 524,288 GPUs at 8 per node).
MAX_NODES = 65_536
#: Most GPUs per node an argument may ask for.
MAX_GPUS_PER_NODE = 1024
#: Most message sizes one ``collective -b/-e/-f`` range may produce.
MAX_SIZES = 1000
#: Most node counts one sweep may have.
MAX_SWEEP_POINTS = 1000


def check_nodes(nodes: int, field: str = "--nodes") -> int:
    """A node count in 1..:data:`MAX_NODES`."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise SpecError("<argument>", field, f"must be an integer in 1..{MAX_NODES}, got {short_repr(nodes)}")
    return nodes


def resolve_gpus_per_node(topology, gpus_per_node: int | None, field: str = "--gpus-per-node") -> int:
    """``gpus_per_node`` (``None``: the topology's) checked against the topology: 1..:data:`MAX_GPUS_PER_NODE`, at
    most the node's GPUs (``scale_up.gpus_per_node``: a run may use part of a node, not more than it holds), and a
    multiple of the NICs it uses (``min(nics_per_node, gpus_per_node)``), as the fabric needs."""
    if gpus_per_node is None:
        return int(topology.scale_up.gpus_per_node)
    g = gpus_per_node
    if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= MAX_GPUS_PER_NODE:
        raise SpecError("<argument>", field, f"must be an integer in 1..{MAX_GPUS_PER_NODE}, got {short_repr(g)}")
    node = int(topology.scale_up.gpus_per_node)
    if g > node:
        raise SpecError("<argument>", field, f"{g} GPUs per node, but the topology's nodes hold {node} "
                        f"({topology.source}: scale_up.gpus_per_node): use at most {node}, or a topology with "
                        "larger nodes")
    nics = min(int(topology.scale_out.nics_per_node), g)
    if g % nics:
        raise SpecError("<argument>", field, f"{g} GPUs do not split over the topology's {nics} NICs per node "
                        f"({topology.source}: scale_out.nics_per_node)")
    return g


def size_range(begin: int, end: int, factor: float, field: str = "--factor") -> list[int]:
    """nccl-tests ``-b/-e/-f`` sizes: ``begin, begin*f, ...`` up to ``end``, at most :data:`MAX_SIZES` of them."""
    if not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
        raise SpecError("<argument>", field, f"must be a finite number > 1, got {short_repr(factor)}")
    if begin <= 0 or end < begin:
        raise SpecError("<argument>", "--begin/--end", "need 0 < begin <= end")
    count = int(math.floor(math.log(end / begin) / math.log(factor) + 1e-9)) + 1 if end > begin else 1
    if count > MAX_SIZES:
        raise SpecError("<argument>", field, f"the range gives {count:,} sizes (at most {MAX_SIZES}); "
                        "use a larger --factor or a narrower -b/-e range")
    sizes = []
    s = float(begin)
    while s <= end * (1 + 1e-12) and len(sizes) <= MAX_SIZES:
        sizes.append(int(s))
        s *= factor
    return sizes


def check_finite_number(value, field: str, source: str = "<argument>", max_abs: float = 2.0**53):
    """A finite int/float of magnitude at most ``max_abs`` (strings pass through unchanged)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f) or abs(f) > max_abs:
        raise SpecError(source, field, f"must be a finite number of magnitude <= {max_abs:g}, got {short_repr(value)}")
    return value


# ----------------------------------------------------------------------------------------------- output paths

def check_out_dir(path: str | Path | None, field: str = "--out") -> Path | None:
    """``--out DIR``: refuse an existing non-directory before any work (nothing is created here)."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise SpecError("<argument>", field, f"{short_repr(str(p))} exists and is not a directory")
    if not p.exists() and p.parent.exists() and not p.parent.is_dir():
        raise SpecError("<argument>", field, f"parent of {short_repr(str(p))} is not a directory")
    return p


def check_out_file(path: str | Path | None, field: str = "--out") -> Path | None:
    """``--out FILE``: refuse an existing directory, or a parent that is a file, before any work."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise SpecError("<argument>", field, f"{short_repr(str(p))} is a directory; give a file name")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SpecError("<argument>", field, f"{short_repr(str(parent))} is not a directory")
            break
    return p


def remove_stale(root: str | Path, outputs, written) -> None:
    """Remove each of ``outputs`` (names a command may write into ``root``) that this run did not write
    (``written``: names): an earlier run's file left beside this run's would be read as its own."""
    for name in outputs:
        stale = inside(root, name)
        if name not in written and (stale.is_file() or stale.is_symlink()):
            os.unlink(stale)


def inside(root: str | Path, *names: str) -> Path:
    """``root/names...`` for fixed, simfuse-chosen names, refusing a result that resolves outside ``root``
    (a ``..`` or absolute name, or a symbolic link inside ``root`` pointing elsewhere).  The last component may be a
    symbolic link: files are written by renaming over it, which replaces the link, not its target."""
    base = Path(root)
    real_root = Path(os.path.realpath(base))
    p = base
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise SpecError("<argument>", "--out", f"refusing the path component {short_repr(name)}")
        p = p / name
    parent_real = Path(os.path.realpath(p.parent))
    if parent_real != real_root and real_root not in parent_real.parents:
        raise SpecError("<argument>", "--out", f"{short_repr(str(p.parent))} leads outside {short_repr(str(base))} "
                        "(a symbolic link?); refusing to write there")
    return p
