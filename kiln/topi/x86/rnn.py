"""x86 schedules of the fused recurrent cells (``lstm_cell.x86``, ``gru_cell.x86``,
``rnn_cell.x86``).

Entry points: :func:`schedule_lstm_cell`, :func:`schedule_gru_cell`, :func:`schedule_rnn_cell`,
:data:`DEFAULT_CONFIG`
(``parallel_min_flops``: the product size below which one thread runs the step).

One task per block of ``n`` hidden units (the packed weight's lanes) of one batch row: the
gate products of the block accumulate in ``G`` vector registers per lane group (the reduction
outside, the gates unrolled, the lanes vectorized), and the gate epilogue of the block runs in
the same task. A batch-1 step of hidden size 256 is about half a million flops: on the pool that
the executors keep polling through a run, two threads split it (one launch per step).

Example
-------
>>> from kiln import te
>>> from kiln.topi.nn.rnn import lstm_cell
>>> from kiln.topi.x86.rnn import schedule_lstm_cell
>>> out = lstm_cell(te.placeholder((4, 1, 64)), te.placeholder((2, 1, 16)),
...                 te.placeholder((1, 16, 4, 16)), te.placeholder((), "int32"))
>>> s = schedule_lstm_cell([out])
>>> [iv.var.name for iv in s[out].leaf_iter_vars]
['b.j.outer.fused', 's', 'j.inner']
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.topi.utils import get_const_int
from kiln.topi.x86.parallel import DEFAULT_PARALLEL_MIN_FLOPS

__all__ = ["schedule_lstm_cell", "schedule_gru_cell", "schedule_rnn_cell", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = {"parallel_min_flops": DEFAULT_PARALLEL_MIN_FLOPS}


def _stages(out: te.Tensor) -> dict[str, te.Tensor]:
    """The compute tensors feeding ``out`` (itself included), by op name."""
    found: dict[str, te.Tensor] = {}

    def visit(tensor):
        if tensor.op.name in found or not hasattr(tensor.op, "body"):
            return
        found[tensor.op.name] = tensor
        for t in tensor.op.input_tensors:
            visit(t)

    visit(out)
    return found


def _products(stage: Any) -> None:
    """Reduction outermost, gates unrolled, lanes vectorized: one accumulator per gate."""
    b, jb, q, ji, k = stage.leaf_iter_vars
    stage.set_scope("local")  # registers, not a workspace allocation per task
    stage.reorder(b, jb, k, q, ji)
    stage.unroll(q)
    stage.vectorize(ji)


def _flops(products: te.Tensor) -> int:
    batch, blocks, gates, lanes = (get_const_int(d) for d in products.shape)
    k = get_const_int(products.op.reduce_axis[0].dom.extent)
    return 2 * batch * blocks * gates * lanes * k


def _blocks(stage: Any, axes: list, lanes: int, parallel: bool) -> tuple[Any, Any]:
    """Split the hidden axis (last of ``axes``) into lane blocks; one task per (row, block)."""
    *outer, j = axes
    jo, ji = stage.split(j, factor=lanes)
    batch = outer[-1]
    stage.reorder(*outer[:-1], batch, jo, ji)
    task = stage.fuse(batch, jo)
    if parallel:
        stage.parallel(task)
    stage.vectorize(ji)
    return task, ji


def schedule_lstm_cell(outs: Any, config: dict | None = None) -> Any:
    """Schedule :func:`~kiln.topi.nn.rnn.lstm_cell` (one task per lane block of a row)."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    out = outs[0]
    sch = te.create_schedule([out.op])
    stages = _stages(out)
    products, cell = stages["lstm_gates"], stages["lstm_c"]
    lanes = get_const_int(products.shape[3])
    o = sch[out]
    s, b, j = o.leaf_iter_vars
    jo, ji = o.split(j, factor=lanes)
    o.reorder(b, jo, s, ji)
    task = o.fuse(b, jo)
    if _flops(products) >= cfg["parallel_min_flops"]:
        o.parallel(task)
    o.unroll(s)
    o.vectorize(ji)
    sch[cell].compute_at(o, task)
    sch[cell].vectorize(sch[cell].leaf_iter_vars[-1])
    sch[products].compute_at(o, task)
    _products(sch[products])
    return sch


def _schedule_one_pass(sch: Any, out: te.Tensor, products: te.Tensor, cfg: dict) -> Any:
    """A ``[B, H]`` cell whose epilogue reads only its block's products: one task per block."""
    o = sch[out]
    lanes = get_const_int(products.shape[3])
    parallel = _flops(products) >= cfg["parallel_min_flops"]
    task, _ = _blocks(o, list(o.leaf_iter_vars), lanes, parallel)
    sch[products].compute_at(o, task)
    _products(sch[products])
    return sch


def schedule_rnn_cell(outs: Any, config: dict | None = None) -> Any:
    """Schedule :func:`~kiln.topi.nn.rnn.rnn_cell` (one task per lane block of a row)."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    out = (list(outs) if isinstance(outs, list | tuple) else [outs])[0]
    sch = te.create_schedule([out.op])
    return _schedule_one_pass(sch, out, _stages(out)["rnn_gates"], cfg)


def schedule_gru_cell(outs: Any, config: dict | None = None) -> Any:
    """Schedule :func:`~kiln.topi.nn.rnn.gru_cell` (with a reset pass first when the reset
    gate multiplies the state before its product, ``linear_before_reset=0``)."""
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    out = outs[0]
    sch = te.create_schedule([out.op])
    stages = _stages(out)
    products = stages["gru_gates"]
    lanes = get_const_int(products.shape[3])
    flops = _flops(products)
    o = sch[out]
    if "gru_reset" not in stages:
        return _schedule_one_pass(sch, out, products, cfg)
    candidate, reset = stages["gru_candidate"], stages["gru_reset"]
    flops += _flops(candidate)
    parallel = flops >= cfg["parallel_min_flops"]
    zr = sch[products]
    b, jb, q, ji, k = zr.leaf_iter_vars
    zr.reorder(b, jb, k, q, ji)
    zr_task = zr.fuse(b, jb)
    if parallel:
        zr.parallel(zr_task)
    zr.unroll(q)
    zr.vectorize(ji)
    r = sch[reset]
    _blocks(r, list(r.leaf_iter_vars), lanes, False)
    task, _ = _blocks(o, list(o.leaf_iter_vars), lanes, parallel)
    sch[candidate].compute_at(o, task)
    _products(sch[candidate])
    return sch
