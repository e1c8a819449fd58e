"""Chakra execution traces <-> simfuse's operator-graph IR (:mod:`simfuse.graph.ir`).

``import_et`` reads one ET file per rank (``<prefix>.<rank>.et``) and builds a :class:`~simfuse.graph.ir.Graph`;
``export_et`` writes a graph as ET files ASTRA-sim can replay plus the ``<prefix>.json`` communicator-group
file of its ``--comm-group-configuration`` option.  What is mapped and what is not: ``docs/chakra.md``.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...collectives.groups import Group
from ...costs import KernelWork
from ...errors import SpecError
from ..ir import (
    AllToAllVNode,
    CollectiveNode,
    ComputeNode,
    DelayNode,
    FusedNode,
    Graph,
    RankGraph,
    RecvNode,
    SendNode,
)
from ..ir import Node as IRNode
from .checks import (
    check_deadlock,
    check_group_operations,
    describe_missing,
    missing_ranks,
    pair_point_to_point,
)
from .io import ET_NAME, EtFile, read_et, write_et
from .proto import AttributeProto, CollectiveCommType, GlobalMetadata, Node, NodeType

SCHEMA_VERSION = "1.0.0"  # what Chakra's et_generator writes into GlobalMetadata.version
WORLD = "world"  # the group of collectives without a pg_name (ASTRA-sim: every NPU)

#: the IR's collectives (simfuse.graph.ir.COLLECTIVE_OPS) and their Chakra comm_type
COMM_TYPE_OF_OP: dict[str, CollectiveCommType] = {
    "all_reduce": CollectiveCommType.ALL_REDUCE,
    "all_to_all": CollectiveCommType.ALL_TO_ALL,
    "all_gather": CollectiveCommType.ALL_GATHER,
    "reduce_scatter": CollectiveCommType.REDUCE_SCATTER,
}
_OP_BY_COMM_TYPE = {int(v): k for k, v in COMM_TYPE_OF_OP.items()}
_OP_BY_COMM_TYPE[int(CollectiveCommType.REDUCE_SCATTER_BLOCK)] = "reduce_scatter"  # equal blocks: NCCL's RS
# a barrier is a zero-byte all-reduce on its group (what torch.distributed.barrier does on NCCL)
_OP_BY_COMM_TYPE[int(CollectiveCommType.BARRIER)] = "all_reduce"

MEM_WORK = {NodeType.MEM_LOAD_NODE: "chakra_mem_load", NodeType.MEM_STORE_NODE: "chakra_mem_store"}
_MEM_BY_NAME = {v: k for k, v in MEM_WORK.items()}
COMP_WORK = "chakra_comp"

# simfuse's own attributes (ASTRA-sim ignores attributes it does not know): exact values where Chakra's
# fields are integers (microseconds, bytes, ops), and what Chakra has no field for.
A_KIND, A_STREAM, A_PHASE, A_TIME, A_SIZE, A_ALGO = ("simfuse_kind", "simfuse_stream", "simfuse_phase",
                                                     "simfuse_time_s", "simfuse_size_bytes", "simfuse_algorithm")
A_WORK = "simfuse_work"  # prefix of the KernelWork fields
A_SEND_BYTES = "simfuse_send_bytes"  # an AllToAllVNode's per-peer sizes (the node is an ALL_TO_ALL of the sum)
M_RANK, M_NRANKS, M_REPEAT = "simfuse_rank", "simfuse_n_ranks", "simfuse_repeat"
M_GPUS_PER_NODE, M_NAME, M_META = "simfuse_gpus_per_node", "simfuse_graph_name", "simfuse_graph_meta"
M_GROUP, M_GROUP_RANKS = "simfuse_group.", "simfuse_group_ranks."  # + pg_name

_INT_KINDS = {f"{t}_val" for t in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
                                   "fixed64", "sfixed32", "sfixed64")}


# ------------------------------------------------------------------------------------------ attributes


class _Attrs:
    """A node's (or the metadata's) attributes by name, with typed, validating getters."""

    def __init__(self, attrs: list[AttributeProto], source: str, where: str):
        self.by_name = {a.name: a for a in attrs}
        self.source, self.where = source, where

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def _bad(self, a: AttributeProto, want: str) -> SpecError:
        return SpecError(self.source, f"{self.where}.attr[{a.name}]", f"expected {want}, got kind {a.kind} "
                         f"({a.value!r})")

    def int(self, name: str, default: int | None = None) -> int | None:
        a = self.by_name.get(name)
        if a is None:
            return default
        if a.kind in _INT_KINDS:
            return int(a.value)
        if a.kind in ("double_val", "float_val") and math.isfinite(a.value) and a.value == int(a.value):
            return int(a.value)
        raise self._bad(a, "an integer")

    def number(self, name: str, default: float | None = None) -> float | None:
        a = self.by_name.get(name)
        if a is None:
            return default
        if a.kind in _INT_KINDS or (a.kind in ("double_val", "float_val") and math.isfinite(a.value)):
            return float(a.value)
        raise self._bad(a, "a finite number")

    def size(self, name: str, default: float | None = None) -> float | None:
        v = self.number(name, default)
        if v is not None and v < 0:
            raise SpecError(self.source, f"{self.where}.attr[{name}]", f"must be non-negative, got {v}")
        return v

    def bool(self, name: str, default: bool = False) -> bool:
        a = self.by_name.get(name)
        if a is None:
            return default
        if a.kind == "bool_val":
            return bool(a.value)
        if a.kind in _INT_KINDS and a.value in (0, 1):
            return bool(a.value)
        raise self._bad(a, "a bool")

    def str(self, name: str, default: str | None = None) -> str | None:
        a = self.by_name.get(name)
        if a is None:
            return default
        if a.kind == "string_val":
            return a.value
        raise self._bad(a, "a string")

    def list(self, name: str, kinds: tuple[str, ...]) -> list | None:
        a = self.by_name.get(name)
        if a is None:
            return None
        if a.kind in kinds:
            return list(a.value)
        raise self._bad(a, " or ".join(kinds))


def _attr(name: str, kind: str, value: Any) -> AttributeProto:
    return AttributeProto(name=name, kind=kind, value=value)


# ------------------------------------------------------------------------------------------- reading


def _resolve_files(source: str | Path | Iterable[str | Path]) -> tuple[list[Path], Path | None]:
    """The ET files of ``source`` and, where one was named or found, the prefix path (for ``<prefix>.json``)."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if p.is_dir():
            # every *.et entry, not only regular files: a rank file that is a FIFO, a device or a link to one is
            # refused by the reader (skipping it would run the trace on fewer GPUs)
            files = sorted(f for f in p.iterdir() if f.name.endswith(".et") and not f.is_dir())
            if not files:
                raise SpecError(str(p), "", "no *.et files in the directory")
            prefixes = sorted({m["prefix"] for f in files if (m := ET_NAME.match(f.name))})
            if len(prefixes) > 1:
                raise SpecError(str(p), "", f"ET files of several traces ({', '.join(prefixes)}): pass the "
                                f"prefix path, e.g. {p / prefixes[0]}")
            return files, (p / prefixes[0]) if prefixes else None
        if p.is_file():
            return [p], None
        files = sorted(f for f in p.parent.glob(f"{p.name}.*.et") if ET_NAME.match(f.name)
                       and ET_NAME.match(f.name)["prefix"] == p.name)
        if not files:
            raise SpecError(str(p), "", "neither an ET file, a directory, nor the prefix of <prefix>.<rank>.et "
                            "files")
        return files, p
    files = [Path(f) for f in source]
    if not files:
        raise SpecError("<files>", "", "no ET files given")
    return files, None


