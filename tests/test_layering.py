"""Package structure rules from ARCHITECTURE.md and STYLE.md.

- A layer imports only from layers below it (module-level imports; a function-level import of
  a higher layer is a deliberate late binding and is allowed outside kiln.runtime).
- kiln.runtime imports nothing else from kiln at all: a deployed model needs only it.
- Size is a budget: modules past 800 lines are reported; past 1500 lines is a failure.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kiln

ROOT = Path(kiln.__file__).parent

# Layer of each top-level subpackage (ARCHITECTURE.md "Layers and the rule between them").
LAYER = {
    "_lazy": 0,
    "_ffi": 1,
    "runtime": 1,
    "contrib": 1,
    "ir": 2,
    "transform": 2,
    "tir": 3,
    "te": 3,
    "arith": 3,
    "target": 4,
    "topi": 5,
    "relay": 6,
    "micro": 7,
    "jit": 7,
    "rpc": 7,
    "exec": 7,
    "autotvm": 7,
    "driver": 7,
    "testing": 7,
    "compat": 7,
}
REPORT_LINES, MAX_LINES = 800, 1500


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "__init__.py" or rel.parts[0] == "__main__.py":
            continue
        yield path, rel.parts[0].removesuffix(".py")


def _kiln_imports(tree: ast.AST, module_level_only: bool):
    body = tree.body if module_level_only else list(ast.walk(tree))
    for node in body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "kiln" and len(parts) > 1:
                yield node.lineno, parts[1]


def test_runtime_imports_nothing_else_from_kiln():
    offenders = []
    for path, package in _modules():
        if package != "runtime":
            continue
        tree = ast.parse(path.read_text())
        for lineno, target in _kiln_imports(tree, module_level_only=False):
            if target not in ("runtime", "_lazy"):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno} imports kiln.{target}")
    assert not offenders, "\n".join(offenders)


def test_layers_import_only_from_below():
    offenders = []
    for path, package in _modules():
        layer = LAYER.get(package)
        assert layer is not None, f"kiln.{package} has no layer in ARCHITECTURE.md's table"
        tree = ast.parse(path.read_text())
        for lineno, target in _kiln_imports(tree, module_level_only=True):
            if LAYER.get(target, 99) > layer:
                offenders.append(
                    f"{path.relative_to(ROOT)}:{lineno} (layer {layer}) imports kiln.{target} "
                    f"(layer {LAYER.get(target)})"
                )
    assert not offenders, "\n".join(offenders)


def test_module_size_budget():
    sizes = {}
    for path, _ in _modules():
        sizes[path.relative_to(ROOT)] = sum(1 for _ in path.open())
    per_package: dict[str, int] = {}
    for rel, n in sizes.items():
        per_package[rel.parts[0].removesuffix(".py")] = per_package.get(
            rel.parts[0].removesuffix(".py"), 0) + n
    print("\nlines per package:", dict(sorted(per_package.items())))
    large = {str(k): v for k, v in sizes.items() if v > REPORT_LINES}
    if large:
        print(f"modules past {REPORT_LINES} lines:", large)
    too_large = {k: v for k, v in large.items() if v > MAX_LINES}
    assert not too_large, f"modules past {MAX_LINES} lines; split them: {too_large}"


def test_test_module_basenames_are_unique():
    # pytest imports test files by basename (rootdir "prepend" mode): two test_x.py in
    # different folders collide at collection time.
    tests = Path(__file__).parent
    names: dict[str, list[str]] = {}
    for path in tests.rglob("*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(tests)))
    dupes = {n: p for n, p in names.items() if len(p) > 1 and n not in ("conftest.py",
                                                                         "__init__.py")}
    assert not dupes, dupes
