"""Building tensor expressions (TVM's ``tvm.te`` constructors).

Entry points: :func:`placeholder`, :func:`compute`, :func:`reduce_axis`, :func:`thread_axis`,
:func:`var`, :func:`size_var`, :func:`extern`, :func:`scan`, the reducers :data:`sum`,
:data:`max`, :data:`min` and :func:`comm_reducer`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.runtime.dtype import dtype_str
from kiln.runtime.error import TVMError
from kiln.te.tensor import ComputeOp, ExternOp, PlaceholderOp, ScanOp, Tensor
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir.buffer import decl_buffer
from kiln.tir.op import comm_reducer, convert_expr
from kiln.tir.op import sum as sum  # noqa: PLC0414 - re-exported

__all__ = ["placeholder", "compute", "reduce_axis", "thread_axis", "var", "size_var", "extern",
           "scan", "sum", "max", "min", "comm_reducer"]


def _shape(shape: Any) -> list[PrimExpr]:
    if isinstance(shape, int | PrimExpr):
        shape = (shape,)
    dims = []
    for dim in shape:
        dim = convert_expr(dim)
        if not isinstance(dim.dtype, str) or not dim.dtype.startswith(("int", "uint")):
            raise TVMError(f"shape dimensions must be integers, got {dim!r} ({dim.dtype})")
        if isinstance(dim, IntImm) and dim.value < 0:
            raise TVMError(f"shape dimensions must be non-negative, got {dim.value}")
        dims.append(dim)
    return dims


def var(name: str = "tindex", dtype: str = "int32", span=None) -> _e.Var:
    """A new symbolic scalar variable (e.g. a symbolic shape ``n``)."""
    return _e.Var(name, dtype)


def size_var(name: str = "size", dtype: str = "int32", span=None) -> _e.SizeVar:
    """A new symbolic variable known to be non-negative."""
    return _e.SizeVar(name, dtype)


def placeholder(shape: Any, dtype: str | None = None, name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` and ``dtype`` (default float32).

    Example
    -------
    >>> from kiln import te
    >>> n = te.var("n")
    >>> te.placeholder((n, 4), name="A").shape[0].name
    'n'
    """
    return PlaceholderOp(name, _shape(shape), dtype_str(dtype or "float32")).output(0)


def _range(dom: Any) -> Range:
    if isinstance(dom, Range):
        return dom
    if isinstance(dom, list | tuple):
        if len(dom) != 2:
            raise TVMError(f"an axis domain is (begin, end), got {dom!r}")
        return Range(convert_expr(dom[0]), convert_expr(dom[1]))
    return Range(0, convert_expr(dom))


def reduce_axis(dom: Any, name: str = "rv", thread_tag: str = "", span=None) -> _e.IterVar:
    """A reduction axis over ``dom`` (``(begin, end)`` or a Range).

    Example
    -------
    >>> from kiln import te
    >>> te.reduce_axis((0, 16), name="k").dom.extent
    16
    """
    rng = _range(dom)
    return _e.IterVar(rng, _e.Var(name, rng.extent.dtype), _e.IterVarType.CommReduce,
                      thread_tag)


def thread_axis(dom: Any = None, tag: str = "", name: str = "", span=None) -> _e.IterVar:
    """A thread axis placeholder (``blockIdx.x`` ...); kiln's CPU targets do not bind it."""
    if isinstance(dom, str):
        tag, dom = dom, None
    rng = None if dom is None else _range(dom)
    return _e.IterVar(rng, _e.Var(name or tag, "int32"), _e.IterVarType.ThreadIndex, tag)


def compute(shape: Any, fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: dict | None = None, varargs_names=None) -> Tensor | list[Tensor]:
    """``out[i, j, ...] = fcompute(i, j, ...)`` over ``shape``.

    Loop variables are named after ``fcompute``'s parameters. A body that is a tuple (as
    from a tuple reducer) gives one output tensor per element.

    Example
    -------
    >>> from kiln import te
    >>> A = te.placeholder((4, 8), name="A")
    >>> B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="B")
    >>> [iv.var.name for iv in B.op.axis]
    ['i', 'j']
    """
    dims = _shape(shape)
    params = inspect.signature(fcompute).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    while len(positional) > len(dims) and positional[-1].default is not inspect.Parameter.empty:
        positional.pop()  # trailing defaults (``lambda i, o=o: ...``) are not indices
    names = [p.name for p in positional]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        names += [f"i{k}" for k in range(len(names), len(dims))]
    if len(names) != len(dims):
        raise TVMError(f"compute {name!r}: fcompute takes {len(names)} indices but the shape "
                       f"has {len(dims)} dimensions")
    axis = [_e.IterVar(Range(0, d), _e.Var(n, d.dtype), _e.IterVarType.DataPar)
            for n, d in zip(names, dims)]
    body = fcompute(*[iv.var for iv in axis])
    bodies = list(body) if isinstance(body, list | tuple) else [body]
    bodies = [convert_expr(b) for b in bodies]
    reduces = [b for b in bodies if isinstance(b, _e.Reduce)]
    if reduces and len(reduces) != len(bodies):
        raise TVMError(f"compute {name!r}: a reduction must be the whole body of every output")
    op = ComputeOp(name, tag, attrs, axis, bodies)
    outputs = [op.output(i) for i in range(op.num_outputs)]
    return outputs[0] if len(outputs) == 1 else outputs


