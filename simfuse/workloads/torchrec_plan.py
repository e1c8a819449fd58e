"""TorchRec sharding plans as simfuse forced plans (``simfuse run --plan FILE``), without importing torchrec.

Three inputs, one result (rows ``table``, ``sharding``, ``ranks`` for :func:`simfuse.workloads.plan_file.load_plan`):

* **The text TorchRec prints** for a ``ShardingPlan`` (``print(plan)``): per module a line ``module: <path>``,
  then a parameter table with the columns ``param | sharding type | compute kernel | ranks`` (``ranks`` a Python
  list or ``None``) and a shard table ``param | shard offsets | shard sizes | placement`` (``[row, col]``
  offsets and sizes, placement ``rank:<r>/<device>``).  Columns are separated by `` | ``; the line under the
  header is dashes.  ``print(module_plan)`` of one ``EmbeddingModuleShardingPlan`` (no ``module:`` line) works
  too.  Other lines (log text around the paste) are ignored.
* **JSON**: ``{table: {"sharding_type", "ranks", "shards"}}``, optionally grouped by module
  ``{module: {table: {...}}}`` or wrapped ``{"plan": {module: {table: {...}}}}`` (the layout of TorchRec's
  ``ShardingPlan._serialize()``).  A shard is ``{"offsets"|"shard_offsets": [r, c], "sizes"|"shard_sizes":
  [rows, cols], "rank": r | "placement": "rank:r/cuda:r"}``; ``"sharding_spec"`` is accepted for ``"shards"``
  (a list, or ``{"shards": [...]}``).  An optional top-level ``"world_size"`` is checked against the run.
  :func:`dump_json` writes this form from a ``ShardingPlan`` object.
* **A ShardingPlan object** (duck-typed: ``.plan[module][param]`` with ``.sharding_type``, ``.ranks`` and
  ``.sharding_spec.shards[i].shard_offsets / .shard_sizes / .placement``), given to ``load_plan`` in Python.

**Tables.**  The model spec's tables are numbered (t0, t1 ...): a TorchRec parameter name must end in the
table's index (``t3``, ``3``, ``t_cat_3``, ``table_3``); every table exactly once over all modules.

**Sharding types** (TorchRec's ``ShardingType`` values) onto :data:`~simfuse.workloads.planner.SHARDINGS`:

* ``table_wise`` -> ``table_wise`` on its rank;
* ``row_wise`` -> ``row_wise`` over the shards' ranks in row order (TorchRec spans every rank: the count must be
  the run's GPU count);
* ``column_wise`` and ``table_column_wise`` -> ``column_wise`` over the shards' ranks in column order (equal
  column widths, one shard per rank: what simfuse models; table-column-wise differs only in keeping the shards on
  one host);
* ``table_row_wise`` -> ``table_row_wise`` (the shards must be the ranks of one node: the run's GPUs per node);
* ``grid_shard`` -> ``grid``: ``k`` column blocks of equal width, each split into row shards over the ``g`` ranks of
  its own node (TorchRec's layout: ``ranks`` and shards column block by column block, the node's ranks in row
  order inside a block); simfuse's ranks are in that order (column block ``i`` on the ``i``-th run of ``g``
  ranks), whatever order the shards are listed in.  ``k`` distinct nodes, even row shards;
* ``data_parallel`` -> ``data_parallel`` (every rank);
* anything else: a SpecError naming the supported types.

**Checks** (SpecError naming the file and the field ``<module>/<param>``, or the text line): unknown tables, a
rank out of range, a plan for another GPU count (``world_size``, the ranks of row-wise / data-parallel tables),
shard layouts that do not cover the table exactly (rows and columns of the model spec; contiguous, no overlap),
ranks that disagree with the shard placements.  ``compute kernel`` is not used (simfuse keeps tables in HBM).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ..errors import SpecError
from .torchrec_entry import Entry, Shard, _int_list, _placement_rank

#: TorchRec ShardingType value -> simfuse sharding
TYPE_MAP = {"table_wise": "table_wise", "row_wise": "row_wise", "column_wise": "column_wise",
            "table_column_wise": "column_wise", "table_row_wise": "table_row_wise", "grid_shard": "grid",
            "data_parallel": "data_parallel"}
#: TorchRec sharding types known but not modelled (value: why); none since grid_shard maps to ``grid``
UNSUPPORTED: dict[str, str] = {}
PARAM_HEADER = ("param", "sharding type", "compute kernel", "ranks")
SHARD_HEADER = ("param", "shard offsets", "shard sizes", "placement")
MAX_PLAN_BYTES = 64 << 20
_INDEX_RE = re.compile(r"([0-9]+)$")
_INT_LIST_RE = re.compile(r"\[\s*(-?[0-9]{1,18}(?:\s*,\s*-?[0-9]{1,18})*)?\s*\]")
_SEP_RE = re.compile(r"^[\s|:+-]*-[\s|:+-]*$")


# ------------------------------------------------------------------------------------------------- detection
def sniff(path) -> str:
    """``"json"``, ``"text"`` (TorchRec's printed plan tables), ``"repr"`` (the plan's Python repr, with
    ``ParameterSharding(...)``) or ``"csv"`` (simfuse's plan.csv), from the content."""
    from ..io_limits import GZIP_ERRORS, open_bounded

    with open_bounded(path, "plan", what="plan file") as f:  # a regular file (never a FIFO or /dev/zero)
        try:
            head = f.read(1 << 16).decode("utf-8", errors="replace")
        except GZIP_ERRORS as exc:
            raise SpecError(str(path), "", f"corrupt or truncated gzip stream ({exc})") from None
        except OSError as exc:
            raise SpecError(str(path), "", f"cannot read the plan: {exc.strerror or exc}") from None
    s = head.lstrip()
    if "ParameterSharding(" in head:
        return "repr"  # the plan's Python repr (what print(plan) shows in older TorchRec and its tutorials)
    if s.startswith("{") or (Path(path).suffix.lower() == ".json" and s):
        return "json"  # a .json file is JSON even when cut off (read_json then says where it breaks)
    for line in head.splitlines():
        if line.startswith("module: ") or _cells(line) == list(PARAM_HEADER):
            return "text"
    return "csv"


def is_sharding_plan(obj) -> bool:
    """A TorchRec ``ShardingPlan`` (or anything shaped like one: ``.plan`` a mapping of mappings)."""
    return not isinstance(obj, (str, Path)) and isinstance(getattr(obj, "plan", None), dict)


# ------------------------------------------------------------------------------------------------- readers
def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def _literal(text: str, src: str, fld: str):
    m = _INT_LIST_RE.fullmatch(text.strip())
    if m:  # the common case, without ast (a plan can have 10**5 shard lines)
        return [int(x) for x in m.group(1).split(",")] if m.group(1) else []
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise SpecError(src, fld, f"cannot read {text[:40]!r} (expected a list such as [0, 1])") from None


def read_text(path) -> list[Entry]:
    """The entries of TorchRec's printed ``ShardingPlan`` (see the module docstring)."""
    from ..io_limits import read_text as _read_text

    src = str(path)
    text = _read_text(path, "plan", what="plan file", errors="replace")
    entries: dict[tuple[str, str], Entry] = {}
    module, table, lines = "", None, text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("module: "):
            module, table = line[len("module: "):].strip(), None
            continue
        if not line.strip() or _SEP_RE.match(line):
            if not line.strip():
                table = None
            continue
        cells = _cells(line)
        if cells == list(PARAM_HEADER) or cells == list(SHARD_HEADER):
            table = "param" if cells == list(PARAM_HEADER) else "shard"
            continue
        if table is None or "|" not in line:
            continue  # text around the plan
        fld = f"line {n}"
        if len(cells) != 4:
            raise SpecError(src, fld, f"expected 4 columns separated by ' | ', got {len(cells)}")
        param = cells[0]
        if table == "param":
            if (module, param) in entries:
                raise SpecError(src, fld, f"parameter {param[:40]!r} of module {module!r} is listed twice")
            ranks = None if cells[3] in ("None", "") else _int_list(_literal(cells[3], src, fld), src, fld)
            entries[(module, param)] = Entry(module, param, cells[1], ranks, None, f"line {n} ({param[:40]})")
        else:
            e = entries.get((module, param))
            if e is None:
                raise SpecError(src, fld, f"shard of {param[:40]!r}, which the parameter table of module "
                                          f"{module!r} does not list")
            off = _int_list(_literal(cells[1], src, fld), src, fld, 2)
            size = _int_list(_literal(cells[2], src, fld), src, fld, 2)
            if e.shards is None:
                e.shards = []
            e.shards.append(Shard((off[0], off[1]), (size[0], size[1]), _placement_rank(cells[3], src, fld)))
    if not entries:
        raise SpecError(src, "", "no TorchRec parameter table (a header 'param | sharding type | compute kernel "
                                 "| ranks') found")
    return list(entries.values())


def _shards_of(v, src: str, fld: str) -> list[Shard] | None:
    if v is None:
        return None
    if isinstance(v, dict):
        v = v.get("shards")
        if v is None:
            return None
    if not isinstance(v, list):
        raise SpecError(src, fld, "expected a list of shards")
    out = []
    for i, s in enumerate(v):
        f = f"{fld}[{i}]"
        if not isinstance(s, dict):
            raise SpecError(src, f, "expected an object with offsets, sizes and rank (or placement)")
        off = s.get("offsets", s.get("shard_offsets"))
        size = s.get("sizes", s.get("shard_sizes"))
        if off is None or size is None:
            raise SpecError(src, f, "needs offsets (or shard_offsets) and sizes (or shard_sizes)")
        if "rank" in s:
            rank = _placement_rank(s["rank"], src, f + ".rank")
        elif "placement" in s:
            rank = _placement_rank(s["placement"], src, f + ".placement")
        else:
            raise SpecError(src, f, "needs rank (or placement)")
        o = _int_list(off, src, f + ".offsets", 2)
        z = _int_list(size, src, f + ".sizes", 2)
        out.append(Shard((o[0], o[1]), (z[0], z[1]), rank))
    return out


def read_json(path) -> tuple[list[Entry], int | None]:
    """The entries of the JSON form and its optional ``world_size``."""
    src = str(path)
    from ..io_limits import read_text as _read_text

    text = _read_text(path, "plan", what="plan file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(src, f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting deeper than the stack
        raise SpecError(src, "", f"malformed JSON: {str(exc)[:120]}") from None
    if not isinstance(data, dict):
        raise SpecError(src, "", "expected a JSON object of tables (or of modules of tables)")
    world = data.get("world_size")
    if world is not None and (isinstance(world, bool) or not isinstance(world, int) or world < 1):
        raise SpecError(src, "world_size", f"expected a positive integer, got {world!r}")
    if isinstance(data.get("plan"), dict) and all(isinstance(v, dict) for v in data["plan"].values()):
        data = data["plan"]
    items = {k: v for k, v in data.items() if k != "world_size"}
    entries = []

    def one(module: str, param: str, v) -> Entry:
        fld = f"{module}/{param}" if module else param
        if not isinstance(v, dict):
            raise SpecError(src, fld, "expected an object with sharding_type, ranks and shards")
        st = v.get("sharding_type")
        if not isinstance(st, str):
            raise SpecError(src, f"{fld}.sharding_type", f"expected a string, got {st!r}")
        ranks = v.get("ranks")
        ranks = None if ranks is None else _int_list(ranks, src, f"{fld}.ranks")
        key = "shards" if "shards" in v else "sharding_spec"
        return Entry(module, param, st, ranks, _shards_of(v.get(key), src, f"{fld}.{key}"), fld)

    for k, v in items.items():
        if isinstance(v, dict) and "sharding_type" not in v and all(isinstance(x, dict) for x in v.values()):
            entries += [one(k, p, x) for p, x in v.items()]
        else:
            entries.append(one("", k, v))
    if not entries:
        raise SpecError(src, "", "the plan lists no tables")
    return entries, world


def read_object(plan) -> list[Entry]:
    """The entries of a (duck-typed) TorchRec ``ShardingPlan``."""
    src = "<ShardingPlan>"
    entries = []
    for module, mp in plan.plan.items():
        for param, ps in dict(mp).items():
            fld = f"{module}/{param}"
            st = getattr(ps, "sharding_type", None)
            st = getattr(st, "value", st)  # a ShardingType enum or its value
            if not isinstance(st, str):
                raise SpecError(src, f"{fld}.sharding_type", f"expected a string, got {st!r}")
            ranks = getattr(ps, "ranks", None)
            ranks = None if ranks is None else _int_list(list(ranks), src, f"{fld}.ranks")
            spec = getattr(ps, "sharding_spec", None)
            shards = None
            if spec is not None and getattr(spec, "shards", None) is not None:
                shards = [Shard(tuple(_int_list(list(s.shard_offsets), src, f"{fld}.shard_offsets", 2)),
                                tuple(_int_list(list(s.shard_sizes), src, f"{fld}.shard_sizes", 2)),
                                _placement_rank(s.placement, src, f"{fld}.placement")) for s in spec.shards]
            entries.append(Entry(str(module), str(param), st, ranks, shards, fld))
    if not entries:
        raise SpecError(src, "plan", "the plan lists no tables")
    return entries


def dump_json(plan, path) -> Path:
    """Write a (duck-typed) TorchRec ``ShardingPlan`` in the JSON form this module reads."""
    out = {}
    for e in read_object(plan):
        d: dict = {"sharding_type": e.sharding_type, "ranks": e.ranks}
        if e.shards is not None:
            d["shards"] = [{"offsets": list(s.offsets), "sizes": list(s.sizes), "rank": s.rank} for s in e.shards]
        out.setdefault(e.module, {})[e.param] = d
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p


# ------------------------------------------------------------------------------------------------- mapping
def table_index(param: str, n_tables: int) -> int | None:
    """The model-spec table a TorchRec parameter name stands for: its trailing integer (t3, t_cat_3, 3)."""
    m = _INDEX_RE.search(param)
    if not m:
        return None
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 9:  # far beyond any table count (and int() of 5,000 digits raises)
        return None
    t = int(digits)
    return t if t < n_tables else None


def _ordered(shards: list[Shard], axis: int) -> list[Shard]:
    return sorted(shards, key=lambda s: (s.offsets[axis], s.rank))


def _check_cover(e: Entry, src: str, rows: int, dim: int, kind: str) -> list[int]:
    """The shards' ranks in layout order, after checking that they tile the rows x dim table exactly."""
    sh = e.shards or []
    fld = f"{e.where} shards"
    for s in sh:
        if min(s.sizes) < 0 or min(s.offsets) < 0:
            raise SpecError(src, fld, f"negative offset or size {list(s.offsets)} {list(s.sizes)}")
    if kind in ("row_wise", "table_row_wise", "table_wise"):
        axis, full, total = 0, dim, rows
    else:
        axis, full, total = 1, rows, dim
    other = 1 - axis
    pos = 0
    for s in _ordered(sh, axis):
        if s.offsets[other] != 0 or s.sizes[other] != full:
            raise SpecError(src, fld, f"a {e.sharding_type} shard must span all {full} "
                                      f"{'columns' if other else 'rows'} of the table: offsets "
                                      f"{list(s.offsets)}, sizes {list(s.sizes)}")
        if s.offsets[axis] != pos:
            what = "overlap" if s.offsets[axis] < pos else "gap"
            raise SpecError(src, fld, f"shards do not cover the table: {what} at "
                                      f"{'row' if axis == 0 else 'column'} {min(pos, s.offsets[axis])}")
        pos += s.sizes[axis]
    if pos != total:
        raise SpecError(src, fld, f"shards cover {pos} {'rows' if axis == 0 else 'columns'}; the model spec's "
                                  f"table has {total}")
    return [s.rank for s in _ordered(sh, axis)]


def _check_grid_cover(e: Entry, src: str, rows: int, dim: int, g: int) -> list[int]:
    """A grid shard's ranks in simfuse's order (column block by column block, rows in order inside one), after
    checking that its shards tile the rows x dim table as a grid: column blocks of one width covering the columns,
    each block's shards spanning exactly its columns and covering the rows, ``g`` row shards a block (one node's
    GPUs: the caller checks the ranks of each run of ``g``)."""
    sh = e.shards or []
    fld = f"{e.where} shards"
    for s in sh:
        if min(s.sizes) < 0 or min(s.offsets) < 0:
            raise SpecError(src, fld, f"negative offset or size {list(s.offsets)} {list(s.sizes)}")
    blocks: dict[int, list[Shard]] = {}
    for s in sh:
        blocks.setdefault(s.offsets[1], []).append(s)
    pos, order = 0, []
    for c0 in sorted(blocks):
        if c0 != pos:
            what = "overlap" if c0 < pos else "gap"
            raise SpecError(src, fld, f"column blocks do not cover the table: {what} at column {min(pos, c0)}")
        widths = {s.sizes[1] for s in blocks[c0]}
        if len(widths) != 1:
            raise SpecError(src, fld, f"column block at column {c0} has shards of widths {sorted(widths)}: a grid "
                                      "block's row shards span the same columns")
        width = widths.pop()
        r = 0
        for s in _ordered(blocks[c0], 0):
            if s.offsets[0] != r:
                what = "overlap" if s.offsets[0] < r else "gap"
                raise SpecError(src, fld, f"column block at column {c0}: row shards {what} at row "
                                          f"{min(r, s.offsets[0])}")
            r += s.sizes[0]
        if r != rows:
            raise SpecError(src, fld, f"column block at column {c0} covers {r} rows; the model spec's table has "
                                      f"{rows}")
        order += [s.rank for s in _ordered(blocks[c0], 0)]
        pos += width
    if pos != dim:
        raise SpecError(src, fld, f"shards cover {pos} columns; the model spec's table has {dim}")
    widths = {s.sizes[1] for s in sh}
    if len(widths) != 1:
        raise SpecError(src, fld, f"column blocks of unequal widths {sorted(widths)}: simfuse models equal column "
                                  "shards")
    counts = sorted({len(b) for b in blocks.values()})
    if counts != [g]:
        raise SpecError(src, fld, f"grid_shard with {len(blocks)} column blocks of {counts} row shards: simfuse "
                                  f"needs each column block row-sharded over the {g} GPUs of one node")
    return order


def _in_context(check, args: tuple, e: Entry, t: int, rows: int, dim: int):
    """``check(*args)``, its refusal saying which model table the entry was read as: a plan made for another model
    maps its names by their trailing index and then fails on the shapes."""
    try:
        return check(*args)
    except SpecError as exc:
        raise SpecError(exc.source, exc.field, f"{exc.message} ({e.param[:40]!r} read as the model spec's t{t}, "
                                               f"{rows:,} rows x {dim}: is the plan for this model?)") from None


def to_rows(entries: list[Entry], src: str, spec, n_ranks: int, gpus_per_node: int,
            world_size: int | None = None) -> list[tuple[str, str, tuple[int, ...], str]]:
    """(table ``t<i>``, simfuse sharding, ranks, where) per entry, after the checks of the module docstring."""
    T, D, n, g = len(spec.tables), spec.dim, n_ranks, gpus_per_node
    if world_size is not None and world_size != n:
        raise SpecError(src, "world_size", f"the plan is for {world_size} ranks; the run has {n} GPUs "
                                           f"(--nodes x {g} GPUs per node)")
    seen: dict[int, str] = {}
    out = []
    for e in entries:
        fld = e.where
        t = table_index(e.param, T)
        if t is None:
            raise SpecError(src, fld, f"unknown table {e.param[:40]!r}: the model spec has tables t0..t{T - 1} "
                                      f"and a TorchRec name must end in the table's index (t_cat_3, table_3)")
        if t in seen:
            raise SpecError(src, fld, f"table t{t} is also given by {seen[t]}")
        seen[t] = fld
        st = e.sharding_type.strip().lower()
        if st in UNSUPPORTED:
            raise SpecError(src, f"{fld} sharding type", f"{st} is not supported: {UNSUPPORTED[st]}")
        kind = TYPE_MAP.get(st)
        if kind is None:
            raise SpecError(src, f"{fld} sharding type", f"unknown TorchRec sharding type {st[:40]!r}; supported: "
                                                         f"{', '.join(TYPE_MAP)}")
        rows = spec.tables[t].rows
        if kind == "data_parallel":
            ranks = list(range(n)) if e.ranks is None else list(e.ranks)
            if sorted(ranks) != list(range(n)):
                raise SpecError(src, f"{fld} ranks", f"data_parallel replicates the table on every rank: the plan "
                                                     f"lists {len(ranks)} ranks, the run has {n} GPUs")
        elif e.shards and kind == "grid":
            ranks = _in_context(_check_grid_cover, (e, src, rows, D, g), e, t, rows, D)
            if e.ranks is not None and sorted(e.ranks) != sorted(ranks):
                raise SpecError(src, f"{fld} ranks", f"ranks {e.ranks[:8]} disagree with the shard placements "
                                                     f"{ranks[:8]}")
        elif e.shards:
            ranks = _in_context(_check_cover, (e, src, rows, D, kind), e, t, rows, D)
            if e.ranks is not None and sorted(e.ranks) != sorted(ranks):
                raise SpecError(src, f"{fld} ranks", f"ranks {e.ranks[:8]} disagree with the shard placements "
                                                     f"{ranks[:8]}")
        elif e.ranks:
            ranks = list(e.ranks)
        else:
            raise SpecError(src, fld, f"{st} needs ranks or shards")
        bad = [r for r in ranks if not 0 <= r < n]
        if bad:
            raise SpecError(src, f"{fld} ranks", f"rank {bad[0]} is out of range 0..{n - 1} (the run has {n} GPUs: "
                                                 f"--nodes x {g} GPUs per node)")
        if len(set(ranks)) != len(ranks) and kind != "data_parallel":
            raise SpecError(src, f"{fld} ranks", f"two {st} shards on one rank ({ranks[:8]}...): simfuse models one "
                                                 "shard per rank")
        k = len(ranks)
        if kind == "table_wise" and k != 1:
            raise SpecError(src, f"{fld} ranks", f"table_wise needs exactly one rank, got {k}")
        if kind == "row_wise" and k != n:
            raise SpecError(src, f"{fld} ranks", f"row_wise over {k} ranks: TorchRec shards rows over every rank, "
                                                 f"so the plan is for {k} GPUs; the run has {n}")
        if kind == "table_row_wise" and (k != g or len({r // g for r in ranks}) != 1):
            raise SpecError(src, f"{fld} ranks", f"table_row_wise over {k} ranks {ranks[:8]}: simfuse needs the "
                                                 f"{g} ranks of one node (the run's GPUs per node)")
        if kind == "grid":
            blocks, rem = divmod(k, g)
            runs = [ranks[i * g:(i + 1) * g] for i in range(blocks)]
            if rem or not blocks or any(len({r // g for r in run}) != 1 for run in runs):
                raise SpecError(src, f"{fld} ranks", f"grid_shard over ranks {ranks[:8]}: simfuse needs each column "
                                                     f"block on the {g} ranks of one node (the run's GPUs per node)")
            # (distinct nodes: the g ranks of a block are all of its node's, and no rank holds two shards)
            if D % blocks:
                raise SpecError(src, f"{fld} ranks", f"grid_shard over {blocks} nodes: dim {D} is not divisible by "
                                                     f"{blocks}")
        if kind == "column_wise" and e.shards:
            widths = {s.sizes[1] for s in e.shards}
            if len(widths) != 1:
                raise SpecError(src, f"{fld} shards", f"column shards of unequal widths {sorted(widths)}: simfuse "
                                                      "models equal column shards")
        if kind in ("row_wise", "table_row_wise", "grid") and e.shards:
            block = -(-rows // (g if kind == "grid" else k))
            big = [s.sizes[0] for s in e.shards if s.sizes[0] > block]
            if big:
                raise SpecError(src, f"{fld} shards", f"a row shard of {big[0]} rows is above the even split "
                                                      f"ceil({rows} / {g if kind == 'grid' else k}) = {block}: "
                                                      "simfuse models even row shards")
        out.append((f"t{t}", kind, tuple(ranks), fld))
    missing = [t for t in range(T) if t not in seen]
    if missing:
        raise SpecError(src, "", f"no entry for table t{missing[0]} (the model spec has {T} tables; every table "
                                 "needs one)")
    return out


def plan_rows(path_or_plan, spec, n_ranks: int, gpus_per_node: int):
    """``(source, rows)`` of a TorchRec plan (file in either form, or a ShardingPlan object); ``None`` for a
    simfuse plan.csv (the caller reads it)."""
    if is_sharding_plan(path_or_plan):
        return "<ShardingPlan>", to_rows(read_object(path_or_plan), "<ShardingPlan>", spec, n_ranks, gpus_per_node)
    src = str(path_or_plan)
    kind = sniff(path_or_plan)
    if kind == "csv":
        return None
    if kind == "json":
        entries, world = read_json(path_or_plan)
    elif kind == "repr":
        from .torchrec_repr import read_repr

        entries, world = read_repr(path_or_plan), None
    else:
        entries, world = read_text(path_or_plan), None
    return src, to_rows(entries, src, spec, n_ranks, gpus_per_node, world)


__all__ = ["Entry", "Shard", "TYPE_MAP", "dump_json", "is_sharding_plan", "plan_rows", "read_json",
           "read_object", "read_text", "sniff", "table_index", "to_rows"]
