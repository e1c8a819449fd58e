"""Embedding sharding planner: enumerate, estimate, partition, propose (after TorchRec's EmbeddingShardingPlanner).

TorchRec's planner (``torchrec/distributed/planner``: ``enumerators.py``, ``shard_estimators.py``,
``partitioners.py``, ``proposers.py``) enumerates sharding options per table, prices each (perf and storage),
partitions the shards over ranks greedily under the HBM limit and proposes whole plans, keeping the best.  This
module follows the same four steps with simfuse's own cost terms (read, not copied):

**Sharding types** (``B`` global batch, ``b = B / n`` bags per rank, ``n`` ranks, ``g`` GPUs per node, ``N``
nodes, ``D`` dim, ``P`` lookups per bag, ``e`` bytes per element on the wire: ``embedding.comm_dtype``, by
default the tables' dtype):

* ``table_wise``: the whole table on one rank; it pools ``B`` bags and sends ``b * D * e`` to every rank;
* ``row_wise``: ``n`` row shards, one per rank; each pools ``B`` bags at ``P / n`` lookups (uniform ids) and sends
  ``b * D * e`` partial sums to every rank, which adds the ``n`` partials (reduce-scatter semantics);
* ``column_wise``: ``k`` column shards of ``D / k`` on ``k`` ranks; each pools ``B`` bags at ``P`` lookups over
  ``D / k`` columns and sends ``b * D / k * e`` to every rank;
* ``table_row_wise``: ``g`` row shards on the ranks of one node; each pools ``B`` bags at ``P / g`` lookups;
  stage 1 reduces the partials inside the node over NVLink (reduce-scatter: ``N * b * D * e`` to each local
  peer), stage 2 sends the node's result across nodes on the rails (local rank ``j`` sends ``b * D * e`` to local
  rank ``j`` of every node);
* ``grid`` (TorchRec's ``GRID_SHARD``): ``k`` column shards of ``D / k`` columns (``k = 2, 4, ...`` while
  ``D / k >= MIN_COLUMN_DIM`` and ``k <= N``), each table-row-wise on the ``g`` GPUs of its own node (``k``
  distinct nodes, ``k g`` holders); each holder pools ``B`` bags at ``P / g`` lookups over ``D / k`` columns;
  stage 1 reduce-scatters inside the node (``N * b * (D / k) * e`` to each local peer), stage 2 sends
  ``b * (D / k) * e`` on the rail to every remote node; a rank receives ``b * (D / k) * e`` from each of the
  ``k`` holder nodes (its own node's share over NVLink when it is one of them).  A table-row-wise table is the
  grid with ``k = 1``; the two share one cost formula (:func:`_hier_option`) and one code path in the DLRM
  builder.  The grid spreads a table's pooling over ``k g`` GPUs instead of ``g`` and divides each holder's
  stage-1 and rail bytes by ``k``; the bytes every rank receives are those of table-row-wise;
* ``data_parallel``: a replica on every rank; local pooling of the ``b`` own bags, no embedding All-to-All, the
  table's gradient (``rows * D`` in ``grad_dtype``, fp32 by default) all-reduced on the data-parallel stream and a dense optimizer update.

The backward pass sends the transposed volumes (pooled-embedding gradients back to the shard holders), so every
All-to-All volume counts twice.  ``table_row_wise`` is also offered over ``m = 2, 4, ...`` whole nodes (``m g``
row shards at ``P / (m g)`` lookups, each node as the one-node option; every rank receives ``m`` partial sums per
bag), as HugeCTR's hierarchical plans place their hottest table.

**Input distribution** (``embedding.input_dist``; forward only): every rank sends each holder the ids of its ``b``
bags the shard serves, ``x`` bytes (:func:`simfuse.workloads.ids.ids_bytes`, the builder's formula: ``b (P_shard k
+ 4)`` with ``k`` the ``key_dtype``'s bytes and one length per bag; with ``embedding.ids_dedup`` each distinct bag
once plus an index per bag; ``P_shard`` the shard's lookups per bag: ``P / n`` row-wise, ``P / g`` per
table-row-wise or grid holder, ``P`` for each column shard); a holder receives ``x`` from each other rank, a rank
sends ``shards x``.  A column shard needs all of its table's ids while a row shard needs only its rows', so
splitting columns (``column_wise``, ``grid``) multiplies this traffic by the column shards.  ``inline`` ids are
part of a rank's communication (the lookups wait for them).  ``prefetch`` ids (the next batch's, on their own
stream) are an ingress bound: a rank's cost is the larger of its iteration cost and the time its links take for
the ids it sends and receives (:meth:`_Ctx.rank_cost`), so an option whose holders' ids ingress would set the
step (a hot table on few holders) scores by it and the partitioner spreads that table over more holders when
another option costs less.  Only the ids count in the bound: they overlap the iteration and delay it only once
they outlast it.

**Replication** (``embedding.data_parallel_below_mib``): a table whose storage (rows x dim x dtype x (1 + optimizer
state)) is below the cut is replicated on every GPU (``data_parallel``: no All-to-All, no ids; its gradient joins
the dense all-reduce), as HugeCTR's planner does with its ``DP_SHARDING_THRESHOLD``; without a cut (0, the
default) data-parallel is one option among the others, priced by cost, as in TorchRec's planner.  A replica that
does not fit every GPU's memory is sharded as any other table.

**Reasons**: each table's plan carries why it got its sharding (``plan.csv``'s ``reason``): the cut it fell
under, or the option and its holders, whether the table is hot (at least twice the mean lookups per bag), whether
it fits one GPU, its estimate against the next-best option's, and its holders' ids ingress time.

**Estimator** (per shard, seconds): compute = the forward pooling priced as the simulator prices its kernel
(the System's cost model: a calibrated profile knows what the roofline does not, a narrow shard's layout and its
per-program cost; with a bare topology, HBM bytes of rows + int64 indices + outputs), and HBM bytes of the
sparse backward (the builder's formulas, ``simfuse.workloads.sparse_backward``: the sort and run-length encode of
the shard's ids, each distinct row and its optimizer state read and written, each lookup's gradient gathered) at
the device's
achievable HBM bandwidth (``hbm_bw_bytes_per_s * hbm_efficiency`` of the System's device spec); communication =
bytes sent and received per fabric tier (NVLink inside a node, the NICs between nodes) at that tier's per-GPU
bandwidth (``scale_up.effective_bw_bytes_per_s``; ``nics_per_node * nic rate * efficiency_across_nodes(g) / g``).  A
rank's cost is ``compute + comm`` in baseline mode (bulk-synchronous) and ``max(compute, comm)`` in fused mode (the
fused kernel pushes while it pools), plus the data-parallel all-reduce (``2 (n-1)/n * rows * D * grad bytes`` per
rank, at the NIC rate when there are several nodes) and the prefetched ids' bound; receive volumes of uniform
traffic are spread evenly (every rank receives ``b * D * e`` per shard; the intra/inter split is the average over
ranks).  Dense layers are
data parallel and the same under every plan, so they are left out.

**Partitioner** (greedy, documented heuristic): tables in decreasing order of their table-wise cost (ties: lower
index first); for each table every option is tried against the loads placed so far: ``table_wise`` on the rank
where it raises the cost least, ``column_wise`` shards one by one on the least-loaded ranks, ``table_row_wise`` on
the node whose most-loaded rank ends lowest, ``grid`` on the ``k`` nodes whose most-loaded ranks end lowest (column
shard ``i`` on the ``i``-th of them in node order; ties to the lower node; only nodes where every GPU has the
memory), ``row_wise`` and ``data_parallel`` on every rank; ranks whose
embedding memory (``memory_bytes * embedding_memory_fraction``; rows x dim x dtype x (1 + optimizer state))
would overflow are skipped.  The option with the lowest score wins: the larger of the resulting critical-rank (maximum)
cost and the average rank cost once every remaining table is placed at its cheapest summed cost (a lookahead
bound: without it the myopic choice spreads every table row-wise, whose partial sums multiply the traffic by the
number of shards); ties go to the lowest increase of the summed cost, then to the order of :data:`SHARDINGS`.

**Proposer**: five candidates (``greedy`` over every option the mode supports, ``greedy_no_grid`` (the same without
``grid``), ``greedy_no_twrw`` (the same without ``table_row_wise``), ``table_wise`` (table-wise, row-wise where a table does not fit), ``row_wise`` (every table row-wise));
the one with the lowest estimated critical-rank cost is chosen (ties: that order).  ``greedy_no_grid`` is there
because the greedy is myopic: a grid shard always lowers the critical rank of the moment (it halves or quarters a
node's load), so the greedy takes it for the first tables even where, once every table is placed, whole
table-row-wise nodes would balance as well without grid's extra index reads (equal tables on as many nodes); with
it, offering grid never makes the estimated plan worse.  When the greedy plan has no grid table, ``greedy_no_grid``
is that plan (every step's choice was open to it) and is not partitioned again.  ``greedy_no_twrw`` is there for
the same reason: a table-row-wise node takes a hot table's whole pooling off the other ranks at once, so the
greedy takes it first where column and grid shards of every table would end balanced lower (the MLPerf model on
8 H200 nodes: 1.85 ms estimated with table-row-wise tables, 1.41 ms without); it too is the greedy plan itself
when that has no table-row-wise table.  Every option is open to both modes: in fused mode ``table_row_wise`` and ``grid`` run as the
hierarchical push (``TwrwEmbeddingPush``: partial sums pushed to node-local reducers over NVLink as workgroups
finish, reduced slices put on the rail as they complete), so their communication overlaps their pooling as the
other fused shards' does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError
from ..fused.base import largest_divisor_at_most
from ..fused.knobs import DTYPE_BYTES
from ..fused.twrw import twrw_rail_bytes, twrw_stage1_bytes
from .ids import spec_ids_bytes
from .placement import Unit, format_ranks, parse_ranks  # noqa: F401  (re-exported: the rank text format)
from .pooling import pool_kernel_s
from .rank_units import RankUnits  # noqa: F401  (re-exported: the planner's per-rank units)
from .sparse_backward import index_bytes, sparse_update_bytes

SHARDINGS = ("table_wise", "row_wise", "column_wise", "table_row_wise", "grid", "data_parallel")
#: sharding types whose shards are row shards over the ``g`` GPUs of a node, reduced inside the node (stage 1) and
#: sent on the rails (stage 2): table-row-wise (one node, all columns) and grid (``k`` nodes, ``D / k`` columns each)
HIER_SHARDINGS = ("table_row_wise", "grid")
#: sharding types fused mode executes (see the module docstring): all of them since the hierarchical TWRW push
FUSED_SHARDINGS = SHARDINGS
#: bytes per lookup index: int64 ids, as the fused operator's ``index_bytes`` default (simfuse/fused/ops.py)
INDEX_BYTES = 8
#: narrowest column shard: 32 columns x 4 B = one 128-byte cache line per row (narrower rows waste gathers, see
#: docs/sources.md S9: 128-256-byte rows are already the hard case for random gathers)
MIN_COLUMN_DIM = 32
CANDIDATES = ("greedy", "greedy_no_grid", "greedy_no_twrw", "table_wise", "row_wise")
#: the greedy candidates without one sharding type: each is the greedy plan itself where that has none of it
WITHOUT = {"greedy_no_grid": "grid", "greedy_no_twrw": "table_row_wise"}


@dataclass(frozen=True)
class Rates:
    """Per-GPU rates the estimator prices bytes with (bytes/s)."""

    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    nic_bytes_per_s: float

    @classmethod
    def from_topology(cls, topology, gpus_per_node: int) -> Rates:
        dev, su, so = topology.device, topology.scale_up, topology.scale_out
        # NIC bytes cross nodes: at the full-node efficiency where the topology sets one and every NIC is driven
        return cls(dev.hbm_bw_bytes_per_s * dev.hbm_efficiency, su.effective_bw_bytes_per_s,
                   so.nics_per_node * (so.nic_bw_bytes_per_s * so.efficiency_across_nodes(gpus_per_node))
                   / gpus_per_node)


@dataclass
class TablePlan:
    """One table's sharding: ``ranks`` holding its shards (shard ``i`` on ``ranks[i]``), per-shard rows and
    columns, the storage on each holder, and the estimated cost of one shard on its rank alone (seconds)."""

    table: int
    sharding: str
    ranks: tuple[int, ...]
    rows_per_shard: int
    dim_per_shard: int
    storage_bytes_per_rank: float
    estimated_cost_s: float
    reason: str = ""


@dataclass
class Plan:
    """A sharding plan for one mode: per-table choices, the units each rank holds (for the graph builder), the
    estimated critical-rank cost (s, embedding part) and every candidate's estimate."""

    mode: str
    n_ranks: int
    gpus_per_node: int
    tables: list[TablePlan]
    per_rank: list[list[Unit]] | RankUnits
    estimated_critical_s: float
    candidate: str = "greedy"
    candidates: dict = field(default_factory=dict)
    source: str = "planner"

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{"mode": self.mode, "table": f"t{t.table}", "sharding": t.sharding,
                              "ranks": format_ranks(t.ranks, self.n_ranks), "shards": len(t.ranks),
                              "rows_per_shard": t.rows_per_shard, "dim_per_shard": t.dim_per_shard,
                              "bytes": t.storage_bytes_per_rank, "estimated_cost_s": t.estimated_cost_s,
                              "candidate": self.candidate, "plan_estimated_critical_s": self.estimated_critical_s,
                              "reason": t.reason or (f"forced: {self.source}" if self.source != "planner" else "")}
                             for t in self.tables])

    def memory_bytes(self, spec) -> np.ndarray:
        """Embedding storage per rank (bytes)."""
        if isinstance(self.per_rank, RankUnits):
            return self.per_rank.memory_bytes(spec)
        return _memory_per_rank(self.per_rank, spec)