def extern(shape: Any, inputs: list[Tensor], fcompute: Callable, name: str = "extern",
           dtype: Any = None, in_buffers=None, out_buffers=None, tag: str = "",
           attrs: dict | None = None) -> Tensor | list[Tensor]:
    """Tensors computed by a TIR statement ``fcompute(ins, outs)`` over buffers.

    Typically the statement calls a packed function (``tir.call_packed``) or an external C
    function (``tir.call_extern``) with the buffers.

    Example
    -------
    >>> from kiln import te, tir
    >>> A = te.placeholder((8,), name="A")
    >>> B = te.extern((8,), [A], lambda ins, outs: tir.call_packed("my.copy", ins[0], outs[0]),
    ...               name="B")
    >>> B.op.input_tensors[0] is A
    True
    """
    from kiln.tir.stmt import Evaluate, Stmt

    shapes = [shape] if not shape or isinstance(shape[0], int | PrimExpr) else list(shape)
    dtypes = dtype if isinstance(dtype, list | tuple) else [dtype or
                                                             (inputs[0].dtype if inputs else
                                                              "float32")] * len(shapes)
    ins = list(in_buffers or [decl_buffer(t.shape, t.dtype, name=t.op.name) for t in inputs])
    outs = list(out_buffers or [decl_buffer(_shape(s), d, name=name)
                                for s, d in zip(shapes, dtypes)])
    body = fcompute(ins, outs)
    if isinstance(body, PrimExpr):
        body = Evaluate(body)
    if not isinstance(body, Stmt):
        raise TVMError(f"extern {name!r}: fcompute must return a TIR statement or expression")
    op = ExternOp(name, tag, attrs, inputs, ins, outs, body)
    outputs = [op.output(i) for i in range(op.num_outputs)]
    return outputs[0] if len(outputs) == 1 else outputs


def scan(init, update, state_placeholder, inputs=None, name: str = "scan", tag: str = "",
         attrs: dict | None = None) -> Tensor | list[Tensor]:
    """A recurrence along the first axis: ``state[0:k] = init``, ``state[t] = update[t]``.

    Example
    -------
    >>> from kiln import te
    >>> m, n = 5, 3
    >>> X = te.placeholder((m, n), name="X")
    >>> s = te.placeholder((m, n), name="s")
    >>> init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    >>> upd = te.compute((m, n), lambda t, i: s[t - 1, i] + X[t, i], name="upd")
    >>> te.scan(init, upd, s, [X], name="cumsum").shape[0]
    5
    """
    init = list(init) if isinstance(init, list | tuple) else [init]
    update = list(update) if isinstance(update, list | tuple) else [update]
    states = list(state_placeholder) if isinstance(state_placeholder, list | tuple) else \
        [state_placeholder]
    if not len(init) == len(update) == len(states):
        raise TVMError("scan: init, update and state_placeholder must have the same length")
    begin = init[0].shape[0]
    axis = _e.IterVar(Range.from_min_extent(begin, _op.subtract(update[0].shape[0], begin)),
                      _e.Var(name + ".idx", "int32"), _e.IterVarType.Ordered)
    op = ScanOp(name, tag, attrs, axis, init, update, states, list(inputs or []))
    outputs = [op.output(i) for i in range(op.num_outputs)]
    return outputs[0] if len(outputs) == 1 else outputs


max = comm_reducer(lambda x, y: _op.max(x, y), lambda t: _op.min_value(t),  # noqa: A001
                   name="max")
min = comm_reducer(lambda x, y: _op.min(x, y), lambda t: _op.max_value(t),  # noqa: A001
                   name="min")
