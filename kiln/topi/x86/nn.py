"""x86 softmax and normalizations: per-row reductions fused with the row's epilogue.

Entry points: :func:`softmax`, :func:`log_softmax` (computes: ``exp(x - max)`` evaluated once
per element, in vectors by :func:`kiln.topi.math.fast_exp_nonpositive`),
:func:`schedule_softmax` (softmax, log_softmax, fast_softmax), :func:`schedule_norm`
(layer/group/instance norm, l2_normalize, lrn, and the injective batch_norm),
:data:`DEFAULT_CONFIG`.

Each parallel task owns one *row*: the leading ``rows`` output axes, fused. Inside the task
the row's reductions (max and exp-sum, or sum and squared-deviation sum) run first, each
vectorized by :func:`kiln.topi.x86.reduction.schedule_reduction_stage`, into small per-task
buffers; then the row's output is written in vectors. The row is read from cache for every
pass after the first.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.te.tensor import ComputeOp
from kiln.tir import op as _op
from kiln.topi.math import UNARY, fast_exp_nonpositive
from kiln.topi.reduction import ACCUMULATOR_DTYPE
from kiln.topi.utils import normalize_axes, traverse_inline
from kiln.topi.x86.injective import schedule_injective_from_existing
from kiln.topi.x86.parallel import static_work, worth_parallel
from kiln.topi.x86.reduction import DEFAULT_CONFIG as _REDUCE_CONFIG
from kiln.topi.x86.reduction import lanes_dividing, schedule_reduction_stage

# ``vector_lanes``: lanes of the output's innermost axis; the reduction knobs are shared with
# :mod:`kiln.topi.x86.reduction`.
DEFAULT_CONFIG = {**_REDUCE_CONFIG}


# kiln's one fast exp (kiln.topi.math's), under the name schedules and tests here have used for
# building exp into their own computes. Softmax takes its form for arguments <= 0,
# fast_exp_nonpositive: x - max is <= 0, or NaN where the row holds a NaN, a +inf or only -inf.
fast_exp = UNARY["fast_exp"]


def _softmax_parts(x: te.Tensor, axis: int):
    """The row max, ``exp(x - max)`` (stored once; :func:`fast_exp_nonpositive`) and its row
    sum, plus the index map from ``x`` to a row."""
    axis = normalize_axes(axis, x.ndim)[0]
    kept = [d for k, d in enumerate(x.shape) if k != axis]
    k_max = te.reduce_axis((0, x.shape[axis]), name="k")
    k_sum = te.reduce_axis((0, x.shape[axis]), name="k")

    def full(i, r):
        return list(i[:axis]) + [r] + list(i[axis:])

    def drop(i):
        return list(i[:axis]) + list(i[axis + 1:])

    xmax = te.compute(kept, lambda *i: te.max(x(*full(i, k_max.var)), axis=k_max),
                      name="T_softmax_maxelem", tag="softmax_max")
    shifted = te.compute(x.shape, lambda *i: fast_exp_nonpositive(x(*i) - xmax(*drop(i))),
                         name="T_softmax_exp", tag="softmax_exp")
    # float16 rows sum in float32 and round once (NumPy's and ONNX Runtime's rule)
    wide = ACCUMULATOR_DTYPE.get(str(x.dtype), x.dtype)
    expsum = te.compute(kept, lambda *i: te.sum(_op.cast(shifted(*full(i, k_sum.var)), wide),
                                                 axis=k_sum),
                        name="T_softmax_expsum", tag="softmax_sum")
    return xmax, shifted, expsum, drop


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, with ``exp(x - max)`` stored once
    (the generic compute evaluates it twice: in the sum and in the output) and, for float32
    and float16, computed by :func:`fast_exp_nonpositive` in vectors (relative error below
    1.5e-7; -inf entries give 0, a row of -inf, a +inf or a NaN gives NaN, as NumPy's
    softmax does).

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.x86.nn.softmax(te.placeholder((2, 5)))
    >>> y.op.tag, [t.op.name for t in y.op.input_tensors]
    ('softmax_output', ['T_softmax_exp', 'T_softmax_expsum'])
    """
    _, shifted, expsum, drop = _softmax_parts(x, axis)
    if expsum.dtype != x.dtype:
        # a narrow dtype divides by the row sum rounded to it, once per element, as the
        # reference does: a rounded reciprocal times the element rounds twice
        def narrow(*i):
            total = _op.cast(_op.cast(expsum(*drop(i)), x.dtype), expsum.dtype)
            return _op.cast(_op.cast(shifted(*i), expsum.dtype) / total, x.dtype)

        return te.compute(x.shape, narrow, name="T_softmax_norm", tag="softmax_output")
    # one reciprocal per row (hoisted out of the row loop), then multiplies: a vector divide
    # costs several multiplies
    one = _op.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: shifted(*i) * (one / expsum(*drop(i))),
                      name="T_softmax_norm", tag="softmax_output")


