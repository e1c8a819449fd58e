"""One rule for what a GPU pays to post its network messages: bulk collectives and fused puts alike.

Every off-node transfer is one or more *messages* (RDMA work requests).  Whatever posts them -- NCCL's proxy
thread, NVSHMEM's IBRC proxy thread, or GPU threads writing work-queue entries themselves (IBGDA) -- a GPU's
messages pass one serial post queue at ``post_s`` each:

* **per message**: ``post_s``, the poster's time per message (its throughput bottleneck);
* **per peer**: a transfer of ``b`` bytes to one peer is ``ceil(b / chunk_bytes)`` messages (``chunk_bytes`` 0:
  one message per transfer, whatever its size);
* **per batch**: a batch (the messages one GPU issues at one moment: a bulk exchange's sends to the ranks that
  have launched, a fused kernel's puts of one wave) posts in shifted destination order ``(dst - src) mod n`` (a
  relabelling of every other rank's order, so the representative-rank fast path stays exact), after the
  messages of earlier batches still in the queue: the queue is one per GPU, transport and operation, serial
  across the operation's batches (:func:`post_queue`);
* the bytes flow from the batch's start (posting overlaps the drain); a destination's data lands no sooner than
  its last message's post plus the flow's latency: ``arrival = max(drain + latency, post_end + latency)``.

The parameters are the transport's (topology file):

=======================  ================================  ===================================================
transport                who posts                         ``post_s`` per message (``chunk_bytes``)
=======================  ================================  ===================================================
NCCL (bulk collectives)  one proxy CPU thread per GPU       ``collectives.net_overhead_us``: NCCL's
                                                           ``getNetOverhead`` (src/graph/tuning.cc), 1 us on
                                                           Intel x86, 2 us on AMD x86 (128 KiB: NCCL's
                                                           ``NCCL_P2P_NET_CHUNKSIZE``, src/init.cc)
NVSHMEM IBRC (proxied)   one proxy CPU thread per PE        ``gpu_initiated.put_post_us`` ~1 us, as NCCL's
                                                           proxy (one put: one message)
IBGDA (GPU-initiated)    GPU threads write WQEs, ring the   ``gpu_initiated.put_post_us`` = 1 / (the NIC's
                         doorbell, in parallel              message rate): a few ns (one put: one message)
=======================  ================================  ===================================================

Bulk posts are charged under ``collectives.protocol_model: nccl`` only (``none`` idealises the collective: no
protocol, no proxy); fused posts whenever ``put_post_us > 0``.  NVLink transfers (inside a node) post nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: NCCL's point-to-point network chunk: the proxy posts one network message per chunk of a send
#: (``NCCL_P2P_NET_CHUNKSIZE``, default 1 << 17 = 128 KiB, NVIDIA/nccl master 5067397 src/init.cc:818; NCCL
#: scales it by a ratio for some topologies; a log's "P2P Chunksize set to 131072" confirms the default on H100)
NCCL_P2P_NET_CHUNK_BYTES = 131072.0


@dataclass(frozen=True)
class PostRule:
    """A transport's post cost: ``post_s`` per message, ``chunk_bytes`` per message (0: one per transfer)."""

    post_s: float
    chunk_bytes: float = 0.0
    transport: str = "proxy"

    @property
    def active(self) -> bool:
        return self.post_s > 0

    def messages(self, sizes_bytes) -> np.ndarray:
        """Messages per transfer of ``sizes_bytes`` (at least one per transfer)."""
        s = np.asarray(sizes_bytes, dtype=float)
        if self.chunk_bytes <= 0:
            return np.ones(s.shape, dtype=np.int64)
        return np.maximum(1, np.ceil(s / self.chunk_bytes)).astype(np.int64)


class PostQueue:
    """One GPU's serial post queue for one transport: ``free_at`` is when its last queued message is posted."""

    def __init__(self, rule: PostRule):
        self.rule = rule
        self.free_at = 0.0
        #: time the queue spent posting (s): its utilisation over an operation says whether posting fewer,
        #: larger messages could matter (:func:`simfuse.workloads.dlrm_candidates._tuning_matters`)
        self.busy_s = 0.0

    def post(self, now: float, messages: np.ndarray) -> np.ndarray:
        """Queue batches of ``messages[i]`` messages, in order, at ``now``; returns when each batch's last message
        is posted (s)."""
        m = np.asarray(messages, dtype=float)
        if len(m) == 0:
            return np.zeros(0)
        ends = max(now, self.free_at) + np.cumsum(m) * self.rule.post_s
        self.free_at = float(ends[-1])
        self.busy_s += float(m.sum()) * self.rule.post_s
        return ends