# ---------------------------------------------------------------------------------------------------- estimator
class _Ctx:
    def __init__(self, spec, n: int, g: int, rates: Rates, budget_bytes: float, mode: str, cost=None):
        self.spec, self.n, self.g, self.N = spec, n, g, n // g
        self.B, self.D = spec.global_batch, spec.dim
        self.b = self.B // n
        self.eb = DTYPE_BYTES[spec.embedding_dtype]
        self.ceb = DTYPE_BYTES[spec.comm_dtype]   # All-to-All payload (embedding.comm_dtype, default the table's)
        self.geb = DTYPE_BYTES[spec.grad_dtype]   # data-parallel table gradients (grad_dtype, default fp32)
        self.opt = spec.optimizer_state_factor
        self.sparse_backward = spec.sparse_backward
        self.rates, self.budget, self.mode = rates, budget_bytes, mode
        # the input distribution (embedding.input_dist): inline ids are part of a rank's communication (the
        # lookups wait for them); prefetched ids are an ingress bound beside the iteration (module docstring)
        self.ids = spec.input_dist
        # the System's kernel cost model (None for a bare topology: the roofline prices the pooling)
        self.cost = cost
        self._pool_memo: dict = {}

    def ids_bytes(self, t: int, lookups: float) -> float:
        """Bytes one rank sends one holder of table ``t``'s shard serving ``lookups`` ids per bag
        (:func:`simfuse.workloads.ids.spec_ids_bytes`; 0 when the ids are not modelled)."""
        return 0.0 if self.ids == "none" else spec_ids_bytes(self.spec, self.b, lookups, t)

    def storage(self, rows: int, dim: int) -> float:
        return rows * dim * self.eb * (1.0 + self.opt)

    def replicated(self, t: int) -> bool:
        """Table ``t`` is below ``embedding.data_parallel_below_mib`` (its rows, dim, dtype and optimizer
        state): the planner replicates it (data-parallel), as HugeCTR's planner does (module docstring)."""
        return self.n > 1 and self.storage(self.spec.tables[t].rows, self.D) < self.spec.data_parallel_below_bytes

    def pool_update_bytes(self, bags: int, lookups: float, dim: int, rows: float) -> float:
        """HBM bytes of forward pooling and the sparse backward of one shard of ``rows`` rows (the builder's
        formulas; ``embedding.sparse_backward: sorted``: the sort and encode over the shard's own key space, at
        HBM rate)."""
        eb, ceb = self.eb, self.ceb  # pooled rows written and their gradients read in the payload's dtype
        pool = self.pool_fwd_bytes(bags, lookups, dim)
        if self.sparse_backward == "bytes":
            return pool + bags * lookups * dim * eb * (2.0 + 2.0 * self.opt) + bags * dim * ceb
        return (pool + sparse_update_bytes(eb, ceb, self.opt, bags, rows, lookups, dim)
                + index_bytes(bags, rows, lookups))

    def pool_update_s(self, bags: int, lookups: float, dim: int, rows: float, hier: bool = False) -> float:
        """Seconds of a shard's forward pooling and sparse backward: :meth:`pool_update_bytes` at the achievable
        HBM rate, with the forward pooling priced by the System's cost model where there is one (a calibrated
        model knows what the roofline does not: a narrow shard's layout and its per-program cost), as the DLRM
        program sizes that kernel: an All-to-All shard's at the model's ``bags_per_wg`` (a divisor of the GPU's
        batch) and its rows (the L2 term); a hierarchical shard's (``hier``) at 4 bags a workgroup and no rows."""
        hbm = self.rates.hbm_bytes_per_s
        total = self.pool_update_bytes(bags, lookups, dim, rows) / hbm
        if self.cost is None:
            return total
        key = (bags, lookups, dim, rows, hier)
        kt = self._pool_memo.get(key)
        if kt is None:
            per_wg, known = (4, None) if hier else (largest_divisor_at_most(self.b, self.spec.bags_per_wg),
                                                    max(1, int(rows)))
            kt = self._pool_memo[key] = pool_kernel_s(self.cost, bags, lookups, dim, self.eb, self.ceb, per_wg, known)
        return total - self.pool_fwd_bytes(bags, lookups, dim) / hbm + kt

    def pool_fwd_bytes(self, bags: int, lookups: float, dim: int) -> float:
        """HBM bytes of a shard's forward pooling (rows and int64 ids read, pooled rows written)."""
        return bags * lookups * (dim * self.eb + INDEX_BYTES) + bags * dim * self.ceb

    def link_s(self, si, se, ri, re):
        r = self.rates
        return np.maximum(si, ri) / r.nvlink_bytes_per_s + np.maximum(se, re) / r.nic_bytes_per_s

    def rank_cost(self, comp, si, se, ri, re, dp=0.0, ids=None):
        """A rank's cost: compute and communication (summed in baseline mode, overlapped in fused mode) plus the
        data-parallel all-reduce ``dp``; ``ids``: the prefetched ids a rank sends and receives per tier
        ``(si, se, ri, re)``, a bound: the iteration ends no sooner than they have arrived."""
        comm = self.link_s(si, se, ri, re)
        cost = (comp + comm if self.mode == "baseline" else np.maximum(comp, comm)) + dp
        return cost if ids is None else np.maximum(cost, self.link_s(*ids))

    def dp_allreduce_s(self, rows: int) -> float:
        if self.n == 1:
            return 0.0
        size = rows * self.D * self.geb
        bw = self.rates.nic_bytes_per_s if self.N > 1 else self.rates.nvlink_bytes_per_s
        return 2.0 * (self.n - 1) / self.n * size / bw


