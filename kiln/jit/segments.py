"""Linear segments: a run of primitive applications compiled into one callable.

The ``lin_convert`` contract of Myia: ``convert(nodes, inputs, outputs)`` returns a callable
taking the input values and returning the output values (a tuple, or the value itself when
there is one output). Three implementations:

- ``relay`` (default for arrays): one Relay function per segment, built with ``relay.build``
  and run by the graph executor through :class:`GraphRunner` (Myia's NNVMRunner).
- ``debug``: the same Relay function run by the Relay interpreter.
- scalar segments (only Python scalars, no arrays) become generated Python source: a kernel
  launch costs microseconds, ``a + b`` on Python floats tens of nanoseconds.

Segments are built once per process by structural hash (:func:`build_segment`): the same
linear code in two functions, signatures or grad orders shares one library.

Entry points: :func:`convert_segment`, :func:`build_segment`, :func:`clear_segment_cache`,
:class:`PySegment`,
:class:`GraphRunner`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln import relay
from kiln.contrib import graph_executor
from kiln.ir.module import IRModule
from kiln.ir.structural import structural_equal, structural_hash
from kiln.ir.transform import PassContext
from kiln.jit import structural as S
from kiln.jit.abstract import Array, Scalar
from kiln.jit.errors import JitError
from kiln.jit.ir import Apply, Constant, Node
from kiln.runtime import ndarray
from kiln.runtime.device import cpu

_PY_DTYPES = {"int64": int, "float64": float, "bool": bool}


def is_scalar_segment(nodes: list[Apply]) -> bool:
    """A segment computing only on scalars, with Python templates for each primitive."""
    for n in nodes:
        prim = n.inputs[0].value
        if prim.py is None or not isinstance(n.abstract, Scalar):
            return False
        if any(isinstance(i.abstract, Array) for i in n.inputs[1:]):
            return False
    return True


class PySegment:
    """A scalar segment as generated Python: ``lines`` over ``inputs`` naming ``outputs``."""

    def __init__(self, lines: list[str], inputs: list[str], outputs: list[str],
                 consts: dict[str, Any]):
        self.lines, self.inputs, self.outputs, self.consts = lines, inputs, outputs, consts
        ret = self.outputs[0] if len(self.outputs) == 1 else "(" + ", ".join(outputs) + ",)"
        body = "\n".join("    " + ln for ln in lines) or "    pass"
        self.source = f"def segment({', '.join(inputs)}):\n{body}\n    return {ret}\n"
        env = {"math": math, **consts}
        exec(compile(self.source, "<kiln.jit segment>", "exec"), env)  # noqa: S102
        self.segment_fn = env["segment"]  # what FinalVM calls (the listing keeps self)
        self.nout = len(outputs)

    def __repr__(self) -> str:
        return "<py " + "; ".join(self.lines) + ">"


def _py_segment(nodes, inputs, outputs) -> PySegment:
    names: dict[Node, str] = {}
    consts: dict[str, Any] = {}
    in_names = []
    for n in inputs:
        names[n] = f"i{n.id}"
        in_names.append(names[n])

    def name_of(n: Node) -> str:
        if isinstance(n, Constant):
            v = n.value
            if isinstance(v, (bool, int, float)) and math.isfinite(float(v)):
                return repr(v)
            key = f"c{n.id}"
            consts[key] = v
            return key
        return names[n]

    lines = []
    for n in nodes:
        prim = n.inputs[0].value
        names[n] = f"v{n.id}"
        lines.append(f"{names[n]} = " + prim.py.format(*[name_of(a) for a in n.inputs[1:]]))
    return PySegment(lines, in_names, [names[o] for o in outputs], consts)


def _relay_type(a):
    return (a.shape if isinstance(a, Array) else ()), a.dtype


def relay_function(nodes, inputs, outputs):
    """The segment as a Relay function of its inputs, returning a tuple of its outputs, and
    the constant inputs it adds after them (``[(name, value)]``, set once per executor).

    ``x[t]`` with a constant integer ``t`` is ``take(x, k)`` with ``k`` such an input, not a
    ``strided_slice`` from ``t``: a loop unrolled over ``xs[t]`` then has one indexing kernel
    instead of one per ``t`` (32 of the RNN gradient's 40 distinct kernels), since a constant
    inside a fused function is part of its structural hash.
    """
    env: dict[Node, Any] = {}
    params = []
    for k, n in enumerate(inputs):
        shape, dtype = _relay_type(n.abstract)
        v = relay.var(f"i{k}", shape=shape, dtype=dtype)
        params.append(v)
        env[n] = v
    indices: dict[int, Any] = {}  # constant index -> the input holding it

    def value(n: Node):
        if n in env:
            return env[n]
        if isinstance(n, Constant):
            a = n.abstract
            if a is None or not hasattr(a, "dtype") or a.dtype in ("str", "dtype", "index"):
                return None  # an attribute operand (axis, shape, index): read from ins
            return relay.const(np.asarray(n.value, dtype=a.dtype))
        raise AssertionError(f"segment input {n} missing")

    def index_input(t: int):
        if t not in indices:
            indices[t] = relay.var(f"k{len(indices)}", shape=(), dtype="int64")
        return indices[t]

    for n in nodes:
        prim = n.inputs[0].value
        args = [value(i) for i in n.inputs[1:]]
        ins = [i.abstract for i in n.inputs[1:]]
        try:
            t = _constant_row(prim, ins)
            if t is not None:
                env[n] = relay.take(args[0], index_input(t), axis=0)
            else:
                env[n] = prim.relay(args, ins, n.abstract)
        except JitError:
            raise
        except Exception as err:
            raise JitError(f"{prim.name}: cannot lower to Relay: {err}", n.loc) from err
    outs = [env[o] for o in outputs]
    constants = [(v.name_hint, np.array(t, "int64")) for t, v in indices.items()]
    return relay.Function(params + list(indices.values()), relay.Tuple(outs)), constants


def _constant_row(prim, ins) -> int | None:
    """``t`` (in range) when ``prim(x, t)`` is ``x[t]`` with a constant int on axis 0."""
    if prim is not S.array_getitem or not isinstance(ins[0], Array) or not ins[0].shape:
        return None
    t = ins[1].value
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
        return None
    return int(t) % ins[0].shape[0]


def _from_output(nd, abstract):
    arr = nd.numpy() if hasattr(nd, "numpy") else np.asarray(nd)
    if isinstance(abstract, Scalar):
        py = _PY_DTYPES.get(abstract.dtype)
        return py(arr.reshape(())) if py is not None else arr.reshape(())[()]
    return arr


class GraphRunner:
    """Runs one compiled segment on the graph executor (Myia's NNVMRunner)."""

    def __init__(self, module, in_types, out_types, constants=()):
        self.module = module
        self.in_types = [(a.dtype, a.shape if isinstance(a, Array) else ()) for a in in_types]
        self.out_types = out_types
        self.names = [f"i{k}" for k in range(len(in_types))]
        self.set_input = module.set_input
        self.nout = len(out_types)
        for name, value in constants:  # the executor keeps them from run to run
            module.set_input(name, value)

    def __call__(self, *args):
        m = self.module
        for name, (dtype, _), v in zip(self.names, self.in_types, args):
            m.set_input(name, np.asarray(v, dtype=dtype))
        m.run()
        outs = tuple(_from_output(m.get_output(i), t) for i, t in enumerate(self.out_types))
        return outs[0] if self.nout == 1 else outs


class DebugRunner:
    """Runs one segment's Relay function on the Relay interpreter (``linear_impl="debug"``)."""

    def __init__(self, evaluate, in_types, out_types, constants=()):
        self.evaluate, self.in_types, self.out_types = evaluate, in_types, out_types
        self.nout = len(out_types)
        self.constants = [ndarray.array(value) for _, value in constants]

    def __call__(self, *args):
        vals = [ndarray.array(np.asarray(v, dtype=t.dtype)) for v, t in zip(args, self.in_types)]
        res = self.evaluate(*vals, *self.constants)
        items = [res[i] for i in range(self.nout)]  # the function returns a tuple
        outs = tuple(_from_output(r, t) for r, t in zip(items, self.out_types))
        return outs[0] if self.nout == 1 else outs


def convert_segment(nodes: list[Apply], inputs: list[Node], outputs: list[Node],
                    linear_impl: str = "relay", target: str = "llvm"):
    """Compile a linear segment with ``linear_impl`` ("relay" or "debug")."""
    if linear_impl == "relay" and is_scalar_segment(nodes):
        return _py_segment(nodes, inputs, outputs)
    fn, constants = relay_function(nodes, inputs, outputs)
    in_t = [n.abstract for n in inputs]
    out_t = [n.abstract for n in outputs]
    if linear_impl == "debug":
        ex = relay.create_executor("debug", mod=IRModule.from_expr(fn))
        return DebugRunner(ex.evaluate(), in_t, out_t, constants)
    if linear_impl != "relay":
        raise JitError(f"unknown linear_impl {linear_impl!r} (use 'relay' or 'debug')")
    lib = build_segment(fn, target)
    gm = graph_executor.GraphModule(lib["default"](cpu(0)))  # storage of its own
    return GraphRunner(gm, in_t, out_t, constants)


# structural hash -> [(segment function, target, built library)]: one build per distinct
# segment in the process, whichever function (or signature, or grad order) it came from
_BUILT: dict[int, list[tuple[Any, str, Any]]] = {}


def clear_segment_cache() -> None:
    """Forget the segments built so far (a benchmark timing a rebuild from the disk cache)."""
    _BUILT.clear()


def build_segment(fn, target: str):
    """``relay.build`` of a segment's Relay function, reused for a structurally equal one."""
    key = structural_hash(fn)
    for other, other_target, lib in _BUILT.get(key, ()):
        if other_target == target and structural_equal(other, fn):
            return lib
    with PassContext(opt_level=3):
        lib = relay.build(IRModule.from_expr(fn), target=target)
    _BUILT.setdefault(key, []).append((fn, target, lib))
    return lib