def post_queue(net, rank: int, rule: PostRule, scope=None) -> PostQueue:
    """The post queue of ``rank`` for ``rule``'s transport and one operation (``scope``: its tag) in the
    simulation that owns ``net`` (kept with the flow network: no state outside the simulation).

    One queue per operation: the batches of one exchange or one fused kernel serialize; two operations in flight
    at once do not share a queue -- NCCL runs the operations of one communicator one after another and gives
    each communicator its own proxy thread, so two concurrent all-to-alls are not posted by one thread."""
    queues = net.sim.post_queues
    key = (int(rank), rule.transport, scope)
    q = queues.get(key)
    if q is None or q.rule != rule:
        q = queues[key] = PostQueue(rule)
    return q


def post_ends(queue: PostQueue, now: float, src: int, n_ranks: int, dsts: np.ndarray,
              messages: np.ndarray) -> dict[int, float]:
    """Post the messages to ``dsts`` (``messages[i]`` to ``dsts[i]``; off-node destinations only) in shifted
    destination order ``(dst - src) mod n_ranks``; returns ``{dst: when its last message is posted}``."""
    d, ends = _post_sorted(queue, now, src, n_ranks, np.asarray(dsts, dtype=np.int64), messages)
    return dict(zip(d.tolist(), ends.tolist(), strict=True))


def _post_sorted(queue: PostQueue, now: float, src: int, n_ranks: int, dsts: np.ndarray,
                 messages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`post_ends` as arrays: the destinations sorted by id and when each one's last message is posted."""
    if len(dsts) == 0:
        return dsts, np.zeros(0)
    order = np.argsort((dsts - src) % n_ranks, kind="stable")
    ends = np.empty(len(dsts))
    ends[order] = queue.post(now, np.asarray(messages)[order])
    by_id = np.argsort(dsts, kind="stable")
    return dsts[by_id], ends[by_id]


def bulk_rule(collectives) -> PostRule:
    """NCCL's proxy: ``collectives.net_overhead_us`` per message, one message per 128 KiB chunk of a send."""
    return PostRule(collectives.net_overhead_s, NCCL_P2P_NET_CHUNK_BYTES, "proxy")


#: the transport of GPU-initiated puts (:func:`put_rule`): the key of their post queues
PUT_TRANSPORT = "gpu"


def put_rule(gpu_initiated) -> PostRule:
    """GPU-initiated puts: ``gpu_initiated.put_post_us`` per put (one put, one message)."""
    return PostRule(gpu_initiated.put_post_s, 0.0, PUT_TRANSPORT)


def post_gates(queue: PostQueue, now: float, src: int, n_ranks: int, groups, messages_of) -> list[float | None]:
    """Post one batch and say when each of its groups may complete.  ``groups``: ``[(flow group, off_node)]`` of
    the batch; ``messages_of(grp)``: messages per destination of an off-node group.  The off-node destinations post
    in shifted order after what is queued; returns, per group, when its last destination's last message is posted
    (s, absolute; None: on the node, or the rule posts nothing).  A group completes no sooner than that plus its
    latency (:meth:`~simfuse.network.flows.FlowNetwork.transfer`'s ``not_before_s``)."""
    off = [g for g, o in groups if o]
    if not off or not queue.rule.active:
        return [None] * len(groups)
    dst_l, msg_l = [], []
    for g in off:
        d = np.asarray(g.dsts, dtype=np.int64)
        dst_l.append(d)
        msg_l.append(np.broadcast_to(np.asarray(messages_of(g), dtype=np.int64), d.shape))
    dsts, msgs = (dst_l[0], msg_l[0]) if len(off) == 1 else (np.concatenate(dst_l), np.concatenate(msg_l))
    udst, inv = np.unique(dsts, return_inverse=True)
    sd, ends = _post_sorted(queue, now, src, n_ranks, udst, np.bincount(inv.reshape(-1), weights=msgs))
    return [float(ends[np.searchsorted(sd, np.asarray(g.dsts, dtype=np.int64))].max()) if o else None
            for g, o in groups]