def _load_comm_groups_json(path: Path) -> dict[str, tuple[int, ...]]:
    """ASTRA-sim's communicator-group file: ``{"<pg_name>": [ranks...]}`` (or ``{"ranks": [...]}`` values)."""
    from ...io_limits import read_text

    text = read_text(path, "json", what="comm-group JSON file")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, and a number of 5,000 digits
        raise SpecError(str(path), "", f"not valid JSON: {str(e)[:200]}") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "", "expected an object mapping pg_name to a list of ranks")
    out = {}
    for name, value in data.items():
        ranks = value.get("ranks") if isinstance(value, dict) else value
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                                  for r in ranks):
            raise SpecError(str(path), name, f"expected a list of non-negative integer ranks, got {value!r}")
        out[str(name)] = tuple(ranks)
    return out


def _metadata_groups(meta: GlobalMetadata, source: str) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    attrs = _Attrs(meta.attr, source, "GlobalMetadata")
    out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for a in meta.attr:
        if a.name.startswith(M_GROUP):
            pg = a.name[len(M_GROUP):]
            ranks = attrs.list(M_GROUP_RANKS + pg, ("int64_list", "int32_list", "uint64_list", "uint32_list"))
            out[pg] = (attrs.str(a.name), None if ranks is None else tuple(int(r) for r in ranks))
    return out


def _topological(nodes: list[Node], source: str) -> list[int]:
    """Indices of ``nodes`` in dependency order (ties: file order); rejects duplicates, dangling deps, cycles."""
    index: dict[int, int] = {}
    for i, n in enumerate(nodes):
        if n.id in index:
            raise SpecError(source, f"node[{i}].id", f"duplicate node id {n.id} (also node[{index[n.id]}])")
        index[n.id] = i
    parents: list[list[int]] = []
    children: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        ps = []
        for d in dict.fromkeys([*n.data_deps, *n.ctrl_deps]):
            if d not in index:
                raise SpecError(source, f"node {n.id} ({n.name!r})", f"depends on node {d}, which is not in "
                                "the file (dangling dependency)")
            ps.append(index[d])
            children[index[d]].append(i)
        parents.append(ps)
    waiting = [len(ps) for ps in parents]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(order) < len(nodes):
        cycle = _find_cycle(parents, {i for i, w in enumerate(waiting) if w > 0})
        ids = " -> ".join(str(nodes[i].id) for i in cycle)
        raise SpecError(source, "dependencies", f"dependency cycle among nodes {ids}")
    return order


