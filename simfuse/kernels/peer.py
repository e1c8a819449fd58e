"""Rank-addressable peer buffers.

A :class:`PeerBuffer` is one buffer per rank plus an int64 *pointer table* (on the kernel's device)
holding the address of every rank's buffer as seen from this process.  Kernels reach rank ``d``'s
buffer through ``tl.load(table + d).to(tl.pointer_type(...))``, so the same kernel source serves:

* :class:`EmulatedGroup` -- all ``world_size`` ranks live in this process, on one device (CPU tensors
  under ``TRITON_INTERPRET=1``, or one CUDA device).  ``local_ranks`` is every rank.
* :class:`SymmetricGroup` -- one process per rank; buffers come from
  ``torch.distributed._symmetric_memory`` (``empty`` + ``rendezvous``) and the table holds the peers'
  mapped addresses.  Works across GPUs, or with several processes sharing one GPU when
  ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` is set and the process group is gloo.
  ``local_ranks`` is ``[rank]``.

A :class:`Workspace` caches the buffers an operator needs (flags, partial-sum slots, counters) so that
repeated calls do not allocate (and, for the symmetric backend, do not rendezvous) again.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._runtime import check_int


class PeerBuffer:
    """One tensor of ``shape``/``dtype`` per rank, plus the int64 pointer table.

    ``local(r)`` is the tensor owned by local rank ``r``; ``remote(r)`` is rank ``r``'s buffer as a
    tensor this process can read and write (same as ``local`` for the emulated backend).
    """

    def __init__(self, group, shape: tuple[int, ...], dtype: torch.dtype, views: dict[int, torch.Tensor],
                 ptr_table: torch.Tensor, handle=None):
        self.group = group
        self.shape = tuple(shape)
        self.dtype = dtype
        self._views = views
        self.ptr_table = ptr_table
        self.handle = handle

    def local(self, rank: int) -> torch.Tensor:
        if rank not in self.group.local_ranks:
            raise ValueError(f"rank: {rank} is not a local rank of this {self.group.backend} group")
        return self._views[rank]

    def remote(self, rank: int) -> torch.Tensor:
        if not 0 <= rank < self.group.world_size:
            raise ValueError(f"rank: {rank} out of range [0, {self.group.world_size})")
        return self._views[rank]


ALIGN_BYTES = 16


def _check_aligned(ptrs) -> None:
    for p in ptrs:
        if int(p) % ALIGN_BYTES:
            raise RuntimeError(f"peer buffer at {int(p):#x} is not {ALIGN_BYTES}-byte aligned (kernels assume it)")


class EmulatedGroup:
    """``world_size`` ranks emulated in this process on one device (CPU for the interpreter)."""

    backend = "emulated"

    def __init__(self, world_size: int, device: str | torch.device = "cpu", *, concurrent: bool = False):
        self.world_size = check_int("world_size", world_size, minimum=1)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.local_ranks = list(range(self.world_size))
        self.rank = 0
        self.concurrent = bool(concurrent)
        self._streams: list | None = None

    def run_ranks(self, fn) -> None:
        """Call ``fn(i, rank)`` for every local rank.  With ``concurrent=True`` on CUDA each rank's launches
        go to its own stream (forked from and joined back into the current stream), so the ranks'
        kernels may overlap on the GPU as they would on separate GPUs; otherwise they run in rank order.
        Kernels launched this way must not wait for each other (none of simfuse's do)."""
        if not (self.concurrent and self.device.type == "cuda"):
            for i, r in enumerate(self.local_ranks):
                fn(i, r)
            return
        cur = torch.cuda.current_stream(self.device)
        if self._streams is None:
            self._streams = [torch.cuda.Stream(self.device) for _ in self.local_ranks]
        for i, r in enumerate(self.local_ranks):
            st = self._streams[i]
            st.wait_stream(cur)
            with torch.cuda.stream(st):
                fn(i, r)
        for st in self._streams:
            cur.wait_stream(st)

    def alloc(self, shape: Sequence[int], dtype: torch.dtype, fill: float | int | None = None) -> PeerBuffer:
        views = {}
        for r in range(self.world_size):
            t = torch.empty(tuple(shape), dtype=dtype, device=self.device)
            if fill is not None:
                t.fill_(fill)
            views[r] = t
        ptrs = [views[r].data_ptr() for r in range(self.world_size)]
        _check_aligned(ptrs)
        table = torch.tensor(ptrs, dtype=torch.int64, device=self.device)
        return PeerBuffer(self, tuple(shape), dtype, views, table)

    def barrier(self) -> None:
        """Nothing to do: every emulated rank's kernels run in order on one stream."""


class SymmetricGroup:
    """One rank per process over ``torch.distributed`` (any backend; gloo for ranks sharing a GPU).

    Buffers are allocated with ``torch.distributed._symmetric_memory.empty`` and exchanged with
    ``rendezvous`` (collective: every rank must allocate the same buffers in the same order).
    """

    backend = "symmetric"

    def __init__(self, group=None, device: str | torch.device | None = None):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("group: torch.distributed is not initialized (call init_process_group first)")
        self._dist = dist
        self.pg = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.pg)
        self.world_size = dist.get_world_size(self.pg)
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        if self.device.type != "cuda":
            raise ValueError(f"device: symmetric memory needs a CUDA device, got {self.device}")
        self.local_ranks = [self.rank]
        self.group_name = self.pg.group_name

    def alloc(self, shape: Sequence[int], dtype: torch.dtype, fill: float | int | None = None) -> PeerBuffer:
        import torch.distributed._symmetric_memory as symm_mem

        t = symm_mem.empty(tuple(shape), dtype=dtype, device=self.device)
        if fill is not None:
            t.fill_(fill)
        torch.cuda.synchronize(self.device)
        hdl = symm_mem.rendezvous(t, self.pg)
        elem = t.element_size()
        off_bytes = t.data_ptr() - int(hdl.buffer_ptrs[self.rank])
        if off_bytes % elem:
            raise RuntimeError("symmetric buffer is not aligned to its element size")
        views = {}
        for r in range(self.world_size):
            views[r] = t if r == self.rank else hdl.get_buffer(r, tuple(shape), dtype, off_bytes // elem)
        ptrs = [int(p) + off_bytes for p in hdl.buffer_ptrs]
        _check_aligned(ptrs)
        table = torch.tensor(ptrs, dtype=torch.int64, device=self.device)
        self._dist.barrier(self.pg)
        return PeerBuffer(self, tuple(shape), dtype, views, table, handle=hdl)

    def run_ranks(self, fn) -> None:
        """Call ``fn(0, rank)`` for this process's rank."""
        fn(0, self.rank)

    def barrier(self) -> None:
        """Every rank has finished its earlier work on the device (host barrier over the group)."""
        torch.cuda.synchronize(self.device)
        self._dist.barrier(self.pg)


class Workspace:
    """Caches named :class:`PeerBuffer` objects for repeated operator calls on one group.

    Counters and flags are left at zero by every completed call (the consumer that waits resets
    them), so a workspace can be reused, also inside a captured CUDA graph.
    """

    def __init__(self, group):
        self.group = group
        self._bufs: dict[str, PeerBuffer] = {}

    def get(self, name: str, shape: Sequence[int], dtype: torch.dtype, fill: float | int | None = None) -> PeerBuffer:
        b = self._bufs.get(name)
        if b is None or b.shape != tuple(shape) or b.dtype != dtype:
            b = self.group.alloc(shape, dtype, fill=fill)
            self._bufs[name] = b
        return b
