"""Structural equality and hashing of IR, driven by reflection (TVM's ``tvm.ir.structural_*``).

Entry points: :func:`structural_equal`, :func:`structural_hash`, :func:`assert_structural_equal`.

Two objects are structurally equal when they have the same class and their reflected fields
(:func:`~kiln.runtime.object.fields_of`) are equal, recursively. Values that are not objects
compare by value: numbers, strings, ``DataType`` (by its string), NDArrays (shape, dtype and
bytes), lists/tuples/Arrays (element-wise) and dicts/Maps (by key; object keys with a
``name_hint``, such as GlobalVar, match by name).

Classes tune the comparison with three class attributes:

``_sequal_ignore``
    field names skipped by both equality and hash (``span`` on every node; names of variables).
``_sequal_def_fields``
    fields whose values (a variable, or a list of them) *define* variables: Function ``params``,
    Let ``var``, FuncType ``type_params``. A TIR node declares e.g.
    ``_sequal_def_fields = ("loop_var",)`` on ``For`` or ``("params",)`` on ``PrimFunc``.
    Definition fields are compared before every other field of the node, in the order the
    tuple lists them (``("type_params", "params")``: type parameters are mapped before the
    parameter annotations that mention them).
``_sequal_var = True``
    marks a variable class (relay.Var, TypeVar, tir.Var). A variable met in a definition field
    is mapped to the variable at the same place on the other side, and every later use must
    respect that mapping (the same lhs variable always maps to the same rhs variable). A
    variable that was never defined is *free*: it equals only itself, unless
    ``map_free_vars=True``, which maps free variables by first occurrence too. The remaining
    non-ignored fields of a variable (e.g. its type annotation) are compared when it is mapped.

The traversal uses an explicit stack, so deep expression chains need no recursion, and pairs
already compared are remembered, so shared sub-graphs are compared once. ``structural_hash``
is consistent with ``structural_equal`` (equal objects hash equal), deterministic across
processes for closed terms (no Python string hashing) and keys the compile cache.
"""

from __future__ import annotations

import math
import zlib
from enum import Enum
from typing import Any

from kiln.runtime.object import Object

__all__ = ["structural_equal", "structural_hash", "assert_structural_equal"]

_SEQUENCE_KEYS = frozenset({"runtime.Array", "runtime.ShapeTuple"})
_MAP_KEYS = frozenset({"runtime.Map"})
_NDARRAY_KEYS = frozenset({"runtime.NDArray"})


def _kind(value: Any) -> str:
    """Classify a value: 'obj', 'var', 'seq', 'map', 'nd' or 'leaf'."""
    if isinstance(value, Object):
        key = type(value).type_key
        if key in _SEQUENCE_KEYS:
            return "seq"
        if key in _MAP_KEYS:
            return "map"
        if key in _NDARRAY_KEYS:
            return "nd"
        if key == "runtime.String":
            return "leaf"
        return "var" if getattr(type(value), "_sequal_var", False) else "obj"
    if isinstance(value, list | tuple):
        return "seq"
    if isinstance(value, dict):
        return "map"
    if value is None or isinstance(value, str | int | float):
        return "leaf"
    if hasattr(value, "numpy") and hasattr(value, "shape") and hasattr(value, "dtype"):
        return "nd"
    return "leaf"


def _leaf_value(value: Any) -> Any:
    """Normalize a leaf to a plain Python value comparable by ``==``."""
    if isinstance(value, str):
        return str(value)  # runtime.String is a str subclass; compare as plain text
    if value is None or isinstance(value, bool | int | float):
        return value.value if isinstance(value, Enum) else value
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalar
        return value.item()
    if type(value).__name__ == "DataType" or isinstance(value, Object):
        return str(value)
    return value


def _leaf_equal(lhs: Any, rhs: Any) -> bool:
    lhs, rhs = _leaf_value(lhs), _leaf_value(rhs)
    if isinstance(lhs, bool) or isinstance(rhs, bool):
        return type(lhs) is type(rhs) and lhs == rhs
    if isinstance(lhs, float) and isinstance(rhs, float) and math.isnan(lhs):
        return math.isnan(rhs)
    if isinstance(lhs, int | float) and isinstance(rhs, int | float):
        return type(lhs) is type(rhs) and lhs == rhs
    if callable(lhs) or callable(rhs):
        return lhs is rhs
    return type(lhs) is type(rhs) and lhs == rhs


def _ndarray_parts(value: Any):
    array = value.numpy()
    return array.shape, str(array.dtype), array


def _ndarray_equal(lhs: Any, rhs: Any) -> bool:
    lshape, ldtype, larr = _ndarray_parts(lhs)
    rshape, rdtype, rarr = _ndarray_parts(rhs)
    return lshape == rshape and ldtype == rdtype and larr.tobytes() == rarr.tobytes()