def _find_cycle(parents: list[list[int]], stuck: set[int]) -> list[int]:
    """One cycle of the parent relation inside ``stuck`` (every stuck node has a stuck parent)."""
    start = min(stuck)
    seen: dict[int, int] = {}
    path: list[int] = []
    i = start
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = min(p for p in parents[i] if p in stuck)
    cycle = path[seen[i]:][::-1]  # in execution order: each node must run before the next
    k = cycle.index(min(cycle))
    cycle = cycle[k:] + cycle[:k]
    return [*cycle, cycle[0]]


def _work_from_attrs(a: _Attrs) -> KernelWork | None:
    if A_WORK + ".name" not in a:
        return None
    keys = a.list(A_WORK + ".shape_keys", ("string_list",)) or []
    values = a.list(A_WORK + ".shape_values", ("double_list",)) or []
    if len(keys) != len(values):
        raise SpecError(a.source, f"{a.where}.attr[{A_WORK}.shape_keys]",
                        f"{len(keys)} shape keys but {len(values)} values")
    wgs = a.int(A_WORK + ".num_workgroups")
    if wgs is None or wgs < 1:
        raise SpecError(a.source, f"{a.where}.attr[{A_WORK}.num_workgroups]", f"must be >= 1, got {wgs}")
    return KernelWork(a.str(A_WORK + ".name"), wgs, a.size(A_WORK + ".flops_per_wg", 0.0),
                      a.size(A_WORK + ".bytes_per_wg", 0.0), dtype=a.str(A_WORK + ".dtype", "bf16"),
                      variant=a.str(A_WORK + ".variant", "compute"), shape=tuple(zip(keys, values, strict=True)),
                      max_wgs_per_cu=a.int(A_WORK + ".max_wgs_per_cu"),
                      traffic_bytes_per_wg=a.size(A_WORK + ".traffic_bytes_per_wg"))


def _convert_node(n: Node, rank: int, n_ranks: int, pg_to_group: dict[str, str], groups: dict[str, Group],
                  source: str) -> IRNode | None:
    where = f"node {n.id} ({n.name!r})"
    a = _Attrs(n.attr, source, where)
    try:
        ntype = NodeType(n.type)
    except ValueError:
        raise SpecError(source, f"{where}.type", f"unknown node type {n.type} (the schema's NodeType has "
                        f"{', '.join(f'{t.name}={t.value}' for t in NodeType)})") from None
    if ntype in (NodeType.METADATA_NODE, NodeType.INVALID_NODE):
        return None
    common = {"name": n.name, "phase": a.str(A_PHASE, "")}
    stream = a.str(A_STREAM)
    exact_time = a.number(A_TIME)
    if exact_time is not None and exact_time < 0:
        raise SpecError(source, f"{where}.attr[{A_TIME}]", f"must be non-negative, got {exact_time}")
    time_s = exact_time if exact_time is not None else (n.duration_micros / 1e6 if n.duration_micros else None)

    if ntype in (NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE):
        stream = stream or ("cpu" if a.bool("is_cpu_op") else "compute")
        if a.str(A_KIND) == "delay":
            return DelayNode(time_s=time_s or 0.0, stream=stream, **common)
        work = _work_from_attrs(a)
        if work is None and ntype != NodeType.COMP_NODE:
            work = KernelWork(MEM_WORK[ntype], 1, 0.0, a.size("tensor_size", 0.0))
        elif work is None and ("num_ops" in a or "tensor_size" in a):
            work = KernelWork(COMP_WORK, 1, a.size("num_ops", 0.0), a.size("tensor_size", 0.0))
        if time_s is not None or work is None:  # a measured duration wins over the op counts
            # (a COMP_NODE with neither runs for 0 s; ASTRA-sim gives it 1 ns)
            return ComputeNode(time_s=time_s or 0.0, stream=stream, **common)
        return ComputeNode(work=work, stream=stream, **common)

    stream = stream or "comm"
    if ntype == NodeType.COMM_COLL_NODE:
        comm_type = a.int("comm_type")
        if comm_type is None:
            raise SpecError(source, f"{where}.attr", "COMM_COLL_NODE without a comm_type attribute")
        op = _OP_BY_COMM_TYPE.get(comm_type)
        if op is None:
            known = CollectiveCommType(comm_type).name if comm_type in set(CollectiveCommType) else "unknown"
            raise SpecError(source, f"{where}.attr[comm_type]", f"collective {comm_type} ({known}) is not "
                            f"supported; simfuse maps ALL_REDUCE, ALL_TO_ALL, ALL_GATHER, REDUCE_SCATTER[_BLOCK] and "
                            "BARRIER (as a zero-byte all_reduce)")
        size = a.size(A_SIZE)
        if size is None:
            size = a.size("comm_size")
        if size is None:
            if comm_type != CollectiveCommType.BARRIER:
                raise SpecError(source, f"{where}.attr", "COMM_COLL_NODE without a comm_size attribute")
            size = 0.0
        pg = a.str("pg_name")
        if pg is None or pg == "":
            group = WORLD
        elif pg in pg_to_group:
            group = pg_to_group[pg]
        else:
            raise SpecError(source, f"{where}.attr[pg_name]", f"process group {pg!r} is not defined (known: "
                            f"{sorted(pg_to_group) or 'none'}); give its ranks in <prefix>.json / comm_group.json "
                            "or the comm_groups argument")
        if rank not in groups[group].ranks:
            raise SpecError(source, f"{where}.attr[pg_name]", f"rank {rank} issues a collective on group "
                            f"{group!r} but is not one of its ranks {list(groups[group].ranks)}")
        send = a.list(A_SEND_BYTES, ("double_list",))
        if send is not None:
            if op != "all_to_all" or len(send) != len(groups[group].ranks):
                raise SpecError(source, f"{where}.attr[{A_SEND_BYTES}]", f"needs an ALL_TO_ALL and one size per "
                                f"member of group {group!r} ({len(groups[group].ranks)}), got {len(send)}")
            if not all(math.isfinite(v) and v >= 0 for v in send):
                raise SpecError(source, f"{where}.attr[{A_SEND_BYTES}]", "sizes must be finite and >= 0")
            return AllToAllVNode(group=group, send_bytes=send, stream=stream, **common)
        return CollectiveNode(op=op, group=group, size_bytes=size, algorithm=a.str(A_ALGO), stream=stream,
                              **common)

    # point to point
    size = a.size(A_SIZE)
    if size is None:
        size = a.size("comm_size")
    if size is None:
        size = a.size("tensor_size")
    if size is None:
        raise SpecError(source, f"{where}.attr", f"{ntype.name} without a comm_size (or tensor_size) attribute")
    tag = a.int("comm_tag", 0)
    mine, peer_attr = ("comm_src", "comm_dst") if ntype == NodeType.COMM_SEND_NODE else ("comm_dst", "comm_src")
    me = a.int(mine)
    if me is not None and me != rank:
        raise SpecError(source, f"{where}.attr[{mine}]", f"is {me}, but this file is rank {rank}")
    peer = a.int(peer_attr)
    if peer is None:
        raise SpecError(source, f"{where}.attr", f"{ntype.name} without a {peer_attr} attribute")
    if not 0 <= peer < n_ranks or peer == rank:
        raise SpecError(source, f"{where}.attr[{peer_attr}]", f"peer {peer} is not another rank of 0..{n_ranks - 1}")
    if ntype == NodeType.COMM_SEND_NODE:
        return SendNode(dst=peer, size_bytes=size, tag=tag, stream=stream, **common)
    return RecvNode(src=peer, size_bytes=size, tag=tag, stream=stream, **common)


