"""Package structure rules from ARCHITECTURE.md and STYLE.md.

- A layer imports only from layers below it. Module-level imports must; function-level imports
  of a higher layer are late bindings that only go away (a ratchet: the count may only drop).
- kiln.runtime imports nothing else from kiln at all: a deployed model needs only it.
- Private names stay private (STYLE.md 15): no ``_name`` is imported from another package, and
  the imports of ``_name`` across modules of one package may only drop.
- Size is a budget: modules past 800 lines are reported; past MAX_LINES is a failure.
"""

from __future__ import annotations

import ast
import functools
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
# issue 13: the cap fails at 1,000 lines
REPORT_LINES, MAX_LINES = 800, 1000


@functools.cache
def _parse(path: Path) -> ast.Module:
    """The syntax tree of a kiln module (parsed once for all the checks here)."""
    return ast.parse(path.read_text())


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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _private_imports():
    """(path, line, importing package, source module, name) of each ``from kiln.x import _y``
    that imports a private name from another kiln module."""
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(_parse(path)):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "kiln" and node.module != module):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield path, node.lineno, _package_of(module, path), node.module, alias.name


# Private names imported between modules of one package, as counted when the ratchet was set
# (issue 13 counted 58 in 27 files); lower it when you remove some, never raise it.
MAX_PRIVATE_IMPORTS_WITHIN_A_PACKAGE = 7

def test_no_private_name_is_imported_from_another_package():
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {source}.{name}"
                 for path, line, package, source, name in _private_imports()
                 if source.rpartition(".")[0] != package and source != package]
    assert not offenders, ("make these names public (with a docstring) or move the code:\n"
                           + "\n".join(offenders))


def _is_kiln_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_no_private_attribute_of_another_kiln_module_is_used():
    # ``from kiln.target import c_abi`` then ``c_abi._helper(...)`` is a private import too
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = _parse(path)
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] == "kiln":
                modules.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                                if _is_kiln_module(f"{node.module}.{a.name}")})
            elif isinstance(node, ast.Import):
                modules.update({a.asname: a.name for a in node.names
                                if a.asname and a.name.split(".")[0] == "kiln"})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} uses "
                                 f"{modules[node.value.id]}.{node.attr}")
    assert not offenders, "\n".join(offenders)


def test_private_imports_within_a_package_only_go_down():
    found = [f"{path.relative_to(ROOT)}:{line} {source}.{name}"
             for path, line, _, source, name in _private_imports()]
    print(f"\n{len(found)} private names imported across modules")
    assert len(found) <= MAX_PRIVATE_IMPORTS_WITHIN_A_PACKAGE, "\n".join(found)


def test_runtime_imports_nothing_else_from_kiln():
    offenders = []
    for path, package in _modules():
        if package != "runtime":
            continue
        tree = _parse(path)
        for lineno, target in _kiln_imports(tree, module_level_only=False):
            if target not in ("runtime", "_lazy"):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno} imports kiln.{target}")
    assert not offenders, "\n".join(offenders)


def test_layers_import_only_from_below():
    offenders = []
    for path, package in _modules():
        layer = LAYER.get(package)
        assert layer is not None, f"kiln.{package} has no layer in ARCHITECTURE.md's table"
        tree = _parse(path)
        for lineno, target in _kiln_imports(tree, module_level_only=True):
            if LAYER.get(target, 99) > layer:
                offenders.append(
                    f"{path.relative_to(ROOT)}:{lineno} (layer {layer}) imports kiln.{target} "
                    f"(layer {LAYER.get(target)})"
                )
    assert not offenders, "\n".join(offenders)


def _function_level_upward_imports():
    for path, package in _modules():
        layer = LAYER[package]
        tree = _parse(path)
        functions = [n for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        seen: set[int] = set()
        for func in functions:
            for lineno, target in _kiln_imports(func, module_level_only=False):
                if LAYER.get(target, 99) > layer and lineno not in seen:
                    seen.add(lineno)
                    yield f"{path.relative_to(ROOT)}:{lineno} (layer {layer}) imports kiln.{target}"


# Function-level imports of a higher layer (late bindings where a hook belongs), as counted
# when the ratchet was set; lower it when you replace one by a hook, never raise it.
MAX_FUNCTION_LEVEL_UPWARD_IMPORTS = 1


def test_function_level_upward_imports_only_go_down():
    found = list(_function_level_upward_imports())
    print(f"\n{len(found)} function-level upward imports")
    assert len(found) <= MAX_FUNCTION_LEVEL_UPWARD_IMPORTS, (
        "a lower layer imports a higher one inside a function; let the higher layer register "
        "a hook instead:\n" + "\n".join(found))


def _lazy_tables():
    """(package, its ``_LAZY`` table) for every package that loads names on first use."""
    import importlib

    from kiln import _lazy

    for init in sorted(ROOT.rglob("__init__.py")):
        if "attach(" in init.read_text():
            importlib.import_module(_module_name(init))
    yield from sorted(_lazy.TABLES.items())


def test_every_lazy_name_resolves_to_a_lower_layer():
    # A lazy table is a promise that "go to definition" cannot check: import every entry.
    import importlib

    unresolved, upward, total = [], [], 0
    for package, table in _lazy_tables():
        for name, target in table.items():
            total += 1
            module = target if isinstance(target, str) else target[0]
            if package != "kiln" and LAYER[module.split(".")[1]] > LAYER[package.split(".")[1]]:
                upward.append(f"{package}.{name} -> {module}")
            try:
                getattr(importlib.import_module(package), name)
            except (ImportError, AttributeError) as err:
                unresolved.append(f"{package}.{name}: {err}")
    print(f"\n{total} lazy names")
    assert not unresolved, "\n".join(unresolved)
    assert not upward, "lazy names must not reach a higher layer:\n" + "\n".join(upward)


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
