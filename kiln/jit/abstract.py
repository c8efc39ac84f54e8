"""Abstract values: what inference knows about a runtime value (Myia's ``myia.abstract``).

``Scalar`` (a Python or NumPy scalar: dtype and maybe its value), ``Array`` (dtype and static
shape), ``Tuple``, ``Func`` (the set of callables a value may be), ``Env`` (the keyed
sensitivities grad gives closures), ``NoneT``; ``BOTTOM`` is "not known yet" while a recursive
function's result is being found.

Entry points: :func:`abstract_of` (a Python value's type), :func:`join`, :func:`broaden`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.jit.errors import JitError

ANY = object()  # an unknown value


class Abstract:
    """Base of abstract values; instances are hashable and compared structurally."""

    __slots__ = ()

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))


class Scalar(Abstract):
    """A scalar of ``dtype`` (``int64``/``float64``/``bool`` for Python ones); maybe a value."""

    __slots__ = ("dtype", "value")

    def __init__(self, dtype: str, value: Any = ANY):
        self.dtype, self.value = dtype, value

    def _key(self) -> tuple:
        return (self.dtype, None if self.value is ANY else ("v", self.value))

    def __repr__(self) -> str:
        v = "" if self.value is ANY else f"={self.value!r}"
        return f"{self.dtype}{v}"


class Array(Abstract):
    """An ndarray of ``dtype`` and static ``shape``."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: str, shape: tuple):
        self.dtype, self.shape = dtype, tuple(int(d) for d in shape)

    def _key(self) -> tuple:
        return (self.dtype, self.shape)

    def __repr__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


class Tuple(Abstract):
    """A tuple whose elements have the given abstract values."""

    __slots__ = ("elements",)

    def __init__(self, elements):
        self.elements = tuple(elements)

    def _key(self) -> tuple:
        return self.elements

    def __repr__(self) -> str:
        return "(" + ", ".join(map(repr, self.elements)) + ("," if len(self.elements) == 1
                                                             else "") + ")"


class Func(Abstract):
    """A function value: one of ``options`` (GraphFn, PrimFn or PartialFn records)."""

    __slots__ = ("options",)

    def __init__(self, options):
        self.options = frozenset(options)

    def _key(self) -> tuple:
        return (self.options,)

    def __repr__(self) -> str:
        return "fn{" + ", ".join(sorted(map(repr, self.options))) + "}"


class Env(Abstract):
    """The sensitivities of a closure's free variables, keyed by node (grad's environment)."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "env"


class NoneT(Abstract):
    """The value ``None``."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "None"


class Bottom(Abstract):
    """No value known yet (a recursive call whose result is still being inferred)."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "⊥"


BOTTOM = Bottom()


class GraphFn:
    """A graph closed over the inference context of its parent (None at top level);
    ``origin`` is the constant node it came from, so specialize can tell uses apart."""

    __slots__ = ("graph", "parent", "origin")

    def __init__(self, graph, parent, origin=None):
        self.graph, self.parent, self.origin = graph, parent, origin

    def __eq__(self, other):
        return (isinstance(other, GraphFn) and self.graph is other.graph
                and self.parent is other.parent and self.origin is other.origin)

    def __hash__(self):
        return hash((id(self.graph), id(self.parent), id(self.origin)))

    def __repr__(self):
        return repr(self.graph)


class PrimFn:
    """A primitive used as a value."""

    __slots__ = ("prim",)

    def __init__(self, prim):
        self.prim = prim

    def __eq__(self, other):
        return isinstance(other, PrimFn) and self.prim is other.prim

    def __hash__(self):
        return hash(id(self.prim))

    def __repr__(self):
        return self.prim.name


class PartialFn:
    """``partial(fn, *args)``: ``fn`` (a GraphFn/PrimFn) with leading arguments bound."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args):
        self.fn, self.args = fn, tuple(args)

    def __eq__(self, other):
        return isinstance(other, PartialFn) and self.fn == other.fn and self.args == other.args

    def __hash__(self):
        return hash((self.fn, self.args))

    def __repr__(self):
        return f"partial({self.fn!r}, {', '.join(map(repr, self.args))})"


_PY_SCALARS = {bool: "bool", int: "int64", float: "float64"}