def import_et(source: str | Path | Iterable[str | Path], *,
              comm_groups: str | Path | dict[str, Iterable[int]] | None = None,
              gpus_per_node: int | None = None, node_gpus: int | None = None) -> Graph:
    """A :class:`Graph` from Chakra ET files: a directory, a ``<prefix>`` path (ASTRA-sim's
    ``--workload-configuration``), one file, or a list of files.

    Ranks come from the file names (``*.<rank>.et``), else from the ``simfuse_rank`` metadata attribute;
    together they must be ``0..N-1``.  Process groups (``pg_name``) resolve through ``comm_groups`` (a
    mapping or an ASTRA-sim comm-group JSON file), else ``<prefix>.json`` or ``comm_group.json`` next to the
    files, else the group table simfuse writes into ``GlobalMetadata``; collectives without a ``pg_name`` run
    on the group ``world`` of every rank.  Node ids are renumbered densely per rank in dependency order.
    ``gpus_per_node`` (how the ranks fill nodes): the argument, else the ``simfuse_gpus_per_node`` metadata,
    else ``node_gpus`` (the topology's GPUs per node: ranks fill whole nodes of it, a trace of fewer ranks runs on
    one node), else every rank on one node.  With ``node_gpus``, a recorded GPUs per node above it, or a rank
    count that does not fill its nodes, is refused with the reason.
    """
    files, prefix = _resolve_files(source)
    ets: dict[int, tuple[Path, EtFile]] = {}
    for f in files:
        et = read_et(f)
        m = ET_NAME.match(f.name)
        meta_rank = _Attrs(et.metadata.attr, str(f), "GlobalMetadata").int(M_RANK)
        rank = int(m["rank"]) if m else meta_rank
        if rank is None:
            raise SpecError(str(f), "", "cannot tell the rank: name the file <prefix>.<rank>.et")
        if meta_rank is not None and meta_rank != rank:
            raise SpecError(str(f), f"GlobalMetadata.attr[{M_RANK}]", f"says rank {meta_rank} but the file "
                            f"name says {rank}")
        if rank in ets:
            raise SpecError(str(f), "", f"rank {rank} also comes from {ets[rank][0]}")
        ets[rank] = (f, et)
    n_ranks = len(ets)
    _check_rank_files(ets, files)
    ordered = [ets[r] for r in range(n_ranks)]

    # the graph-wide metadata must agree across files
    def agreed(what: str, get):
        values = {r: get(f, et) for r, (f, et) in enumerate(ordered)}
        first = values[0]
        for r, v in values.items():
            if v != first:
                raise SpecError(str(ordered[r][0]), "GlobalMetadata", f"{what} differs from rank 0's "
                                f"({v!r} vs {first!r})")
        return first

    repeat = agreed("repeat", lambda f, et: _Attrs(et.metadata.attr, str(f), "GlobalMetadata").int(M_REPEAT, 1))
    if repeat < 1:
        raise SpecError(str(ordered[0][0]), f"GlobalMetadata.attr[{M_REPEAT}]", f"must be >= 1, got {repeat}")
    meta_groups = agreed("the process-group table", lambda f, et: _metadata_groups(et.metadata, str(f)))

    pg_to_group, groups = _process_groups(meta_groups, comm_groups, prefix, files, ordered)

    # a trace simfuse did not write (no simfuse_rank / simfuse_n_ranks): ASTRA-sim issues a node once its
    # dependencies are done, so its sends and receives do not wait on one another in file order; each gets a
    # stream of its own (a ring of send-then-receive on every rank would otherwise deadlock)
    foreign = not any(M_RANK in _Attrs(et.metadata.attr, str(f), "").by_name or
                      M_NRANKS in _Attrs(et.metadata.attr, str(f), "").by_name for f, et in ordered)
    programs: dict[int, RankGraph] = {}
    for rank, (f, et) in enumerate(ordered):
        rg = RankGraph(rank)
        index = {n.id: i for i, n in enumerate(et.nodes)}
        new_id: dict[int, tuple[int, ...]] = {}  # file index -> the new ids that stand for that node
        for i in _topological(et.nodes, str(f)):
            n = et.nodes[i]
            deps = tuple(sorted({d for p in [*n.data_deps, *n.ctrl_deps] for d in new_id[index[p]]}))
            node = _convert_node(n, rank, n_ranks, pg_to_group, groups, str(f))
            if node is None:  # metadata/invalid nodes are dropped; their children inherit their deps
                new_id[i] = deps
                continue
            node.deps = deps
            if foreign and isinstance(node, (SendNode, RecvNode)) and A_STREAM not in n.attrs():
                node.stream = f"p2p.{n.id}"
            new_id[i] = (rg.add(node),)
        programs[rank] = rg
    first = str(ordered[0][0])
    meta0 = _Attrs(ordered[0][1].metadata.attr, first, "GlobalMetadata")
    if gpus_per_node is None:
        recorded = agreed("gpus_per_node", lambda f, et: _Attrs(et.metadata.attr, str(f), "GlobalMetadata")
                          .int(M_GPUS_PER_NODE))
        gpus_per_node = _trace_gpus_per_node(recorded, n_ranks, node_gpus, first)
    if not isinstance(gpus_per_node, int) or gpus_per_node < 1 or n_ranks % gpus_per_node:
        raise SpecError(first, "gpus_per_node", f"{gpus_per_node!r} does not divide the {n_ranks} ranks")
    meta_json = meta0.str(M_META)
    try:
        meta = json.loads(meta_json) if meta_json else {}
    except (ValueError, RecursionError) as e:
        raise SpecError(first, f"GlobalMetadata.attr[{M_META}]", f"not valid JSON: {e}") from None
    graph = Graph(nodes=n_ranks // gpus_per_node, gpus_per_node=gpus_per_node, groups=groups, programs=programs,
                  repeat=repeat, name=meta0.str(M_NAME, "chakra") or "chakra", meta=meta)
    graph.validate()
    where = str(prefix or files[0].parent)
    pair_point_to_point(graph, where)
    check_group_operations(graph, where)
    check_deadlock(graph, where)
    return graph


