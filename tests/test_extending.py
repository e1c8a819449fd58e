"""docs/extending.md, followed: a package outside simfuse adds a workload, a fabric and a fused operator through
the documented registration (one module each, imported by the package), and each runs through the public API
and the command line.  The registries are restored afterwards (the toys never leak into other tests)."""

import importlib
import sys
import textwrap

import pytest
import yaml

import simfuse
from simfuse.errors import SpecError

WORKLOAD = '''
"""A toy workload: per layer one row-parallel projection whose output is all-reduced (fused: GEMV +
AllReduce), tensor parallel over every GPU."""

from dataclasses import dataclass

from simfuse.collectives.groups import world
from simfuse.fused import make_op
from simfuse.graph import Graph
from simfuse.workloads import Workload, register_workload
from simfuse.workloads.op import add_op, symmetric_ok


@dataclass(frozen=True)
class ToySpec:
    name: str
    layers: int
    hidden: int
    kind: str = "toy_allreduce"
    source: str = "<memory>"


@register_workload("toy_allreduce")
class ToyWorkload(Workload):
    spec_type = ToySpec

    @staticmethod
    def parse(root, source):
        spec = ToySpec(name=root.string("name"), layers=root.integer("layers", 1, min_value=1, max_value=64),
                       hidden=root.integer("hidden", 4096, min_value=64, max_value=65536), source=source)
        root.reject_unknown(extra_allowed=("kind", "description"))
        return spec

    def build_graph(self, system, nodes, mode, *, gpus_per_node, execution, plan=None):
        sp, n = self.spec, nodes * gpus_per_node
        graph = Graph(nodes, gpus_per_node, repeat=sp.layers, name=sp.name)
        graph.add_group(world(n))
        op = make_op("gemv_all_reduce", {"n": sp.hidden, "k": sp.hidden, "tokens": 1, "dtype": "bf16"}, nodes,
                     gpus_per_node, sp.source)
        sym = symmetric_ok(execution.knobs, "full" if execution.sim_mode == "full" else "auto")
        for r in [0] if sym else range(n):
            add_op(graph.program(r), op, mode, execution.knobs, "world", label="proj+allreduce")
        return graph

    def estimate(self, pricing, topology, nodes, gpus_per_node, sim_mode, execution, workers):
        return self.kernel_estimate(pricing, topology, nodes, gpus_per_node, self.spec.hidden / 64.0,
                                    self.spec.layers)
'''

FABRIC = '''
"""A toy fabric: NIC to NIC, no switch tier that can congest (a non-blocking fat tree)."""

import numpy as np

from simfuse.network.fabrics import INTER, INTRA, SELF, Fabric, register_fabric


@register_fabric("toy_flat")
class ToyFlatFabric(Fabric):
    CLASS_TIER = {SELF: "self", INTRA: "nvlink", INTER: "spine"}

    def _link_families(self):
        return []

    def _inter_classes(self, src, dsts):
        return np.full(dsts.shape, INTER, dtype=np.int64)

    def _route_kinds(self, route_class):
        return ("nic",)
'''

OPERATOR = '''
"""A toy fused operator: a kernel of ``wgs_per_peer`` workgroups per rank, each pushing ``bytes_per_wg`` to
one peer in turn (an All-to-All)."""

import numpy as np

from simfuse.costs import KernelWork
from simfuse.fused.base import PushOp
from simfuse.fused.ops import register_op


@register_op
class ToyAllToAll(PushOp):
    name = "toy_all_to_all"
    collective = "all_to_all"
    defaults = {"wgs_per_peer": 4, "bytes_per_wg": 65536}

    def __init__(self, params, layout, source="<params>"):
        super().__init__(params, layout, source)
        self.per_peer, self.out = int(self.params["wgs_per_peer"]), float(self.params["bytes_per_wg"])
        self.W = self.per_peer * layout.n

    def work(self, variant):
        return KernelWork("gemm", self.W, 2.0 * 128 * 128 * 128, 3 * 128 * 128 * 2.0, "bf16", variant,
                          (("m", 128 * self.W), ("n", 128), ("k", 128)), impl="simfuse")

    def wg_destinations(self, rank):
        return np.arange(self.W, dtype=np.int64) % self.layout.n, np.full(self.W, self.out)

    def collective_size_bytes(self):
        return self.W * self.out
'''


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """``toyext``: one module per extension, imported (registered) by the package's ``__init__``."""
    from simfuse.fused import ops
    from simfuse.network.fabrics import base as fabrics
    from simfuse.spec import settings, topology, workload
    from simfuse.workloads import base as workloads

    saved = [(d, dict(d)) for d in (workloads._REGISTRY, workload._PARSERS, settings._SETTINGS,
                                     fabrics._REGISTRY, ops.OPS)]
    monkeypatch.setattr(topology, "FABRICS", topology.FABRICS)
    pkg = tmp_path / "toyext"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import toy_fabric, toy_op, toy_workload  # noqa: F401\n")
    (pkg / "toy_workload.py").write_text(textwrap.dedent(WORKLOAD))
    (pkg / "toy_fabric.py").write_text(textwrap.dedent(FABRIC))
    (pkg / "toy_op.py").write_text(textwrap.dedent(OPERATOR))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("toyext")
    for d, before in saved:
        d.clear()
        d.update(before)
    for name in [m for m in sys.modules if m == "toyext" or m.startswith("toyext.")]:
        del sys.modules[name]


