"""One spelling per collective.

simfuse names collectives ``all_to_all``, ``all_reduce``, ``all_gather``, ``reduce_scatter`` (the spelling of
:data:`simfuse.collectives.OPS`).  The spellings people type or tools print -- nccl-tests' binaries
(``alltoall_perf``), NCCL kernel names (``AllToAll``), PyTorch (``all_to_all_single``), ``a2a`` -- are accepted as
aliases everywhere a collective is named and normalised with :func:`canonical_collective`.
"""

from __future__ import annotations

import re

from .errors import SpecError

#: Canonical names of the collectives simfuse models.
COLLECTIVES = ("all_to_all", "all_reduce", "all_gather", "reduce_scatter")
#: Further nccl-tests collectives a log may hold (read, not fitted).
OTHER_COLLECTIVES = ("broadcast", "reduce", "sendrecv", "gather", "scatter", "hypercube")

_ALIASES = {
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "a2a": "all_to_all", "alltoallv": "all_to_all",
    "all_to_all_single": "all_to_all",
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "ar": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    **{c: c for c in OTHER_COLLECTIVES},
}


def _key(name: str) -> str:
    s = re.sub(r"(_perf(_mpi)?|\.log|\.txt)$", "", str(name).strip().lower())
    return re.sub(r"[\s\-]+", "_", s)


def collective_or_none(name: str) -> str | None:
    """Canonical name of ``name`` (an alias, any case, ``-``/``_`` either way, ``_perf`` suffix allowed) or None."""
    k = _key(name)
    return _ALIASES.get(k) or _ALIASES.get(k.replace("_", ""))


def canonical_collective(name: str, source: str = "<argument>", field: str = "collective") -> str:
    """Canonical name of ``name``; :class:`SpecError` (naming ``source`` and ``field``) if it is no collective."""
    c = collective_or_none(name)
    if c is None:
        raise SpecError(source, field, f"unknown collective {name!r}; expected one of {', '.join(COLLECTIVES)} "
                                       "(aliases such as alltoall, allreduce, allgather, reducescatter accepted)")
    return c


def collective_choices() -> list[str]:
    """Every accepted spelling of the modelled collectives (for help texts)."""
    return sorted(k for k, v in _ALIASES.items() if v in COLLECTIVES)


__all__ = ["COLLECTIVES", "OTHER_COLLECTIVES", "canonical_collective", "collective_choices", "collective_or_none"]