def _process_groups(meta_groups: dict, comm_groups, prefix: Path | None, files: list[Path],
                    ordered: list) -> tuple[dict[str, str], dict[str, Group]]:
    """``(pg_name -> group name, groups)`` of a trace: the metadata's group table and the comm-group JSON (the
    ``comm_groups`` argument, else ``<prefix>.json`` or ``comm_group.json`` next to the files) checked against
    each other, plus ``world`` when a collective names no process group (see :func:`import_et`)."""
    n_ranks = len(ordered)
    json_source, json_groups = "<comm_groups>", {}
    if isinstance(comm_groups, dict):
        json_groups = {str(k): tuple(int(r) for r in v) for k, v in comm_groups.items()}
    else:
        candidates = [Path(comm_groups)] if comm_groups is not None else [
            *([prefix.with_name(prefix.name + ".json")] if prefix is not None else []),
            files[0].parent / "comm_group.json"]
        for c in candidates:
            if comm_groups is not None or c.is_file():
                json_source, json_groups = str(c), _load_comm_groups_json(c)
                break

    pg_to_group: dict[str, str] = {}
    groups: dict[str, Group] = {}
    for pg in sorted(set(meta_groups) | set(json_groups), key=lambda s: (len(s), s)):
        name, meta_ranks = meta_groups.get(pg, (pg, None))
        ranks = json_groups.get(pg, meta_ranks)
        if meta_ranks is not None and pg in json_groups and json_groups[pg] != meta_ranks:
            raise SpecError(json_source, pg, f"ranks {list(json_groups[pg])} disagree with the trace "
                            f"metadata's {list(meta_ranks)}")
        if ranks is None:
            raise SpecError(str(ordered[0][0]), f"GlobalMetadata.attr[{M_GROUP_RANKS}{pg}]",
                            f"no ranks for process group {pg!r}")
        if name in groups:
            raise SpecError(str(ordered[0][0]), f"GlobalMetadata.attr[{M_GROUP}{pg}]",
                            f"group name {name!r} is used by two process groups")
        bad = [r for r in ranks if not 0 <= r < n_ranks]
        if bad or len(set(ranks)) != len(ranks) or not ranks:
            raise SpecError(json_source if pg in json_groups else str(ordered[0][0]), pg,
                            f"group ranks {list(ranks)} must be distinct ranks of 0..{n_ranks - 1}")
        pg_to_group[pg] = name
        groups[name] = Group(name, tuple(ranks))
    world = tuple(range(n_ranks))
    uses_world = any(n.type == NodeType.COMM_COLL_NODE and not _pg_name_of(n) for _f, et in ordered
                     for n in et.nodes)
    if uses_world:
        if WORLD in groups and groups[WORLD].ranks != world:
            raise SpecError(str(ordered[0][0]), WORLD, f"group {WORLD!r} is not every rank, but collectives "
                            "without a pg_name need it to be")
        groups.setdefault(WORLD, Group(WORLD, world))
    return pg_to_group, groups


