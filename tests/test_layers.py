"""Imports point down the layers (docs/extending.md): a module never imports a package above its own, not even
inside a function, and no two modules import each other (directly or round a longer loop).  No exemptions: the
command line is its own package (``simfuse.cli``) on the top layer.  ``simfuse.costs`` never imports
``simfuse.calibrate``.

``python tests/test_layers.py [ROOT]`` prints the import map's numbers (modules, imports, cycles, upward imports).
"""

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "simfuse"
# lowest first; a package may import its own layer and anything below
LAYERS = [
    {"errors", "io_limits", "units", "names", "checks", "spec", "results", "progress", "version"},
    {"costs"},
    {"profile"},  # the runtime calibration profile (System loads and applies it)
    {"engine"},
    {"network"},
    {"collectives"},
    {"fused"},
    {"graph"},
    {"kernels"},
    {"system", "uncertainty"},
    {"workloads"},
    {"calibrate"},  # fitting and validation tools: free to run the simulator
    {"sweeps", "guard", "arguments"},
    {"api", "__init__", "__main__"},
    {"cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def modules(pkg: Path = PKG) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its ``__init__``)."""
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg.parent).with_suffix("").parts
        out[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = p
    return out


def _absolute(module: str, is_package: bool, target: str | None, level: int) -> str | None:
    if not level:
        return target
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_edges(pkg: Path = PKG) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over module-level and function-level imports of the package's
    own modules (``from a import b`` is an import of ``a.b`` when that is a module, else of ``a``)."""
    mods = modules(pkg)
    root = pkg.name
    edges: dict[str, dict[str, int]] = {}
    for m, p in mods.items():
        out = edges.setdefault(m, {})
        for node in ast.walk(ast.parse(p.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                t = _absolute(m, p.name == "__init__.py", node.module, node.level)
                if not t or t.split(".")[0] != root:
                    continue
                targets = [f"{t}.{a.name}" if f"{t}.{a.name}" in mods else t for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == root]
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != m:
                    out.setdefault(t, node.lineno)
    return edges


def layer_of(module: str) -> str:
    """The layer name of a dotted module: its top-level package or module (``simfuse`` itself: ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def upward_imports(edges: dict[str, dict[str, int]], pkg: Path = PKG) -> list[str]:
    """``file:line imports target`` for every import of a module in a higher layer (and every unlayered one)."""
    bad = []
    for m, out in sorted(edges.items()):
        top = layer_of(m)
        if top not in RANK:
            bad.append(f"{m}: package {top!r} has no layer")
            continue
        for t, line in sorted(out.items()):
            tt = layer_of(t)
            if tt in RANK and RANK[tt] > RANK[top]:
                bad.append(f"{m}:{line} imports {t} (layer {RANK[tt]} > {RANK[top]})")
    return bad


def test_imports_point_down():
    bad = upward_imports(import_edges())
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    found = cycles(import_edges())
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_every_package_has_a_layer():
    tops = {layer_of(m) for m in modules()}
    assert tops <= set(RANK), sorted(tops - set(RANK))


def test_cycle_finder_finds_a_loop_and_no_false_one():
    edges = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}, "e": {}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_costs_never_imports_calibrate():
    for m, out in import_edges().items():
        if layer_of(m) == "costs":
            assert not any(layer_of(t) == "calibrate" for t in out), m


if __name__ == "__main__":
    pkg = (Path(sys.argv[1]).resolve() / "simfuse") if len(sys.argv) > 1 else PKG
    e = import_edges(pkg)
    cyc, up = cycles(e), upward_imports(e, pkg)
    print(f"{len(e)} modules, {sum(map(len, e.values()))} imports, {len(cyc)} cycles, {len(up)} upward imports")
    for c in cyc:
        print("  cycle:", " <-> ".join(c))
    for u in up:
        print("  up:", u)
