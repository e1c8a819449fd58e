"""Checks of an imported Chakra trace before it runs: rank files, send/recv pairing, and deadlock freedom.

* **Rank files.**  The ranks named by the files must be ``0..N-1``; a trace that records its own rank count
  (``simfuse_n_ranks``) must have that many files.  Missing ranks are reported as a count and the first few,
  computed from the gaps between the ranks present (two files ``tr.0.et`` and ``tr.1000000000.et`` never list a
  billion numbers).
* **Send/recv pairing.**  The ``k``-th send from rank ``s`` to rank ``d`` with tag ``t`` pairs with the ``k``-th
  receive on ``d`` from ``s`` with tag ``t`` (program order); every send has its receive and both name the same
  number of bytes.  Repeated ``(s, d, t)`` pairs get distinct tags so that the executor, which matches one send with
  one receive per ``(s, d, tag)``, pairs them in that order.
* **Deadlock.**  The executor's rules are replayed without timing (:func:`find_deadlock`): a stream runs its nodes in
  program order, a node starts when its stream predecessor has finished and its dependencies are done, a send and
  its receive finish once both have started, a collective once every member of its group has started its
  ``k``-th operation on that group.  A node that can never start or finish is named in a one-line error.
"""

from __future__ import annotations

from collections import defaultdict, deque

from ...errors import SpecError
from ..ir import AllToAllVNode, CollectiveNode, FusedNode, Graph, RecvNode, SendNode

#: Missing ranks listed by number in an error (the rest are counted).
SHOW_MISSING = 5
#: Tags of repeated (src, dst, tag) pairs are spread this far apart (Chakra's comm_tag is an int32).
TAG_STRIDE = 1 << 32


def missing_ranks(present, expected: int | None = None) -> tuple[int, list[int]]:
    """(how many, the first :data:`SHOW_MISSING`) of the ranks ``0..max`` (or ``0..expected-1``) that ``present``
    lacks, from the gaps between the sorted ranks (linear in ``len(present)``, whatever their values)."""
    ranks = sorted(set(present))
    top = (expected - 1) if expected is not None else (ranks[-1] if ranks else -1)
    first: list[int] = []
    count, prev = 0, -1
    for r in [*[x for x in ranks if x <= top], top + 1]:
        gap = r - prev - 1
        if gap > 0:
            count += gap
            first += list(range(prev + 1, min(r, prev + 1 + SHOW_MISSING - len(first))))
        prev = r
    return count, first[:SHOW_MISSING]


def describe_missing(count: int, first: list[int]) -> str:
    shown = ", ".join(map(str, first))
    if count <= len(first):
        return f"missing rank files [{shown}]"
    return f"missing rank files [{shown}, ...] ({count:,} in all)"


def pair_point_to_point(graph: Graph, source: str) -> None:
    """Check that every send has its receive with the same size (see the module doc); give repeated
    ``(src, dst, tag)`` pairs distinct tags, in place."""
    sends: dict[tuple[int, int, int], list[SendNode]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[RecvNode]] = defaultdict(list)
    for r, rg in graph.programs.items():
        for nd in rg.nodes:
            if isinstance(nd, SendNode):
                sends[(r, nd.dst, nd.tag)].append(nd)
            elif isinstance(nd, RecvNode):
                recvs[(nd.src, r, nd.tag)].append(nd)
    for key in sorted(set(sends) | set(recvs)):
        s, d, tag = key
        ss, rr = sends.get(key, []), recvs.get(key, [])
        if len(ss) != len(rr):
            lone = ss[len(rr)] if len(ss) > len(rr) else rr[len(ss)]
            what = (f"send {lone.name!r} of rank {s} to rank {d} (tag {tag}) has no matching receive on rank {d}"
                    if len(ss) > len(rr) else
                    f"receive {lone.name!r} of rank {d} from rank {s} (tag {tag}) has no matching send on rank {s}")
            raise SpecError(source, "send/recv", f"{what}: {len(ss)} sends, {len(rr)} receives")
        for k, (a, b) in enumerate(zip(ss, rr, strict=True)):
            if a.size_bytes != b.size_bytes:
                raise SpecError(source, "send/recv", f"send {a.name!r} (rank {s} -> {d}, tag {tag}) carries "
                                f"{a.size_bytes:.0f} bytes but its receive {b.name!r} expects {b.size_bytes:.0f}")
            if k:
                a.tag = b.tag = tag + k * TAG_STRIDE


def _group_op(nd) -> tuple[str, float | None]:
    """What the members of a group operation must agree on: its kind and, for a collective, its size."""
    if isinstance(nd, CollectiveNode):
        return nd.op, float(nd.size_bytes)
    return nd.kind, None