def _trace_gpus_per_node(recorded: int | None, n_ranks: int, node_gpus: int | None, first: str) -> int:
    """GPUs per node of a trace run without ``--gpus-per-node`` (see :func:`import_et`)."""
    if node_gpus is None:
        return n_ranks if recorded is None else recorded
    if recorded is not None:
        if recorded > node_gpus:
            raise SpecError(first, f"GlobalMetadata.attr[{M_GPUS_PER_NODE}]", f"the trace was recorded with "
                            f"{recorded} GPUs per node, the topology has {node_gpus}: run it on a topology of "
                            f"{recorded} GPUs per node, or pass --gpus-per-node to override")
        return recorded
    if n_ranks <= node_gpus:
        return n_ranks
    if n_ranks % node_gpus:
        raise SpecError(first, "gpus_per_node", f"the trace's {n_ranks} ranks do not fill nodes of {node_gpus} "
                        "GPUs (the topology's scale_up.gpus_per_node); pass --gpus-per-node")
    return node_gpus


def _check_rank_files(ets: dict[int, tuple[Path, EtFile]], files: list[Path]) -> None:
    """The ranks of the files are ``0..N-1`` and, where the trace records its rank count, there are that many
    (a missing rank file is an error, never a run on fewer GPUs); missing ranks are counted, not enumerated."""
    where = str(files[0].parent)
    recorded = {}
    for r, (f, et) in ets.items():
        v = _Attrs(et.metadata.attr, str(f), "GlobalMetadata").int(M_NRANKS)
        if v is not None:
            if v < 1:
                raise SpecError(str(f), f"GlobalMetadata.attr[{M_NRANKS}]", f"must be >= 1, got {v}")
            recorded[r] = v
    if len(set(recorded.values())) > 1:
        r0 = min(recorded)
        r1 = min(r for r in recorded if recorded[r] != recorded[r0])
        raise SpecError(str(ets[r1][0]), f"GlobalMetadata.attr[{M_NRANKS}]", f"says {recorded[r1]} ranks, rank "
                        f"{r0}'s file says {recorded[r0]}")
    expected = next(iter(recorded.values()), None)
    count, first = missing_ranks(ets, expected)
    if expected is not None and (count or max(ets) >= expected):
        extra = [r for r in ets if r >= expected]
        what = describe_missing(count, first) if count else f"rank file {min(extra)} beyond them"
        raise SpecError(where, "", f"the trace has {expected} ranks ({M_NRANKS}) but {what}")
    if count:
        raise SpecError(where, "", f"ranks must be 0..N-1: {describe_missing(count, first)}")


def _pg_name_of(n: Node) -> str:
    a = n.attrs().get("pg_name")
    return a.value if a is not None and a.kind == "string_val" else ""


# ------------------------------------------------------------------------------------------- writing


def _as_int(value: float, scale: float = 1.0) -> tuple[int, bool]:
    i = int(round(value * scale))
    back = i / scale
    return i, back == value


