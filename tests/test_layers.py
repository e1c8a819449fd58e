"""Imports point down the layers (docs/extending.md): a module never imports a package above its own, not even
inside a function.  ``simfuse.costs`` never imports ``simfuse.calibrate``."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "simfuse"
# lowest first; a package may import its own layer and anything below
LAYERS = [
    {"errors", "io_limits", "units", "names", "checks", "spec", "results", "progress"},
    {"costs"},
    {"engine"},
    {"network"},
    {"collectives"},
    {"fused"},
    {"graph"},
    {"calibrate", "kernels"},
    {"system", "uncertainty"},
    {"workloads"},
    {"sweeps", "guard", "arguments"},
    {"api", "cli", "__init__", "__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _top(path: Path) -> str:
    """The layer name of a module: its top-level package; every ``cli.py`` is part of the CLI (the edge)."""
    rel = path.relative_to(PKG)
    if path.name == "cli.py" or path.name.endswith("_cli.py"):
        return "cli"
    return rel.parts[0].removesuffix(".py")


def _imported(tree: ast.AST, path: Path):
    rel_parts = path.relative_to(PKG).with_suffix("").parts
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel_parts[:-node.level]) if path.name != "__init__.py" else list(rel_parts[:-node.level])
                if path.name == "__init__.py":
                    base = list(rel_parts[:len(rel_parts) - node.level])
                parts = base + (node.module.split(".") if node.module else [])
                if parts:
                    yield parts[0], node.lineno
                elif node.names:
                    for a in node.names:
                        yield a.name, node.lineno
            elif node.module and node.module.startswith("simfuse."):
                yield node.module.split(".")[1], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("simfuse."):
                    yield a.name.split(".")[1], node.lineno


def test_imports_point_down():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        top = _top(path)
        if top not in RANK:
            bad.append(f"{path}: package {top!r} has no layer")
            continue
        for target, line in _imported(ast.parse(path.read_text()), path):
            if target in RANK and RANK[target] > RANK[top]:
                bad.append(f"{path.relative_to(PKG)}:{line} imports {target} (layer {RANK[target]} > {RANK[top]})")
    assert not bad, "\n".join(bad)


def test_costs_never_imports_calibrate():
    for path in (PKG / "costs").rglob("*.py"):
        assert "calibrate" not in {t for t, _ in _imported(ast.parse(path.read_text()), path)}, path
