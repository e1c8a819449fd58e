"""One parameter (table) of a TorchRec sharding plan as read from any of its forms, before it is matched to the
model spec (:mod:`.torchrec_plan`, :mod:`.torchrec_repr`), and the small field readers they share."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SpecError

_RANK_RE = re.compile(r"rank:([0-9]{1,9})(?![0-9])")


@dataclass
class Shard:
    offsets: tuple[int, int]
    sizes: tuple[int, int]
    rank: int


@dataclass
class Entry:
    """One parameter (table) of a TorchRec plan, before it is matched to the model spec."""

    module: str
    param: str
    sharding_type: str
    ranks: list[int] | None
    shards: list[Shard] | None
    where: str  # field name for errors: "<module>/<param>" or "line N"


def _int_list(v, src: str, fld: str, length: int | None = None) -> list[int]:
    if not isinstance(v, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise SpecError(src, fld, f"expected a list of integers, got {str(v)[:60]!r}")
    if length is not None and len(v) != length:
        raise SpecError(src, fld, f"expected {length} integers ([rows, columns]), got {len(v)}")
    return [int(x) for x in v]


def _placement_rank(p, src: str, fld: str) -> int:
    if isinstance(p, bool):
        raise SpecError(src, fld, f"expected a rank, got {p!r}")
    if isinstance(p, int):
        return p
    rank = getattr(p, "rank", None)
    if callable(rank):  # torch.distributed._remote_device
        r = rank()
        if isinstance(r, int):
            return r
    m = _RANK_RE.search(str(p))
    if not m:
        raise SpecError(src, fld, f"no rank in placement {str(p)[:40]!r} (expected rank:<r>/<device>)")
    return int(m.group(1))


__all__ = ["Entry", "Shard"]