def _work_attrs(work: KernelWork) -> list[AttributeProto]:
    out = [_attr(A_WORK + ".name", "string_val", work.name),
           _attr(A_WORK + ".num_workgroups", "int64_val", int(work.num_workgroups)),
           _attr(A_WORK + ".flops_per_wg", "double_val", float(work.flops_per_wg)),
           _attr(A_WORK + ".bytes_per_wg", "double_val", float(work.bytes_per_wg)),
           _attr(A_WORK + ".dtype", "string_val", work.dtype),
           _attr(A_WORK + ".variant", "string_val", work.variant)]
    if work.shape:
        out += [_attr(A_WORK + ".shape_keys", "string_list", [k for k, _ in work.shape]),
                _attr(A_WORK + ".shape_values", "double_list", [float(v) for _, v in work.shape])]
    if work.max_wgs_per_cu is not None:
        out.append(_attr(A_WORK + ".max_wgs_per_cu", "int64_val", int(work.max_wgs_per_cu)))
    if work.traffic_bytes_per_wg is not None:
        out.append(_attr(A_WORK + ".traffic_bytes_per_wg", "double_val", float(work.traffic_bytes_per_wg)))
    return out


def _timing(node: Node, attrs: list[AttributeProto], time_s: float, where: str) -> None:
    """duration_micros, plus the exact seconds where the microseconds lose them."""
    if not (isinstance(time_s, (int, float)) and math.isfinite(time_s) and time_s >= 0):
        raise SpecError("<graph>", where, f"time must be finite and non-negative, got {time_s!r}")
    node.duration_micros, exact = _as_int(time_s, 1e6)
    if not exact:
        attrs.append(_attr(A_TIME, "double_val", float(time_s)))


def _size(attrs: list[AttributeProto], name: str, kind: str, size: float, where: str,
          exact_name: str | None = A_SIZE) -> None:
    if not (math.isfinite(size) and size >= 0):
        raise SpecError("<graph>", where, f"{name}: must be finite and non-negative, got {size}")
    i, exact = _as_int(size)
    attrs.append(_attr(name, kind, i))
    if not exact and exact_name is not None:
        attrs.append(_attr(exact_name, "double_val", float(size)))


def _canonical_work(ntype: int, work: KernelWork) -> KernelWork:
    """The KernelWork import_et builds from a node's Chakra fields alone."""
    tensor = float(_as_int(work.total_bytes)[0])
    if ntype in MEM_WORK:
        return KernelWork(MEM_WORK[ntype], 1, 0.0, tensor)
    return KernelWork(COMP_WORK, 1, float(_as_int(work.total_flops)[0]), tensor)


def _export_node(node: IRNode, rank: int, n_ranks: int, pg_of: dict[str, str], where: str) -> Node:
    out = Node(id=node.id, name=node.name, data_deps=list(node.deps))
    attrs: list[AttributeProto] = []
    default_stream = "comm"
    if isinstance(node, (ComputeNode, DelayNode)):
        default_stream = "cpu" if node.stream == "cpu" else "compute"
        attrs.append(_attr("is_cpu_op", "bool_val", node.stream == "cpu"))
        out.type = NodeType.COMP_NODE
        if isinstance(node, DelayNode):
            attrs.append(_attr(A_KIND, "string_val", "delay"))
            _timing(out, attrs, node.time_s, where)
        else:
            work = node.work
            if work is not None:
                mem = _MEM_BY_NAME.get(work.name)
                if mem is not None and work.total_flops == 0:
                    out.type = mem
                else:
                    _size(attrs, "num_ops", "int64_val", work.total_flops, where, exact_name=None)
                    attrs.append(_attr("op_type", "string_val", work.name))
                _size(attrs, "tensor_size", "uint64_val", work.total_bytes, where, exact_name=None)
                # Chakra keeps total ops and bytes as integers; the full KernelWork rides along unless those
                # two give it back exactly
                if work != _canonical_work(out.type, work):
                    attrs += _work_attrs(work)
            if node.time_s is not None:
                _timing(out, attrs, node.time_s, where)
    elif isinstance(node, (CollectiveNode, AllToAllVNode)):
        op = node.op if isinstance(node, CollectiveNode) else "all_to_all"
        if op not in COMM_TYPE_OF_OP:
            raise SpecError("<graph>", where, f"collective op {op!r} has no Chakra comm_type "
                            f"(known: {sorted(COMM_TYPE_OF_OP)})")
        if node.group not in pg_of:
            raise SpecError("<graph>", where, f"group {node.group!r} is not in graph.groups")
        out.type = NodeType.COMM_COLL_NODE
        attrs += [_attr("is_cpu_op", "bool_val", False),
                  _attr("comm_type", "int64_val", int(COMM_TYPE_OF_OP[op]))]
        _size(attrs, "comm_size", "int64_val", node.size_bytes, where)
        attrs.append(_attr("pg_name", "string_val", pg_of[node.group]))
        if isinstance(node, AllToAllVNode):
            attrs.append(_attr(A_SEND_BYTES, "double_list", [float(v) for v in node.send_bytes]))
        elif node.algorithm is not None:
            attrs.append(_attr(A_ALGO, "string_val", node.algorithm))
    elif isinstance(node, (SendNode, RecvNode)):
        peer = node.dst if isinstance(node, SendNode) else node.src
        if not (isinstance(peer, int) and 0 <= peer < n_ranks and peer != rank):
            raise SpecError("<graph>", where, f"peer {peer!r} is not another rank of 0..{n_ranks - 1}")
        if not -(1 << 31) <= node.tag < (1 << 31):
            raise SpecError("<graph>", where, f"tag {node.tag} does not fit Chakra's int32 comm_tag")
        src, dst = (rank, peer) if isinstance(node, SendNode) else (peer, rank)
        out.type = NodeType.COMM_SEND_NODE if isinstance(node, SendNode) else NodeType.COMM_RECV_NODE
        attrs += [_attr("is_cpu_op", "bool_val", False), _attr("comm_src", "int32_val", src),
                  _attr("comm_dst", "int32_val", dst)]
        _size(attrs, "comm_size", "int64_val", node.size_bytes, where)
        attrs.append(_attr("comm_tag", "int32_val", int(node.tag)))
    elif isinstance(node, FusedNode):
        raise SpecError("<graph>", where, "a FusedNode (fused compute+communication kernel) has no Chakra "
                        "equivalent; build the graph unfused to export it")
    else:
        raise SpecError("<graph>", where, f"node kind {type(node).__name__} has no Chakra equivalent")
    if node.stream != default_stream:
        attrs.append(_attr(A_STREAM, "string_val", node.stream))
    if node.phase:
        attrs.append(_attr(A_PHASE, "string_val", node.phase))
    out.attr = attrs
    return out


