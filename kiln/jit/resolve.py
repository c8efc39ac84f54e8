"""The resolve step: globals, modules, NumPy functions and methods become IR constants.

``GlobalRef`` constants are looked up in their function's namespace; Python functions found
there are parsed on demand (and resolved in turn); NumPy/``math``/builtin functions map to
primitives; ``x.sum(axis=1)``-style method calls and properties (``x.T``, ``x.shape``) become
primitive applications; keyword arguments are matched against the callee's signature so every
call is positional afterwards. ``grad``/``value_and_grad`` applications are collected for
:mod:`kiln.jit.grad` to expand.

Entry point: :func:`resolve`.
"""

from __future__ import annotations

import builtins
import inspect
import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.jit import primitives as P
from kiln.jit import structural as S
from kiln.jit.errors import JitError
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, toposort
from kiln.jit.parser import GETATTR, GlobalRef, parse

REQUIRED = object()

# function -> (primitive, signature [(name, default)...]); tuples of names read as *varargs
_UNARY = [("x", REQUIRED)]
_BINARY = [("x", REQUIRED), ("y", REQUIRED)]
_REDUCE = [("a", REQUIRED), ("axis", None), ("keepdims", False)]

FUNCTIONS: dict[Any, tuple[P.Primitive, list]] = {}
SIGNATURES: dict[P.Primitive, list] = {}


def _register(fns, prim, sig):
    for f in fns:
        FUNCTIONS[f] = (prim, sig)
    SIGNATURES.setdefault(prim, sig)


_register([np.tanh, math.tanh], P.tanh, _UNARY)
_register([np.exp, math.exp], P.exp, _UNARY)
_register([np.log, math.log], P.log, _UNARY)
_register([np.sin, math.sin], P.sin, _UNARY)
_register([np.cos, math.cos], P.cos, _UNARY)
_register([np.sqrt, math.sqrt], P.sqrt, _UNARY)
_register([np.abs, np.absolute, builtins.abs, math.fabs], P.abs_, _UNARY)
_register([np.sign], P.sign, _UNARY)
_register([np.negative], P.neg, _UNARY)
_register([np.maximum, builtins.max], P.maximum, _BINARY)
_register([np.minimum, builtins.min], P.minimum, _BINARY)
_register([np.add], P.add, _BINARY)
_register([np.subtract], P.sub, _BINARY)
_register([np.multiply], P.mul, _BINARY)
_register([np.divide, np.true_divide], P.truediv, _BINARY)
_register([np.power], P.pow_, _BINARY)
_register([np.matmul, np.dot], P.matmul, _BINARY)
_register([np.sum], P.sum_, _REDUCE)
_register([np.mean], P.mean, _REDUCE)
_register([np.max, np.amax], P.amax, _REDUCE)
_register([np.transpose], P.transpose, [("a", REQUIRED), ("axes", None)])
_register([np.reshape], P.reshape, [("a", REQUIRED), ("newshape", REQUIRED)])
_register([np.broadcast_to], P.broadcast_to, [("array", REQUIRED), ("shape", REQUIRED)])
_register([np.where], P.where, [("condition", REQUIRED), ("x", REQUIRED), ("y", REQUIRED)])
_register([np.zeros_like], P.zeros_like, [("a", REQUIRED)])
_register([np.ones_like], P.ones_like, [("a", REQUIRED)])
_register([np.shape], S.shape, [("a", REQUIRED)])
_register([np.ndim], S.ndim, [("a", REQUIRED)])
_register([builtins.len], S.len_, [("obj", REQUIRED)])
_register([builtins.float], P.to_float, _UNARY)
_register([builtins.int], P.to_int, _UNARY)
_register([builtins.bool], P.truth, _UNARY)

for _prim in list(P.PRIMITIVES.values()):
    if _prim.vm is None and _prim not in {v[0] for v in FUNCTIONS.values()}:
        FUNCTIONS[_prim] = (_prim, None)  # a primitive named directly: positional only

METHODS: dict[str, tuple[P.Primitive, list]] = {
    "sum": (P.sum_, [("axis", None), ("keepdims", False)]),
    "mean": (P.mean, [("axis", None), ("keepdims", False)]),
    "max": (P.amax, [("axis", None), ("keepdims", False)]),
    "reshape": (P.reshape, ("shape",)),
    "transpose": (P.transpose, ("axes",)),
    "astype": (P.astype, [("dtype", REQUIRED)]),
    "dot": (P.matmul, [("b", REQUIRED)]),
    "item": (P.asscalar, []),
}
PROPERTIES = {"T": P.transpose, "shape": S.shape, "ndim": S.ndim}

class Macro:
    """A Python-level function (``grad``) that rewrites its application at resolve time."""

    def __init__(self, fn, signature: list, expand: Callable):
        self.fn, self.signature, self.expand = fn, signature, expand
        self.name = fn.__name__

    def __repr__(self) -> str:
        return self.name


MACROS: dict[Any, Macro] = {}