def _topology(root, tmp_path, fabric: str):
    data = yaml.safe_load((root / "topologies" / "h100_nvl8_ib_ndr.yaml").read_text())
    data["name"] = f"toy_{fabric}"
    data["scale_out"]["fabric"] = fabric
    data["scale_out"]["oversubscription"] = 1.0
    data["scale_out"].pop("rails", None)
    path = tmp_path / f"{fabric}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_toy_workload_runs_through_api_and_cli(toy_package, root, tmp_path, capsys):
    model = tmp_path / "toy.yaml"
    model.write_text("name: toy\nkind: toy_allreduce\nlayers: 2\nhidden: 4096\n")
    topo = root / "topologies" / "h100_nvl8_ib_ndr.yaml"
    df = simfuse.run(model, topo, 2, uncertainty="none")
    assert list(df["mode"]) == ["baseline", "fused"] and (df["iteration_time_s"] > 0).all()
    f = df.set_index("mode")
    assert f.loc["fused", "speedup"] == pytest.approx(f.loc["baseline", "iteration_time_s"]
                                                      / f.loc["fused", "iteration_time_s"])
    one = model.with_name("toy1.yaml")
    one.write_text("name: toy\nkind: toy_allreduce\nlayers: 1\nhidden: 4096\n")
    single = simfuse.run(one, topo, 2, uncertainty="none").set_index("mode")
    for m in ("baseline", "fused"):  # identical layers back to back: twice one layer
        assert f.loc[m, "iteration_time_s"] == pytest.approx(2 * single.loc[m, "iteration_time_s"], rel=1e-9)
    from simfuse.cli import main

    out = tmp_path / "run"
    assert main(["run", "--model", str(model), "--topology", str(topo), "--nodes", "2", "--quiet",
                 "--set", "uncertainty=none", "--out", str(out)]) == 0
    assert (out / "summary.csv").exists()
    # another kind's settings are refused, as for the built-in kinds
    with pytest.raises(SpecError, match="scaling modes apply to DLRM workloads, not toy_allreduce"):
        simfuse.run(model, topo, 2, global_batch=64)


def test_toy_fabric_runs_a_collective(toy_package, root, tmp_path):
    """Without a switch tier the toy fabric is a non-blocking fat tree: the same collective times."""
    toy = simfuse.collective(_topology(root, tmp_path, "toy_flat"), 2, "all_to_all", 2**22)
    tree = simfuse.collective(_topology(root, tmp_path, "fat_tree"), 2, "all_to_all", 2**22)
    assert toy.loc[0, "time_s"] > 0
    assert toy.loc[0, "time_s"] == pytest.approx(tree.loc[0, "time_s"], rel=1e-12)


def test_toy_operator_runs_symmetric_and_full(toy_package, root):
    """``simfuse op`` runs the registered operator; its symmetric fast path equals full simulation."""
    topo = root / "topologies" / "h100_nvl8_ib_ndr.yaml"
    sym = simfuse.op("toy_all_to_all", topo, nodes=2, mode="symmetric")
    full = simfuse.op("toy_all_to_all", topo, nodes=2, mode="full")
    assert sym.loc[0, "speedup"] == pytest.approx(sym.loc[0, "baseline_time_s"] / sym.loc[0, "fused_time_s"])
    for col in ("baseline_time_s", "fused_time_s"):
        assert sym.loc[0, col] == pytest.approx(full.loc[0, col], rel=1e-9)