def export_et(graph: Graph, directory: str | Path, prefix: str = "simfuse", *, compress: bool = False) -> list[Path]:
    """Writes ``<directory>/<prefix>.<rank>.et`` for every rank ``0..n_ranks-1`` and ``<prefix>.json``, the ASTRA-sim comm-group file; returns the ET paths in
    rank order followed by the JSON path.

    Groups become process groups ``"1"``, ``"2"`` ... (in name order; numeric, as ASTRA-sim parses them);
    their names and ranks are also kept in each file's ``GlobalMetadata``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise SpecError(str(directory), "", "not a directory")
    if graph.n_ranks < 1:
        raise SpecError("<graph>", "n_ranks", f"must be >= 1, got {graph.n_ranks}")
    if not graph.full or sorted(graph.programs) != list(range(graph.n_ranks)):
        raise SpecError("<graph>", "programs", "Chakra needs one trace per rank: export a graph with a program for "
                        f"every one of its {graph.n_ranks} ranks (not class representatives or rank 0 alone)")
    if graph.repeat < 1:
        raise SpecError("<graph>", "repeat", f"must be >= 1, got {graph.repeat}")
    pg_of = {name: str(i) for i, name in enumerate(sorted(graph.groups), start=1)}
    meta_attrs = [_attr(M_NRANKS, "int64_val", graph.n_ranks), _attr(M_REPEAT, "int64_val", graph.repeat),
                  _attr(M_GPUS_PER_NODE, "int64_val", graph.gpus_per_node), _attr(M_NAME, "string_val", graph.name)]
    try:
        if graph.meta:
            meta_attrs.append(_attr(M_META, "string_val", json.dumps(graph.meta, sort_keys=True)))
    except (TypeError, ValueError):
        pass  # builder notes that are not JSON stay behind (docs/chakra.md)
    comm_json: dict[str, list[int]] = {}
    for name in sorted(graph.groups):
        g = graph.groups[name]
        ranks = [int(r) for r in g.ranks]
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < graph.n_ranks for r in ranks):
            raise SpecError("<graph>", f"groups[{name}]", f"ranks {ranks} must be distinct ranks of "
                            f"0..{graph.n_ranks - 1}")
        meta_attrs += [_attr(M_GROUP + pg_of[name], "string_val", name),
                       _attr(M_GROUP_RANKS + pg_of[name], "int64_list", ranks)]
        comm_json[pg_of[name]] = ranks
    paths = []
    for rank in range(graph.n_ranks):
        rg = graph.programs[rank]
        nodes = []
        for i, node in enumerate(rg.nodes):
            where = f"programs[{rank}].nodes[{i}] ({node.name!r})"
            if node.id != i:
                raise SpecError("<graph>", where, f"node id {node.id} is not its index {i}")
            bad = [d for d in node.deps if not (isinstance(d, int) and 0 <= d < len(rg.nodes) and d != i)]
            if bad:
                raise SpecError("<graph>", where, f"deps {bad} are not other nodes of rank {rank}")
            nodes.append(_export_node(node, rank, graph.n_ranks, pg_of, where))
        meta = GlobalMetadata(SCHEMA_VERSION, [_attr(M_RANK, "int64_val", rank), *meta_attrs])
        paths.append(write_et(directory / f"{prefix}.{rank}.et", meta, nodes, compress=compress))
    json_path = directory / f"{prefix}.json"
    from ...results.io import atomic_write_text

    atomic_write_text(json_path, json.dumps(comm_json, indent=2) + "\n")
    return [*paths, json_path]