def abstract_of(value: Any, where: str = "argument") -> Abstract:
    """The abstract value inference starts from for a call argument ``value``."""
    if isinstance(value, (bool, np.bool_)):
        return Scalar("bool")
    if type(value) in _PY_SCALARS:
        return Scalar(_PY_SCALARS[type(value)])
    if isinstance(value, np.generic):
        return Scalar(str(value.dtype))
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise JitError(f"{where}: arrays of dtype {value.dtype} are not supported")
        return Array(str(value.dtype), value.shape)
    if isinstance(value, tuple):
        return Tuple(abstract_of(v, where) for v in value)
    if isinstance(value, list):
        return Tuple(abstract_of(v, where) for v in value)
    if value is None:
        return NoneT()
    if hasattr(value, "numpy") and hasattr(value, "shape"):
        return abstract_of(value.numpy(), where)
    raise JitError(f"{where}: values of type {type(value).__name__} are not supported "
                   "(use NumPy arrays, Python scalars or tuples of them)")


def constant_abstract(value: Any) -> Abstract:
    """The abstract value of a literal in the program (its value is kept)."""
    if isinstance(value, (bool, int, float)) or isinstance(value, np.generic):
        a = abstract_of(value)
        return Scalar(a.dtype, value)
    if isinstance(value, str):
        return Scalar("str", value)
    if isinstance(value, dict) and not value:
        return Env()  # the empty environment of grad
    if isinstance(value, slice) or (isinstance(value, tuple)
                                    and any(isinstance(v, slice) for v in value)):
        return Scalar("index", value)
    if isinstance(value, tuple):
        return Tuple(constant_abstract(v) for v in value)
    if value is None:
        return NoneT()
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value,
                                                                              np.generic)):
        return Scalar("dtype", np.dtype(value).name)
    return abstract_of(value)


def broaden(a: Abstract) -> Abstract:
    """Forget known values (arguments of calls are inferred without them, as in Myia)."""
    if isinstance(a, Scalar) and a.value is not ANY and a.dtype not in ("str", "dtype",
                                                                           "index"):
        return Scalar(a.dtype)
    if isinstance(a, Tuple):
        return Tuple(broaden(e) for e in a.elements)
    return a


_RANK = {"bool": 0, "int64": 1, "float64": 2}


def join(a: Abstract, b: Abstract, what: str = "value") -> Abstract:
    """The least abstract value covering both (branches of an if, loop phis)."""
    if a is BOTTOM or a == b:
        return b if a is BOTTOM else a
    if b is BOTTOM:
        return a
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        if a.dtype == b.dtype:
            return Scalar(a.dtype)
        if a.dtype in _RANK and b.dtype in _RANK:
            # int and float mixed across branches/iterations: Python would keep either; the
            # compiled program uses the wider type, as NumPy promotion does.
            return Scalar(a.dtype if _RANK[a.dtype] > _RANK[b.dtype] else b.dtype)
        if is_tensor(a) and is_tensor(b):
            return Scalar(str(np.result_type(a.dtype, b.dtype)))
    if {type(a), type(b)} == {Scalar, Array} and is_tensor(a) and is_tensor(b):
        arr, sc = (a, b) if isinstance(a, Array) else (b, a)
        if arr.shape == ():  # a Python scalar meeting a 0-d array: NumPy's weak promotion
            py = {"bool": True, "int64": 1, "float64": 1.0}.get(sc.dtype)
            other = py if py is not None else np.zeros((), sc.dtype)
            return Array(str(np.result_type(np.zeros((), arr.dtype), other)), ())
    if isinstance(a, Tuple) and isinstance(b, Tuple) and len(a.elements) == len(b.elements):
        return Tuple(join(x, y, what) for x, y in zip(a.elements, b.elements))
    if isinstance(a, Func) and isinstance(b, Func):
        return Func(a.options | b.options)
    if isinstance(a, Env) and isinstance(b, Env):
        return a
    raise JitError(f"{what} has type {a} on one path and {b} on another; kiln.jit needs one "
                   "type per variable (same dtype and shape on every branch and iteration)")


def is_tensor(a: Abstract) -> bool:
    """Scalars and arrays: the values linear segments compute on."""
    return isinstance(a, (Scalar, Array)) and a.dtype not in ("str", "dtype", "index")


def dtype_of(a: Abstract) -> str:
    """The dtype of a scalar or array abstract value."""
    return a.dtype


def shape_of(a: Abstract) -> tuple:
    """``()`` for scalars, the static shape for arrays."""
    return a.shape if isinstance(a, Array) else ()