@dataclass
class _Option:
    """An option's per-shard load (on a holder) and its uniform load (on every rank), for the partitioner."""

    kind: str
    shards: int
    rows: int
    dim: int
    pooling: float
    comp_s: float            # on each holder
    send_intra: float        # bytes, fwd + bwd, on each holder
    send_inter: float
    recv_intra_holder: float  # bytes received by each holder (table_row_wise stage 1)
    u_recv_intra: float       # bytes received by every rank
    u_recv_inter: float
    u_comp_s: float = 0.0
    u_dp_s: float = 0.0
    storage: float = 0.0      # bytes on each holder
    recv_inter_holder: float = 0.0  # bytes each holder receives from other nodes (the ids of the input distribution)
    u_send_intra: float = 0.0       # bytes every rank sends (its bags' ids to the holders), average per tier
    u_send_inter: float = 0.0
    # prefetched ids (input_dist: prefetch), priced as an ingress bound apart from the iteration's traffic
    ids_recv_intra_holder: float = 0.0
    ids_recv_inter_holder: float = 0.0
    u_ids_send_intra: float = 0.0
    u_ids_send_inter: float = 0.0


def _with_keys(ctx: _Ctx, opt: _Option, t: int) -> _Option:
    """``opt`` (of table ``t``) with its input distribution (forward only): every rank sends each of the
    ``shards`` holders the ids of its ``b`` bags that the shard serves, ``x`` bytes (:meth:`_Ctx.ids_bytes`:
    ``b (pooling k + 4)`` without deduplication).  A holder receives ``x`` from each other rank (``g - 1`` of them
    over NVLink); a rank sends ``shards x``, the tiers split as the uniform receive volumes (``(g - 1) / n``
    intra).  ``inline`` ids join the option's communication; ``prefetch`` ids are kept apart (the ingress bound
    of :meth:`_Ctx.rank_cost`)."""
    x = 0.0 if opt.kind == "data_parallel" else ctx.ids_bytes(t, opt.pooling)
    if not x:
        return opt
    n, g = ctx.n, ctx.g
    if ctx.ids == "inline":
        return dataclasses.replace(opt, recv_intra_holder=opt.recv_intra_holder + (g - 1) * x,
                                   recv_inter_holder=opt.recv_inter_holder + (n - g) * x,
                                   u_send_intra=opt.u_send_intra + opt.shards * x * (g - 1) / n,
                                   u_send_inter=opt.u_send_inter + opt.shards * x * (n - g) / n)
    return dataclasses.replace(opt, ids_recv_intra_holder=(g - 1) * x, ids_recv_inter_holder=(n - g) * x,
                               u_ids_send_intra=opt.shards * x * (g - 1) / n,
                               u_ids_send_inter=opt.shards * x * (n - g) / n)


