"""Chakra ET traces written for the hostile-input suite (our own fixtures, built with simfuse's encoder)."""

from __future__ import annotations

from pathlib import Path

from simfuse.graph.chakra.io import encode_et
from simfuse.graph.chakra.proto import AttributeProto, GlobalMetadata, Node, NodeType


def meta(rank: int | None = None, n_ranks: int | None = None) -> GlobalMetadata:
    attrs = []
    if rank is not None:
        attrs.append(AttributeProto("simfuse_rank", "int64_val", rank))
    if n_ranks is not None:
        attrs.append(AttributeProto("simfuse_n_ranks", "int64_val", n_ranks))
    return GlobalMetadata("1.0.0", attrs)


def comp(i: int, micros: int = 10, deps=()) -> Node:
    return Node(id=i, name=f"comp{i}", type=NodeType.COMP_NODE, duration_micros=micros, data_deps=list(deps),
                attr=[AttributeProto("is_cpu_op", "bool_val", False)])


def p2p(i: int, send: bool, src: int, dst: int, size: int, tag: int = 0, deps=()) -> Node:
    return Node(id=i, name=f"{'send' if send else 'recv'}{i}", data_deps=list(deps),
                type=NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE,
                attr=[AttributeProto("is_cpu_op", "bool_val", False), AttributeProto("comm_src", "int32_val", src),
                      AttributeProto("comm_dst", "int32_val", dst), AttributeProto("comm_size", "int64_val", size),
                      AttributeProto("comm_tag", "int32_val", tag)])


def all_reduce(i: int, size: int, deps=()) -> Node:
    return Node(id=i, name=f"ar{i}", type=NodeType.COMM_COLL_NODE, data_deps=list(deps),
                attr=[AttributeProto("is_cpu_op", "bool_val", False), AttributeProto("comm_type", "int64_val", 0),
                      AttributeProto("comm_size", "int64_val", size)])


def write(d: Path, files: dict[int, tuple[GlobalMetadata, list[Node]]], prefix: str = "tr") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for rank, (m, nodes) in files.items():
        (d / f"{prefix}.{rank}.et").write_bytes(encode_et(m, nodes))
    return d


def two_rank_simfuse_trace(d: Path, size: int = 64 << 20) -> Path:
    """Two ranks that record their rank count (as simfuse writes them): compute, then an all-reduce."""
    return write(d, {r: (meta(r, 2), [comp(1, 10), all_reduce(2, size, deps=[1])]) for r in (0, 1)})


def ring(d: Path, n: int, steps: int, size: int = 1 << 20, foreign: bool = True) -> Path:
    """ASTRA-sim's send/recv ring: every step each rank sends to the next and receives from the previous, the
    two with no dependency between them; step k's send waits for step k-1's receive (same tag every step)."""
    files = {}
    for r in range(n):
        nodes, prev_recv = [], None
        for k in range(steps):
            s_id, r_id = 2 * k + 1, 2 * k + 2
            nodes.append(p2p(s_id, True, r, (r + 1) % n, size, deps=[prev_recv] if prev_recv else []))
            nodes.append(p2p(r_id, False, (r - 1) % n, r, size))
            prev_recv = r_id
        files[r] = (meta() if foreign else meta(r, n), nodes)
    return write(d, files)


def receive_first_deadlock(d: Path) -> Path:
    """Both ranks receive before they send, on one stream: nothing can ever start (a true deadlock)."""
    files = {r: (meta(r, 2), [p2p(1, False, 1 - r, r, 4096), p2p(2, True, r, 1 - r, 4096, deps=[1])])
             for r in (0, 1)}
    return write(d, files)


def mismatched_sizes(d: Path) -> Path:
    files = {0: (meta(0, 2), [p2p(1, True, 0, 1, 1 << 20)]), 1: (meta(1, 2), [p2p(1, False, 0, 1, 1 << 30)])}
    return write(d, files)


def unmatched_send(d: Path) -> Path:
    files = {0: (meta(0, 2), [p2p(1, True, 0, 1, 1 << 20), p2p(2, True, 0, 1, 1 << 20)]),
             1: (meta(1, 2), [p2p(1, False, 0, 1, 1 << 20)])}
    return write(d, files)


def many_ranks(d: Path, n: int) -> Path:
    """``n`` tiny rank files: one compute node and one all-reduce each."""
    return write(d, {r: (meta(r, n), [comp(1, 5), all_reduce(2, 1 << 20, deps=[1])]) for r in range(n)})