def check_group_operations(graph: Graph, source: str) -> None:
    """The ``k``-th operation on a group is one collective on every member (the executor matches them by that
    position and runs the first member's): same kind, and a collective of the same size.  A one-line
    :class:`SpecError` naming the first rank and node that disagree with the group's lowest rank."""
    first: dict[tuple[str, int], tuple[int, object]] = {}
    for r in sorted(graph.programs):
        seq: dict[str, int] = defaultdict(int)
        for nd in graph.programs[r].nodes:
            group = getattr(nd, "group", None)
            if not group or not isinstance(nd, (CollectiveNode, AllToAllVNode, FusedNode)):
                continue
            k = (group, seq[group])
            seq[group] += 1
            r0, nd0 = first.setdefault(k, (r, nd))
            if r0 == r:
                continue
            (op0, size0), (op, size) = _group_op(nd0), _group_op(nd)
            if op != op0 or size != size0:
                def what(o, b):
                    return o if b is None else f"{o} of {b:.0f} bytes"
                raise SpecError(source, f"rank {r} node {nd.name!r}", f"operation {k[1]} on group {group!r} is "
                                f"{what(op, size)}, but on rank {r0} ({nd0.name!r}) {what(op0, size0)}: the "
                                "ranks' traces do not match")


def find_deadlock(graph: Graph) -> tuple[int, object] | None:
    """``(rank, node)`` of the first node (lowest rank, then program order) that can never finish under the
    executor's rules (module doc), or None when every node finishes."""
    programs = graph.programs
    # per node: how many of its blockers (deps, stream predecessor) are unfinished, and who waits on it
    waiters: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    missing: dict[tuple[int, int], int] = {}
    coll_key: dict[tuple[int, int], tuple[str, int]] = {}
    members: dict[tuple[str, int], int] = defaultdict(int)
    p2p_peer: dict[tuple[int, int], tuple[int, int]] = {}
    send_q: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    recv_q: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for r, rg in programs.items():
        last: dict[str, tuple[int, int]] = {}
        seq: dict[str, int] = defaultdict(int)
        for nd in rg.nodes:
            me = (r, nd.id)
            p = last.get(nd.stream)
            last[nd.stream] = me
            blockers = set(nd.deps)
            n_wait = len(blockers) + (1 if p is not None and p[1] not in blockers else 0)
            missing[me] = n_wait
            for dpd in blockers:
                waiters[(r, dpd)].append(me)
            if p is not None and p[1] not in blockers:
                waiters[p].append(me)
            if isinstance(nd, (CollectiveNode, AllToAllVNode, FusedNode)) and getattr(nd, "group", None):
                k = (nd.group, seq[nd.group])
                seq[nd.group] += 1
                coll_key[me] = k
            elif isinstance(nd, SendNode):
                send_q[(r, nd.dst, nd.tag)].append(me)
            elif isinstance(nd, RecvNode):
                recv_q[(nd.src, r, nd.tag)].append(me)
    for key, ss in send_q.items():
        for a, b in zip(ss, recv_q.get(key, []), strict=False):
            p2p_peer[a], p2p_peer[b] = b, a
    group_size = {name: len(g.ranks) for name, g in graph.groups.items()}

    started: set[tuple[int, int]] = set()
    done: set[tuple[int, int]] = set()
    queue = deque(k for k, v in missing.items() if v == 0)

    def finish(n: tuple[int, int]) -> None:
        if n in done:
            return
        done.add(n)
        for w in waiters.get(n, ()):
            missing[w] -= 1
            if missing[w] == 0:
                queue.append(w)

    waiting_groups: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    while queue:
        n = queue.popleft()
        started.add(n)
        if n in coll_key:
            k = coll_key[n]
            waiting_groups[k].append(n)
            members[k] += 1
            if members[k] >= group_size.get(k[0], 1):
                for m in waiting_groups.pop(k):
                    finish(m)
        elif n in p2p_peer or isinstance(programs[n[0]].nodes[n[1]], (SendNode, RecvNode)):
            peer = p2p_peer.get(n)
            if peer is not None and peer in started:
                finish(n)
                finish(peer)
        else:
            finish(n)
    if len(done) == len(missing):
        return None
    stuck = min(k for k in missing if k not in done)
    return stuck[0], programs[stuck[0]].nodes[stuck[1]]


def check_deadlock(graph: Graph, source: str) -> None:
    """A one-line :class:`SpecError` naming the first node that can never finish (see :func:`find_deadlock`)."""
    hit = find_deadlock(graph)
    if hit is None:
        return
    rank, nd = hit
    if isinstance(nd, SendNode):
        why = f"send to rank {nd.dst} waits for a receive that never starts"
    elif isinstance(nd, RecvNode):
        why = f"receive from rank {nd.src} waits for a send that never starts"
    elif isinstance(nd, (CollectiveNode, AllToAllVNode)):
        why = f"collective on group {nd.group!r} waits for members that never reach it"
    else:
        why = "waits on nodes that never finish"
    raise SpecError(source, f"rank {rank} node {nd.name!r}", f"the trace deadlocks: the {why} (a dependency or "
                    f"stream-order cycle across ranks; nodes of one simfuse_stream run in file order)")


__all__ = ["check_deadlock", "check_group_operations", "describe_missing", "find_deadlock", "missing_ranks", "pair_point_to_point"]