def log_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (the sum's exponentials as in
    :func:`softmax`).

    Example
    -------
    >>> from kiln import te, topi
    >>> topi.x86.nn.log_softmax(te.placeholder((2, 5))).op.tag
    'log_softmax_output'
    """
    xmax, _, expsum, drop = _softmax_parts(x, axis)
    return te.compute(x.shape, lambda *i: x(*i) - xmax(*drop(i)) -
                      _op.log(_op.cast(expsum(*drop(i)), x.dtype)),
                      name="T_log_softmax", tag="log_softmax_output")


def schedule_rows(outs: Any, rows: int, config: dict | None = None) -> Any:
    """Schedule ``outs[0]`` row by row: its first ``rows`` axes fused and parallel, every
    stage it reads (reductions and stored intermediates) computed per row, the output's
    innermost axis vectorized. ``rows == 0`` runs the reductions whole, then the output."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    sch = te.create_schedule([t.op for t in outs])
    out = outs[0]
    traverse_inline(sch, out.op)
    producers = [st for st in sch.stages if isinstance(st.op, ComputeOp) and
                 st.attach_type == "root" and not st.is_output]
    stage = sch[out]
    axes = list(stage.leaf_iter_vars)
    rows = min(rows, len(axes) - 1) if axes else 0
    row_loop = stage.fuse(*axes[:rows]) if rows > 1 else (axes[0] if rows == 1 else None)
    _vectorize_innermost(stage, out, cfg)
    attach = None
    # the kernel reads its input a few times over: its work is (about) the output's elements
    work = static_work(out.shape)
    if row_loop is not None:
        if worth_parallel(work):
            stage.parallel(row_loop)
        attach = (stage, row_loop)
    for producer in producers:
        tensor = producer.op.output(0)
        if producer.op.reduce_axis:
            schedule_reduction_stage(sch, tensor, cfg, attach)
        elif attach is not None:
            _vectorize_innermost(producer, tensor, cfg)
            producer.compute_at(*attach)
    for extra in outs[1:]:
        schedule_injective_from_existing(sch, extra)
    if row_loop is None and worth_parallel(work):
        _parallel_outer(stage)
    return sch


def _vectorize_innermost(stage: Any, tensor: te.Tensor, cfg: dict) -> None:
    extent = tensor.shape[-1] if tensor.ndim else None
    lanes = lanes_dividing(int(getattr(extent, "value", 0) or 0), cfg["vector_lanes"])
    if lanes:
        _, inner = stage.split(stage.leaf_iter_vars[-1], factor=lanes)
        stage.vectorize(inner)


def _parallel_outer(stage: Any) -> None:
    leaves = list(stage.leaf_iter_vars)
    if len(leaves) > 1:
        stage.parallel(leaves[0])


def schedule_softmax(outs: Any, axis: int = -1, config: dict | None = None) -> Any:
    """softmax / log_softmax / fast_softmax along ``axis``: one parallel task per row of the
    axes before ``axis``; max, exp-sum and the normalized row computed inside it.

    Example
    -------
    >>> from kiln import te, topi
    >>> y = topi.x86.nn.softmax(te.placeholder((4, 64)))
    >>> s = topi.x86.nn.schedule_softmax([y], axis=-1)
    >>> s[y].leaf_iter_vars[0].var.name
    'i0'
    """
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    axis = normalize_axes(axis, outs[0].ndim)[0]
    return schedule_rows(outs, axis, config)


def schedule_norm(outs: Any, axes: Any, config: dict | None = None) -> Any:
    """Normalizations whose statistics span ``axes`` (layer/group/instance norm,
    l2_normalize, lrn's window): one parallel task per row of the axes before the first of
    ``axes``, its statistics reduced in vectors inside it.

    Example
    -------
    >>> from kiln import te, topi
    >>> x, g, b = te.placeholder((8, 32)), te.placeholder((32,)), te.placeholder((32,))
    >>> y = topi.nn.layer_norm(x, g, b, axis=-1)
    >>> s = topi.x86.nn.schedule_norm([y], [-1])
    >>> sorted(st.op.name for st in s.stages if st.attach_type == "scope")
    ['T_sum', 'T_sum', 'T_sum.rf', 'T_sum.rf']
    """
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    axes = normalize_axes(axes, outs[0].ndim)
    return schedule_rows(outs, min(axes) if axes else 0, config)