def register_macro(fn, signature: list, expand: Callable) -> None:
    """Make ``fn(...)`` inside compiled code call ``expand(node, bound_args)`` at resolve."""
    MACROS[fn] = Macro(fn, signature, expand)


REFUSED = {builtins.print: "print(...) (kiln.jit functions are pure; print outside)",
           builtins.range: "range(...) outside a for loop",
           builtins.input: "input()", builtins.open: "open()"}


def convert_value(value: Any, where: str, loc) -> Any:
    """The IR constant for a Python value found by name."""
    if isinstance(value, P.Primitive):
        return value
    hook = getattr(value, "__kiln_jit__", None)
    if hook is not None:  # myia-decorated functions, grad(...) objects
        return hook()
    try:
        if value in MACROS:
            return MACROS[value]
        if value in REFUSED:
            raise JitError(f"{REFUSED[value]} is not supported inside a kiln.jit function",
                           loc)
        if value in FUNCTIONS:
            return FUNCTIONS[value][0]
    except TypeError:
        pass  # unhashable values: arrays, lists
    if inspect.isfunction(value):
        return parsed(value)
    if isinstance(value, (types.ModuleType, int, float, bool, str, type(None), np.ndarray,
                          np.generic, np.dtype)) or value in (np.float32, np.float64,
                                                              np.int32, np.int64):
        return value
    if isinstance(value, tuple):
        return tuple(convert_value(v, where, loc) for v in value)
    raise JitError(f"{where}: {type(value).__name__} values are not supported in kiln.jit "
                   f"functions ({value!r:.60})", loc)


_PARSED: dict[Any, Graph] = {}


def parsed(fn) -> Graph:
    """The resolved graph of the Python function ``fn`` (parsed once, cached)."""
    g = _PARSED.get(fn)
    if g is None:
        g = parse(fn)
        _PARSED[fn] = g
        resolve_graph(g)
    return g


def _signature_of(callee: Node) -> tuple[list | tuple | None, str]:
    if isinstance(callee, Constant):
        v = callee.value
        if isinstance(v, Graph):
            defaults = v.flags.get("defaults", {})
            return [(p.name, defaults.get(p.name, REQUIRED)) for p in v.parameters], v.name
        if isinstance(v, P.Primitive):
            return SIGNATURES.get(v), v.name
    return None, "function"


def bind_arguments(sig, args: list[Node], kwargs: dict[str, Node], what: str,
                   loc) -> list[Node]:
    """Positional arguments for ``sig`` from a call's positional and keyword arguments."""
    if isinstance(sig, tuple):  # varargs: reshape(2, 3) or reshape((2, 3))
        if kwargs:
            raise JitError(f"{what}() takes no keyword arguments here", loc)
        return args
    names = [n for n, _ in sig]
    if len(args) > len(sig):
        raise JitError(f"{what}() takes {len(sig)} arguments but {len(args)} were given", loc)
    out = list(args)
    for name, default in sig[len(args):]:
        if name in kwargs:
            out.append(kwargs.pop(name))
        elif default is REQUIRED:
            raise JitError(f"{what}() missing required argument {name!r}", loc)
        else:
            out.append(Constant(default))
    if kwargs:
        bad = sorted(set(kwargs) - set(names)) or sorted(kwargs)
        raise JitError(f"{what}() got an unexpected keyword argument {bad[0]!r}", loc)
    return out


def resolve_graph(root: Graph) -> None:
    """Resolve every global, attribute and keyword call in ``root`` and graphs it reaches,
    then expand macros (``grad``) once everything they refer to is resolved."""
    mng = GraphManager(root)
    macros = []
    for g in list(mng.graphs):
        out = g.output
        if isinstance(out, Apply) and out.inputs and isinstance(out.inputs[0], Constant) \
                and out.inputs[0].value is GETATTR:
            g.output = _fold_getattr(out, called=False)  # ``return x.T``
        elif isinstance(out, Constant) and isinstance(out.value, GlobalRef):
            g.output = _resolve_constant(out)
        for node in toposort(g, mng):
            if isinstance(node, Apply) and node.graph is g:
                _resolve_apply(node)
                if isinstance(node.inputs[0], Constant) and \
                        isinstance(node.inputs[0].value, Macro):
                    macros.append(node)
    for node in macros:
        new = node.inputs[0].value.expand(node, node.inputs[1:])
        mng.invalidate()
        mng.replace(node, new)
    _wrap_primitive_values(root)


def _wrap_primitive_values(root: Graph) -> None:
    """WrapPrimitives: a primitive used as a value (``f = np.tanh``; ``map(f, …)``) becomes a
    graph calling it, so every call site calls a graph; array_map's operand stays."""
    mng = GraphManager(root)
    for g in list(mng.graphs):
        for node in mng.nodes(g):
            if not isinstance(node, Apply):
                continue
            head = node.inputs[0]
            for k, i in enumerate(node.inputs[1:], 1):
                if isinstance(i, Constant) and isinstance(i.value, P.Primitive) and \
                        i.value.vm is None and not (isinstance(head, Constant) and head.value in
                                                    (S.array_map, S.array_reduce) and k == 1):
                    node.inputs[k] = Constant(primitive_graph(i.value), i.loc)