def _map_items(value: Any) -> list[tuple[Any, Any]]:
    """Items of a dict/Map keyed in a canonical order (strings, or names of named keys)."""
    items = list(value.items())

    def key_of(item):
        key = item[0]
        name = getattr(key, "name_hint", None)
        return (0, str(key)) if isinstance(key, str) else (1, str(name) if name else "")

    return sorted(items, key=key_of)


def _fields_to_compare(cls: type) -> list[tuple[str, bool]]:
    """(field name, is definition field) pairs of ``cls``, cached on the class."""
    cached = cls.__dict__.get("_sequal_plan")
    if cached is not None:
        return cached
    ignore = set(getattr(cls, "_sequal_ignore", ("span",))) | {"span"}
    defs = tuple(getattr(cls, "_sequal_def_fields", ()))
    # Definition fields go first, in the order the class lists them (type parameters before
    # the parameters whose annotations use them), so variables are mapped before any use.
    names = [n for n in cls._all_fields if n not in ignore]
    plan = [(n, True) for n in defs if n in names] + [(n, False) for n in names if n not in defs]
    cls._sequal_plan = plan
    return plan


class _Mismatch(Exception):
    def __init__(self, path, lhs, rhs, reason):
        super().__init__(reason)
        self.path, self.lhs, self.rhs, self.reason = path, lhs, rhs, reason


def _render_path(path) -> str:
    parts = []
    while path is not None:
        path, name = path
        parts.append(name)
    return "".join(reversed(parts))


class _EqualityChecker:
    """One structural comparison: the variable mapping and the set of pairs already seen."""

    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        self.lhs_to_rhs: dict[int, Object] = {}
        self.rhs_to_lhs: dict[int, Object] = {}
        self.seen: set[tuple[int, int]] = set()

    def run(self, lhs: Any, rhs: Any) -> None:
        stack = [(lhs, rhs, False, (None, "root"))]
        while stack:
            left, right, defining, path = stack.pop()
            kind = _kind(left)
            if kind != _kind(right):
                raise _Mismatch(path, left, right, "different kinds of value")
            if kind == "leaf":
                if not _leaf_equal(left, right):
                    raise _Mismatch(path, left, right, "different values")
            elif kind == "seq":
                if len(left) != len(right):
                    raise _Mismatch(path, left, right,
                                    f"lengths differ: {len(left)} vs {len(right)}")
                for i in range(len(left) - 1, -1, -1):
                    stack.append((left[i], right[i], defining, (path, f"[{i}]")))
            elif kind == "map":
                self._push_map(stack, left, right, path)
            elif kind == "nd":
                if not _ndarray_equal(left, right):
                    raise _Mismatch(path, left, right, "different array contents")
            else:
                self._push_object(stack, left, right, defining, path, kind == "var")

    def _push_map(self, stack, left, right, path) -> None:
        litems, ritems = _map_items(left), _map_items(right)
        if len(litems) != len(ritems):
            raise _Mismatch(path, left, right, f"sizes differ: {len(litems)} vs {len(ritems)}")
        for (lkey, lval), (rkey, rval) in reversed(list(zip(litems, ritems))):
            if isinstance(lkey, Object) and hasattr(lkey, "name_hint"):
                if getattr(rkey, "name_hint", None) != lkey.name_hint:
                    raise _Mismatch(path, lkey, rkey, "different keys")
            elif not (lkey is rkey or _leaf_equal(lkey, rkey)):
                raise _Mismatch(path, lkey, rkey, "different keys")
            stack.append((lval, rval, False, (path, f"[{lkey!r}]")))

    def _push_object(self, stack, left, right, defining, path, is_var) -> None:
        if type(left) is not type(right):
            raise _Mismatch(path, left, right,
                            f"{type(left).__name__} vs {type(right).__name__}")
        if is_var:
            mapped = self.lhs_to_rhs.get(id(left))
            if mapped is not None:
                if mapped is not right:
                    raise _Mismatch(path, left, right, "variable maps to a different variable")
                return
            if id(right) in self.rhs_to_lhs:
                raise _Mismatch(path, left, right, "variable maps to a different variable")
            if not (defining or self.map_free_vars):
                if left is not right:
                    raise _Mismatch(path, left, right, "different free variables")
                return
            self.lhs_to_rhs[id(left)] = right
            self.rhs_to_lhs[id(right)] = left
        elif left is right:
            return
        else:
            pair = (id(left), id(right))
            if pair in self.seen:
                return
            self.seen.add(pair)
        plan = _fields_to_compare(type(left))
        for name, is_def in reversed(plan):
            stack.append((getattr(left, name, None), getattr(right, name, None), is_def,
                          (path, f".{name}")))


def structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> bool:
    """Whether ``lhs`` and ``rhs`` are structurally equal (see the module docstring).

    Example
    -------
    >>> from kiln.ir.type import TensorType
    >>> structural_equal(TensorType((1, 2)), TensorType((1, 2)))
    True
    """
    try:
        _EqualityChecker(map_free_vars).run(lhs, rhs)
    except _Mismatch:
        return False
    return True


def assert_structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> None:
    """Raise ValueError naming the first mismatching path and both sides unless equal.

    Example
    -------
    >>> from kiln.ir.type import TensorType
    >>> assert_structural_equal(TensorType((3,)), TensorType((3,)))
    """
    try:
        _EqualityChecker(map_free_vars).run(lhs, rhs)
    except _Mismatch as err:
        raise ValueError(
            f"StructuralEqual check failed at {_render_path(err.path)}: {err.reason}\n"
            f"  lhs: {_clip(err.lhs)}\n  rhs: {_clip(err.rhs)}\n"
            f"lhs root:\n{_clip(lhs)}\nrhs root:\n{_clip(rhs)}"
        ) from None


def _clip(value: Any, max_lines: int = 40) -> str:
    """``repr(value)``, cut to its first lines so huge graphs keep the message readable."""
    lines = repr(value).splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
    return "\n".join(lines)


_KEY_HASHES: dict[str, int] = {}


def _str_hash(text: str) -> int:
    # zlib.crc32 rather than hash(): Python randomizes str hashes per process, and the
    # structural hash keys an on-disk cache.
    return zlib.crc32(text.encode())


def _type_hash(cls: type) -> int:
    key = cls.type_key
    value = _KEY_HASHES.get(key)
    if value is None:
        value = _KEY_HASHES[key] = _str_hash(key)
    return value


def _leaf_hash(value: Any) -> int:
    value = _leaf_value(value)
    if value is None:
        return 0x9E3779B9
    if isinstance(value, str):
        return _str_hash(value)
    if isinstance(value, bool):
        return hash((3, int(value)))  # ints only: tuples holding str hash differently per run
    if isinstance(value, int | float):
        # Python hashes -1 as -2 (and -1.0 as -2.0): the flag keeps axis=-1 and -2 apart
        return hash((1 if isinstance(value, float) else 2, value, value == -1))
    if callable(value):
        return _str_hash(getattr(value, "__qualname__", type(value).__name__))
    return _str_hash(repr(value))


_COMBINE, _COMBINE_SEQ = 1, 2


def structural_hash(node: Any, map_free_vars: bool = False) -> int:
    """A hash consistent with :func:`structural_equal` (equal values hash equal).

    Example
    -------
    >>> from kiln.ir.type import TensorType
    >>> structural_hash(TensorType((1, 2))) == structural_hash(TensorType((1, 2)))
    True
    """
    memo: dict[int, int] = {}
    var_numbers: dict[int, int] = {}
    results: list[int] = []
    stack: list[tuple[int, Any, Any]] = [(0, node, False)]
    while stack:
        action, value, extra = stack.pop()
        if action == _COMBINE:
            count = len(_fields_to_compare(type(value)))
            children = tuple(results[len(results) - count:])
            del results[len(results) - count:]
            digest = hash((_type_hash(type(value)), children))
            memo[id(value)] = digest
            results.append(digest)
            continue
        if action == _COMBINE_SEQ:
            children = tuple(results[len(results) - extra:])
            del results[len(results) - extra:]
            results.append(hash((0x5E0, children)))
            continue
        defining = extra
        kind = _kind(value)
        if kind == "leaf":
            results.append(_leaf_hash(value))
        elif kind == "seq":
            stack.append((_COMBINE_SEQ, value, len(value)))
            for item in reversed(value):
                stack.append((0, item, defining))
        elif kind == "map":
            items = _map_items(value)
            stack.append((_COMBINE_SEQ, value, 2 * len(items)))
            for key, item in reversed(items):
                stack.append((0, item, False))
                name = getattr(key, "name_hint", None) if isinstance(key, Object) else None
                stack.append((0, name if name is not None else key, False))
        elif kind == "nd":
            shape, dtype, array = _ndarray_parts(value)
            results.append(hash((shape, _str_hash(dtype), zlib.crc32(array.tobytes()))))
        elif kind == "var":
            number = var_numbers.get(id(value))
            if number is None and (defining or map_free_vars):
                number = var_numbers[id(value)] = len(var_numbers)
            tag = number if number is not None else id(value) + (1 << 62)
            results.append(hash((_type_hash(type(value)), 0x7A2, tag)))
        else:
            cached = memo.get(id(value))
            if cached is not None:
                results.append(cached)
                continue
            stack.append((_COMBINE, value, None))
            for name, is_def in reversed(_fields_to_compare(type(value))):
                stack.append((0, getattr(value, name, None), is_def))
    return results[-1]