def enumerate_options(ctx: _Ctx, t: int, allowed: tuple[str, ...]) -> list[_Option]:
    """Every sharding option of table ``t`` the context allows (enumerator + estimator)."""
    tab = ctx.spec.tables[t]
    B, b, D, eb, n, g, N = ctx.B, ctx.b, ctx.D, ctx.eb, ctx.n, ctx.g, ctx.N
    ceb = ctx.ceb
    hbm = ctx.rates.hbm_bytes_per_s
    frac_intra, frac_inter = (g - 1) / n, (n - g) / n   # average share of a rank's received bytes per tier
    out = []

    def uniform_a2a(kind, shards, rows, dim, pooling):
        x = 2.0 * b * dim * ceb  # per destination, fwd + bwd
        return _Option(kind, shards, rows, dim, pooling, ctx.pool_update_s(B, pooling, dim, rows),
                       (g - 1) * x, (n - g) * x, 0.0, shards * x * frac_intra, shards * x * frac_inter,
                       storage=ctx.storage(rows, dim))

    if "table_wise" in allowed:
        out.append(uniform_a2a("table_wise", 1, tab.rows, D, tab.pooling))
    if "row_wise" in allowed and n > 1:
        out.append(uniform_a2a("row_wise", n, math.ceil(tab.rows / n), D, tab.pooling / n))
    if "column_wise" in allowed:
        k = 2
        while k <= n and D % k == 0 and D // k >= MIN_COLUMN_DIM:
            out.append(uniform_a2a("column_wise", k, tab.rows, D // k, tab.pooling))
            k *= 2
    if "table_row_wise" in allowed and N > 1 and g > 1:
        out.append(_hier_option(ctx, t, "table_row_wise", 1))
        m = 2  # row shards over m whole nodes (HugeCTR's hierarchical plans put its hottest table on 2-4 nodes)
        while m <= N and m * g <= tab.rows:
            out.append(_custom_option_comm(ctx, Unit(t, math.ceil(tab.rows / (m * g)), tab.pooling / (m * g), 0,
                                                     m * g, "table_row_wise")))
            m *= 2
    if "grid" in allowed and g > 1:
        k = 2
        while k <= N and D % k == 0 and D // k >= MIN_COLUMN_DIM:
            out.append(_hier_option(ctx, t, "grid", k))
            k *= 2
    if "data_parallel" in allowed:
        local = b * tab.pooling * (D * eb + INDEX_BYTES) + b * D * eb      # pool own bags
        grad = b * tab.pooling * D * ctx.geb                                 # scatter-add into the dense grad
        upd = tab.rows * D * eb * (2.0 + 2.0 * ctx.opt) + tab.rows * D * ctx.geb  # dense optimizer step
        out.append(_Option("data_parallel", n, tab.rows, D, tab.pooling, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                           u_comp_s=(local + grad + upd) / hbm, u_dp_s=ctx.dp_allreduce_s(tab.rows),
                           storage=ctx.storage(tab.rows, D)))
    return [_with_keys(ctx, o, t) for o in out]


def _hier_option(ctx: _Ctx, t: int, kind: str, k: int) -> _Option:
    """Table ``t`` in ``k`` column shards of ``D / k`` columns, each row-sharded over the ``g`` GPUs of its own node
    (``table_row_wise``: ``k = 1``; ``grid``: ``k`` nodes): each of the ``k g`` holders pools all ``B`` bags at
    ``P / g`` lookups over ``D / k`` columns, reduce-scatters inside its node (``N b D / k`` to each local peer)
    and sends its node's share on its rail (``b D / k`` to every remote node); fwd + bwd.  Every rank receives
    ``b D / k`` from each of the ``k`` holder nodes but its own, ``k (N - 1) / N`` of them on average."""
    tab = ctx.spec.tables[t]
    b, ceb, g, N = ctx.b, ctx.ceb, ctx.g, ctx.N
    rows, p, dim = math.ceil(tab.rows / g), tab.pooling / g, ctx.D // k
    s1 = 2.0 * twrw_stage1_bytes(N, b, dim, ceb) * (g - 1)  # reduce-scatter inside the node, fwd + bwd
    s2 = 2.0 * twrw_rail_bytes(b, dim, ceb)                  # per remote node on the rail, fwd + bwd
    return _Option(kind, k * g, rows, dim, p, ctx.pool_update_s(ctx.B, p, dim, rows, hier=True),
                   s1,
                   (N - 1) * s2, s1, 0.0, k * s2 * (N - 1) / N, storage=ctx.storage(rows, dim))


# ---------------------------------------------------------------------------------------------------- partitioner
#: the per-rank loads the partitioner keeps (rows of :attr:`_Loads.rows`): compute, bytes sent and received per
#: tier (intra / inter node), memory, and the prefetched ids received and sent per tier
_FIELDS = ("comp", "si", "se", "ri", "re", "mem", "ki", "ke", "ksi", "kse")
_F = {name: i for i, name in enumerate(_FIELDS)}


class _Loads:
    """The loads of every rank, kept once per *class* of ranks that received the same placements.

    Every rank starts in one class; placing a shard on some ranks of a class splits it.  Members of a class have
    had the same additions in the same order, so their loads are bitwise equal, and a per-rank formula evaluated
    on a class row gives each member's value exactly: the partitioner's numbers equal those of per-rank arrays,
    while a placement costs O(classes) instead of O(ranks) per field (131,072 ranks hold a few hundred classes).
    ``lab[r]``: rank ``r``'s class; ``rows[:, c]``: class ``c``'s loads (:data:`_FIELDS`); ``size[c]``: its
    ranks."""

    def __init__(self, ctx: _Ctx):
        self.ctx = ctx
        self.lab = np.zeros(ctx.n, dtype=np.int64)
        self.rows = np.zeros((len(_FIELDS), 8))
        self.size = np.zeros(8, dtype=np.int64)
        self.size[0] = ctx.n
        self.n_cls = 1
        self.dp_s = 0.0
        self.cost_sum: float | None = None  # the summed rank costs, kept until the next _apply

    def field(self, name: str) -> np.ndarray:
        """One load per class (a view)."""
        return self.rows[_F[name], :self.n_cls]

    def ids(self, ksi, kse, kri, kre):
        """The ids' bound's argument to :meth:`_Ctx.rank_cost` (None unless the ids are prefetched)."""
        return (ksi, kse, kri, kre) if self.ctx.ids == "prefetch" else None

    def class_costs(self) -> np.ndarray:
        f = self.field
        return self.ctx.rank_cost(f("comp"), f("si"), f("se"), f("ri"), f("re"), self.dp_s,
                                  self.ids(f("ksi"), f("kse"), f("ki"), f("ke")))

    def costs(self) -> np.ndarray:
        """Every rank's cost."""
        return self.class_costs()[self.lab]

    def split(self, holders: np.ndarray, delta: np.ndarray) -> None:
        """Add ``delta`` (one value per field) to the loads of ``holders``: a class whose ranks are all holders
        changes in place, one with some holders gives them a new class."""
        h_lab = self.lab[holders]
        cls, cnt = np.unique(h_lab, return_counts=True)
        whole = cnt == self.size[cls]
        if whole.any():
            self.rows[:, cls[whole]] += delta[:, None]
        part = cls[~whole]
        if not len(part):
            return
        k, c0 = len(part), self.n_cls
        if c0 + k > self.rows.shape[1]:
            cap = max(2 * self.rows.shape[1], c0 + k)
            self.rows = np.concatenate([self.rows, np.zeros((len(_FIELDS), cap - self.rows.shape[1]))], axis=1)
            self.size = np.concatenate([self.size, np.zeros(cap - len(self.size), dtype=np.int64)])
        new_ids = np.arange(c0, c0 + k)
        self.rows[:, new_ids] = self.rows[:, part] + delta[:, None]
        self.size[new_ids] = cnt[~whole]
        self.size[part] -= cnt[~whole]
        self.n_cls = c0 + k
        remap = np.full(c0, -1, dtype=np.int64)
        remap[part] = new_ids
        moved = remap[h_lab]
        sel = moved >= 0
        self.lab[holders[sel]] = moved[sel]


def _try(opt: _Option, L: _Loads):
    """Place ``opt`` against loads ``L`` (not modified): (critical cost, summed increase, holder ranks) or None.
    Costs are computed per class of ranks (:class:`_Loads`) and read per rank only where ranks are chosen."""
    ctx = L.ctx
    n, g = ctx.n, ctx.g
    f = L.field
    ok = f("mem") + opt.storage <= ctx.budget * (1 + 1e-9)
    comp = f("comp") + opt.u_comp_s
    ri, re = f("ri") + opt.u_recv_intra, f("re") + opt.u_recv_inter
    dp = L.dp_s + opt.u_dp_s
    si, se = f("si") + opt.u_send_intra, f("se") + opt.u_send_inter
    ksi, kse = f("ksi") + opt.u_ids_send_intra, f("kse") + opt.u_ids_send_inter
    if L.cost_sum is None:
        L.cost_sum = L.costs().sum()
    before = L.cost_sum
    base = ctx.rank_cost(comp, si, se, ri, re, dp, L.ids(ksi, kse, f("ki"), f("ke")))
    hri, hre = ri + opt.recv_intra_holder, re + opt.recv_inter_holder  # on a holder
    hids = L.ids(ksi, kse, f("ki") + opt.ids_recv_intra_holder, f("ke") + opt.ids_recv_inter_holder)
    cand = ctx.rank_cost(comp + opt.comp_s, si + opt.send_intra, se + opt.send_inter, hri, hre, dp, hids)
    lab = L.lab
    if opt.kind in ("row_wise", "data_parallel"):
        if not ok.all():
            return None
        after = cand[lab]
        return float(after.max()), float(after.sum() - before), np.arange(n)
    base_r = base[lab]
    if opt.kind in HIER_SHARDINGS:  # whole nodes: the k nodes whose most-loaded rank ends lowest
        N, k = ctx.N, opt.shards // g
        node_ok = ok[lab].reshape(N, g).all(axis=1)
        if int(node_ok.sum()) < k:
            return None
        node_max = np.where(node_ok, cand[lab].reshape(N, g).max(axis=1), np.inf)
        if k == 1:
            sel = np.array([int(np.argmin(node_max))])
        else:  # ties to the lower node; column shard i on the i-th selected node in node order
            sel = np.sort(np.argsort(node_max, kind="stable")[:k])
        holders = (sel[:, None] * g + np.arange(g)).reshape(-1)
        crit = max(float(base.max()), float(node_max[sel].max()))
        inc = float(base_r.sum() - before + (cand[lab[holders]] - base_r[holders]).sum())
        return crit, inc, holders
    # table_wise / column_wise: shards one by one on the rank where the cost ends lowest
    if int(L.size[:L.n_cls][ok].sum()) < opt.shards:
        return None
    masked = np.where(ok, cand, np.inf)
    holders = _lowest_ranks(masked, L, opt.shards)
    crit = max(float(base.max()), float(cand[lab[holders]].max()))
    inc = float(base_r.sum() - before + (cand[lab[holders]] - base_r[holders]).sum())
    return crit, inc, holders


def _lowest_ranks(value: np.ndarray, L: _Loads, k: int) -> np.ndarray:
    """The ``k`` ranks of lowest ``value`` (one per class), ties to the lower rank, in rank order: the set
    ``np.argsort(value[L.lab], kind="stable")[:k]`` selects, found from the classes (the k-th lowest value by
    class sizes) with two passes over the ranks instead of a sort of them."""
    lab = L.lab
    if k == 1:
        return np.array([int(np.argmin(value[lab]))])
    size = L.size[:L.n_cls]
    order = np.argsort(value, kind="stable")
    at = int(np.searchsorted(np.cumsum(size[order]), k))  # the class holding the k-th lowest rank
    v = value[order[at]]
    per_rank = value[lab]
    less = np.flatnonzero(per_rank < v)
    return np.sort(np.concatenate([less, np.flatnonzero(per_rank == v)[:k - len(less)]]))


#: where each field's per-holder (``_Option`` attribute) and uniform (every rank) additions come from
_HOLDER = {"comp": "comp_s", "re": "recv_inter_holder", "si": "send_intra", "se": "send_inter",
           "ri": "recv_intra_holder", "mem": "storage", "ki": "ids_recv_intra_holder",
           "ke": "ids_recv_inter_holder"}
_UNIFORM = {"comp": "u_comp_s", "ri": "u_recv_intra", "re": "u_recv_inter", "si": "u_send_intra",
            "se": "u_send_inter", "ksi": "u_ids_send_intra", "kse": "u_ids_send_inter"}


def _apply(opt: _Option, holders: np.ndarray, L: _Loads) -> None:
    """Add ``opt``'s loads: its uniform part to every rank, then its per-shard part to ``holders``."""
    L.cost_sum = None
    for name, attr in _UNIFORM.items():
        L.field(name)[...] += getattr(opt, attr)
    L.dp_s += opt.u_dp_s
    holders = np.asarray(holders, dtype=np.int64).reshape(-1)
    delta = np.array([float(getattr(opt, _HOLDER[name])) if name in _HOLDER else 0.0 for name in _FIELDS])
    if len(holders) and delta.any():
        L.split(holders, delta)


def _option_cost_alone(ctx: _Ctx, opt: _Option) -> float:
    ids = None
    if ctx.ids == "prefetch":
        ids = (opt.u_ids_send_intra, opt.u_ids_send_inter, opt.ids_recv_intra_holder, opt.ids_recv_inter_holder)
    return float(ctx.rank_cost(opt.comp_s + opt.u_comp_s, opt.send_intra + opt.u_send_intra,
                               opt.send_inter + opt.u_send_inter, opt.recv_intra_holder + opt.u_recv_intra,
                               opt.recv_inter_holder + opt.u_recv_inter, opt.u_dp_s, ids))


def _option_total(ctx: _Ctx, opt: _Option) -> float:
    """An option's cost summed over ranks, each part alone (holders x holder cost + ranks x uniform cost)."""
    hold = _option_cost_alone(ctx, _holder_part(opt))
    uni = _option_cost_alone(ctx, _uniform_part(opt))
    return (opt.shards if opt.kind not in ("data_parallel",) else 0) * hold + ctx.n * uni


def _holder_part(o: _Option) -> _Option:
    """The part of ``o`` one holder carries (its shard), without the load every rank carries."""
    return _Option(o.kind, 1, o.rows, o.dim, o.pooling, o.comp_s, o.send_intra, o.send_inter, o.recv_intra_holder,
                   0.0, 0.0, storage=o.storage, recv_inter_holder=o.recv_inter_holder,
                   ids_recv_intra_holder=o.ids_recv_intra_holder, ids_recv_inter_holder=o.ids_recv_inter_holder)


def _uniform_part(o: _Option) -> _Option:
    """The part of ``o`` every rank carries (received volumes, sent ids, data-parallel work)."""
    return _Option(o.kind, o.shards, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, o.u_recv_intra, o.u_recv_inter, o.u_comp_s,
                   o.u_dp_s, u_send_intra=o.u_send_intra, u_send_inter=o.u_send_inter,
                   u_ids_send_intra=o.u_ids_send_intra, u_ids_send_inter=o.u_ids_send_inter)


def _too_big(ctx: _Ctx, t: int):
    return SpecError(ctx.spec.source, f"embedding.rows[{t}]",
                     f"table of {ctx.spec.tables[t].rows} rows fits no sharding in the GPUs' embedding memory "
                     f"({ctx.budget / 1e9:.1f} GB per GPU)")


def _partition(ctx: _Ctx, allowed: tuple[str, ...], name: str) -> Plan:
    T = len(ctx.spec.tables)
    L = _Loads(ctx)
    per_rank = RankUnits(ctx.n)
    tw = {t: enumerate_options(ctx, t, ("table_wise",))[0] for t in range(T)}
    order = sorted(range(T), key=lambda t: (-_option_cost_alone(ctx, tw[t]), t))
    small = {t for t in range(T) if ctx.replicated(t)}
    options = {t: enumerate_options(ctx, t, ("data_parallel",) if t in small else allowed) for t in range(T)}
    least = {t: min((_option_total(ctx, o) for o in options[t] if o.storage <= ctx.budget), default=0.0)
             for t in range(T)}
    remaining = sum(least.values())
    tables: list[TablePlan] = []
    for t in order:
        remaining -= least[t]
        total = float(L.costs().sum())
        ranked = _rank_options(ctx, options[t], L, total, remaining)
        note = ""
        if not ranked and t in small:  # a replica does not fit every rank: shard it as any other table
            ranked = _rank_options(ctx, enumerate_options(ctx, t, allowed), L, total, remaining)
            note = "replica does not fit every GPU; "
        if not ranked:
            raise _too_big(ctx, t)
        (score, _inc, _i), opt, holders = ranked[0]
        _apply(opt, holders, L)
        per_rank.add(t, opt, holders)
        tables.append(TablePlan(t, opt.kind, tuple(np.asarray(holders).tolist()), opt.rows, opt.dim, opt.storage,
                                _option_cost_alone(ctx, opt),
                                note + _reason(ctx, t, opt, holders, ranked, tw[t], t in small and not note)))
    tables.sort(key=lambda tp: tp.table)
    return Plan(ctx.mode, ctx.n, ctx.g, tables, per_rank, float(L.costs().max()), name)


def _rank_options(ctx: _Ctx, options, L: _Loads, total: float, remaining: float) -> list:
    """The options that fit, best first: ``((score, summed increase, index), option, holders)``.  Score: the
    critical rank after this table, or the average rank once every remaining table is placed at its cheapest
    summed cost, whichever is larger (a lookahead bound); ties to the lower summed increase, then the order of
    :data:`SHARDINGS`."""
    out = []
    for i, opt in enumerate(options):
        res = _try(opt, L)
        if res is not None:
            out.append(((max(res[0], (total + res[1] + remaining) / ctx.n), res[1], i), opt, res[2]))
    return sorted(out, key=lambda x: x[0])


def _reason(ctx: _Ctx, t: int, opt: _Option, holders, ranked: list, tw: _Option, replicated: bool) -> str:
    """Why table ``t`` got ``opt`` (plan.csv's ``reason``)."""
    tab = ctx.spec.tables[t]
    mib = ctx.storage(tab.rows, ctx.D) / 2**20
    if replicated:
        return (f"replicated: {tab.rows} rows, {mib:.3g} MiB < data_parallel_below_mib "
                f"{ctx.spec.data_parallel_below_bytes / 2**20:.3g}")
    where = "every GPU" if len(holders) == ctx.n else f"{len(holders)} GPU{'s' if len(holders) > 1 else ''}"
    parts = [f"{opt.kind} over {where}"]
    mean_p = sum(x.pooling for x in ctx.spec.tables) / len(ctx.spec.tables)
    if tab.pooling >= 2 * mean_p:
        parts.append(f"hot ({tab.pooling:g} lookups per bag, mean {mean_p:.3g})")
    if tw.storage > ctx.budget:
        parts.append(f"{mib / 1024:.3g} GiB does not fit one GPU's {ctx.budget / 2**30:.3g} GiB")
    score = ranked[0][0][0]
    nxt = next((r for r in ranked[1:] if r[1].kind != opt.kind or r[1].shards != opt.shards), None)
    best = f"lowest estimate {score * 1e6:.4g} us"
    if nxt is not None:
        best += f" (next {nxt[1].kind} x{nxt[1].shards}: {nxt[0][0] * 1e6:.4g} us)"
    if ctx.ids == "prefetch" and opt.kind != "data_parallel":
        ing = ctx.link_s(0.0, 0.0, opt.ids_recv_intra_holder, opt.ids_recv_inter_holder)
        best += f"; ids ingress {ing * 1e6:.3g} us per holder"
    return "; ".join(parts + [best])


def _context(spec, system_or_topology, n: int, g: int, mode: str) -> _Ctx:
    if mode not in ("baseline", "fused"):
        raise SpecError("<argument>", "mode", f"unknown mode {mode!r}; expected fused or baseline")
    topo = getattr(system_or_topology, "topology", system_or_topology)
    budget = topo.device.memory_bytes * spec.embedding_memory_fraction
    return _Ctx(spec, n, g, Rates.from_topology(topo, g), budget, mode, getattr(system_or_topology, "cost", None))


def check_batch_split(spec, nodes: int, gpus_per_node: int) -> None:
    """SpecError naming ``global_batch`` when the batch does not split evenly over the GPUs (data parallel)."""
    n = nodes * gpus_per_node
    if spec.global_batch % n:
        raise SpecError(spec.source, "global_batch", f"{spec.global_batch} is not divisible by the {n} GPUs of "
                                                     f"{nodes} nodes; {batch_split_hint(spec.global_batch, nodes, gpus_per_node)}")


def batch_split_hint(global_batch: int, nodes: int, gpus_per_node: int) -> str:
    """What would split: the nearest node counts below and above ``nodes`` whose GPUs divide ``global_batch``,
    weak scaling at the batch per GPU nearest to ``global_batch / GPUs``, and the nearest global batches that
    split over these GPUs."""
    from ..checks import MAX_NODES

    g, n, B = gpus_per_node, nodes * gpus_per_node, int(global_batch)
    below = next((k for k in range(nodes - 1, 0, -1) if B % (k * g) == 0), None)
    above = next((k for k in range(nodes + 1, min(MAX_NODES, B // g) + 1) if B % (k * g) == 0), None)
    near = [k for k in (below, above) if k is not None]
    per_gpu = max(1, round(B / n))
    lo, hi = (B // n) * n, (B // n + 1) * n
    batches = " or ".join(f"{b:,}" for b in (lo, hi) if b > 0)
    parts = [f"node counts that split it: {' or '.join(f'{k:,}' for k in near)}"] if near else []
    parts.append(f"weak scaling: --batch-per-gpu {per_gpu:,} (global batch {per_gpu * n:,})")
    parts.append(f"strong scaling over these GPUs: --global-batch {batches}")
    return "try " + "; ".join(parts)


def plan_tables(spec, system, nodes: int, gpus_per_node: int, mode: str) -> Plan:
    """Plan ``spec``'s tables for ``mode`` on ``nodes`` x ``gpus_per_node`` GPUs (proposer: the best of
    :data:`CANDIDATES` by estimated critical-rank cost).  ``system``: a System or a topology spec."""
    n = nodes * gpus_per_node
    check_batch_split(spec, nodes, gpus_per_node)
    ctx = _context(spec, system, n, gpus_per_node, mode)
    full = SHARDINGS if mode == "baseline" else FUSED_SHARDINGS
    allowed = {"greedy": full, "table_wise": ("table_wise", "row_wise"),
               "row_wise": ("row_wise",) if n > 1 else ("table_wise",),
               **{name: tuple(k for k in full if k != kind) for name, kind in WITHOUT.items()}}
    best = greedy = None
    estimates = {}
    for name in CANDIDATES:
        skip = WITHOUT.get(name)
        if skip and not any(tp.sharding == skip for tp in greedy.tables):
            estimates[name] = greedy.estimated_critical_s  # the greedy plan itself (see the module docstring)
            continue
        try:
            p = _partition(ctx, allowed[name], name)
        except SpecError:
            if name == "greedy":
                raise
            continue
        estimates[name] = p.estimated_critical_s
        if name == "greedy":
            greedy = p
        if best is None or p.estimated_critical_s < best.estimated_critical_s:
            best = p
    best.candidates = estimates
    return best


def estimate_plan(spec, system, plan_per_rank: list[list[Unit]], nodes: int, gpus_per_node: int, mode: str) -> float:
    """The estimator's critical-rank cost (s) of a given placement (any units, e.g. a forced plan)."""
    ctx = _context(spec, system, nodes * gpus_per_node, gpus_per_node, mode)
    L = _Loads(ctx)
    seen: set = set()
    for r, units in enumerate(plan_per_rank):
        for u in units:
            o = _option_for(ctx, [u], u.table)
            key = (u.table, u.kind)
            holders = np.array([r])
            # uniform parts once per table; per-holder parts on this rank
            if key not in seen:
                seen.add(key)
                _apply(_uniform_part(o), np.array([], dtype=np.int64), L)
            _apply(_holder_part(o), holders, L)
    return float(L.costs().max())


def _custom_option(ctx: _Ctx, u: Unit) -> _Option:
    """The estimate of a shard count the enumerator does not produce (forced plans), ids included."""
    return _with_keys(ctx, _custom_option_comm(ctx, u), u.table)


def _custom_option_comm(ctx: _Ctx, u: Unit) -> _Option:
    """:func:`_custom_option` without the input distribution (also the enumerator's table-row-wise over several
    nodes, whose list gets the ids once)."""
    dim = u.dim or ctx.D
    x = 2.0 * ctx.b * dim * ctx.ceb
    n, g = ctx.n, ctx.g
    if u.kind == "table_row_wise":  # on several whole nodes: each node as the one-node option, at its shard's load
        s1, s2, N = 2.0 * ctx.N * ctx.b * dim * ctx.ceb * (g - 1), x, ctx.N
        return _Option(u.kind, u.shards, u.rows, dim, u.pooling,
                       ctx.pool_update_s(ctx.B, u.pooling, dim, u.rows, hier=True), s1, (N - 1) * s2, s1, 0.0, s2 * (N - 1) / N * u.shards / g,
                       storage=ctx.storage(u.rows, dim))
    return _Option(u.kind, u.shards, u.rows, dim, u.pooling,
                   ctx.pool_update_s(ctx.B, u.pooling, dim, u.rows), (g - 1) * x, (n - g) * x, 0.0, u.shards * x * (g - 1) / n,
                   u.shards * x * (n - g) / n, storage=ctx.storage(u.rows, dim))


def _memory_per_rank(per_rank, spec) -> np.ndarray:
    eb = DTYPE_BYTES[spec.embedding_dtype]
    return np.array([sum(u.rows * (u.dim or spec.dim) * eb * (1.0 + spec.optimizer_state_factor) for u in units)
                     for units in per_rank])


def _option_for(ctx: _Ctx, units: list[Unit], t: int) -> _Option:
    u = next(x for x in units if x.table == t)
    if u.kind == "grid" or (u.kind == "table_row_wise" and u.shards == ctx.g):
        return _with_keys(ctx, _hier_option(ctx, t, u.kind, u.shards // ctx.g), t)
    opts = {(o.kind, o.shards): o for o in enumerate_options(ctx, t, SHARDINGS)}
    return opts.get((u.kind, u.shards)) or _custom_option(ctx, u)