_WRAPPED: dict[P.Primitive, Graph] = {}


def primitive_graph(prim: P.Primitive) -> Graph:
    """``lambda *args: prim(*args)`` as a graph (arity from the primitive's infer rule)."""
    if prim not in _WRAPPED:
        params = list(inspect.signature(prim.infer).parameters.values())[1:]
        names = [p.name for p in params]
        if prim.nparams is not None:
            names = [f"x{i}" for i in range(prim.nparams)]
        elif any(p.kind == p.VAR_POSITIONAL for p in params):
            raise JitError(f"{prim.name} cannot be used as a value (variadic)")
        g = Graph(prim.name)
        args = [g.add_parameter(n) for n in names]
        g.output = Apply([Constant(prim), *args], g)
        _WRAPPED[prim] = g
    return _WRAPPED[prim]


def _resolve_constant(node: Node) -> Node:
    if isinstance(node, Constant) and isinstance(node.value, GlobalRef):
        ref = node.value
        if ref.name not in ref.ns.values:
            raise JitError(f"name {ref.name!r} is not defined (unknown global)", node.loc)
        c = Constant(convert_value(ref.ns.values[ref.name], f"global {ref.name!r}", node.loc),
                     node.loc)
        return c
    return node


def _resolve_apply(node: Apply) -> None:
    inputs = node.inputs
    for i, inp in enumerate(inputs):
        inputs[i] = _resolve_constant(inp)
        if isinstance(inputs[i], Apply) and inputs[i].inputs and \
                isinstance(inputs[i].inputs[0], Constant) and inputs[i].inputs[0].value is GETATTR:
            folded = _fold_getattr(inputs[i], called=(i == 0))
            if folded is not None:
                inputs[i] = folded
    fn = inputs[0]
    if isinstance(fn, Constant) and fn.value is GETATTR:
        return  # handled by its user (method call or property)
    if isinstance(fn, Apply) and isinstance(fn.inputs[0], Constant) and \
            fn.inputs[0].value is GETATTR:
        _method_call(node)
        return
    nkw = len(node.kwnames)
    args, kwvals = inputs[1:len(inputs) - nkw], inputs[len(inputs) - nkw:]
    sig, what = _signature_of(fn)
    if isinstance(fn, Constant) and isinstance(fn.value, Macro):
        sig, what = fn.value.signature, fn.value.name
    if sig is None:
        if nkw:
            raise JitError("keyword arguments need a callee known at compile time", node.loc)
        return
    node.inputs[1:] = bind_arguments(sig, args, dict(zip(node.kwnames, kwvals)), what,
                                     node.loc)
    node.kwnames = ()


def _fold_getattr(node: Apply, called: bool) -> Node | None:
    """``module.attr`` -> a constant; ``x.T``/``x.shape`` -> a primitive application."""
    _, base, attr = node.inputs
    base = _resolve_constant(base)
    node.inputs[1] = base
    name = attr.value
    if isinstance(base, Constant) and isinstance(base.value, types.ModuleType):
        if not hasattr(base.value, name):
            raise JitError(f"module {base.value.__name__!r} has no attribute {name!r}",
                           node.loc)
        return Constant(convert_value(getattr(base.value, name),
                                      f"{base.value.__name__}.{name}", node.loc), node.loc)
    if called:
        if name not in METHODS:
            raise JitError(f"method .{name}() is not supported (supported: "
                           f"{', '.join(sorted(METHODS))})", node.loc)
        return None
    if name not in PROPERTIES:
        raise JitError(f"attribute .{name} is not supported (supported: "
                       f"{', '.join(sorted(PROPERTIES))})", node.loc)
    prim = PROPERTIES[name]
    extra = [Constant(None)] if prim is P.transpose else []
    return Apply([Constant(prim), base, *extra], node.graph, node.loc)


def _method_call(node: Apply) -> None:
    get = node.inputs[0]
    _, base, attr = get.inputs
    prim, sig = METHODS[attr.value]
    nkw = len(node.kwnames)
    args = node.inputs[1:len(node.inputs) - nkw]
    kwargs = dict(zip(node.kwnames, node.inputs[len(node.inputs) - nkw:]))
    if isinstance(sig, tuple):  # x.reshape(2, 3) / x.reshape((2, 3)) / x.transpose(1, 0)
        if kwargs:
            raise JitError(f".{attr.value}() takes no keyword arguments", node.loc)
        if len(args) == 0:
            rest = [Constant(None)]
        elif len(args) == 1:
            rest = args
        else:
            rest = [Apply([Constant(S.make_tuple), *args], node.graph, node.loc)]
    else:
        rest = bind_arguments(sig, args, kwargs, f".{attr.value}", node.loc)
    node.inputs[:] = [Constant(prim), base, *rest]
    node.kwnames = ()
