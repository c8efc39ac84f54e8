"""Sorting computes (TVM's ``topi.sort``, ``argsort``, ``topk``): a stable merge sort in TIR.

Entry points: :func:`argsort`, :func:`sort`, :func:`topk`.

Every row along the sort axis is sorted by a bottom-up merge sort written as a TIR statement
(a ``te.extern``): O(n log n) comparisons, two scratch halves that the passes ping-pong
between, and plain loops, branches and buffer accesses that every target compiles -- ``c``,
``llvm``, bare-metal ``arm_cpu`` and exported libraries alike, with no packed-function helper.

Ordering follows NumPy's ``kind="stable"``: equal keys keep their original order, and NaN
counts as larger than every number (last when ascending, first when descending). The axis
length may be symbolic (the scratch then comes from the workspace allocator).

Example
-------
>>> from kiln import te, topi
>>> x = te.placeholder((2, 5), name="x")
>>> values, indices = topi.topk(x, k=3)
>>> [int(d) for d in values.shape], indices.dtype
([2, 3], 'int32')
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.utils import normalize_axes

_SERIAL = tir.ForKind.SERIAL

# The ordering contract (docs/ops_coverage.md quotes it).
ORDERING = ("stable O(n log n) merge sort in TIR (topk with k <= n/4: an O(n log k) heap); "
            "ties keep their original order in both directions, NaN is the largest key (last "
            "ascending, first descending).")


def _seq(*stmts: Any) -> Any:
    return tir.SeqStmt([s for s in stmts if s is not None])


def _store(buffer: Any, value: Any, index: Any) -> Any:
    # cast: positions computed from int64 extents (the VM's symbolic shapes) go to int32 buffers
    return tir.BufferStore(buffer, _op.cast(value, buffer.dtype), [index])


def _local(name: str, dtype: str, extent: Any) -> Any:
    """A 1-D scratch buffer (allocated by :func:`_allocate` around its uses)."""
    return tir.decl_buffer((extent,), dtype, name=name)


def _allocate(buffer: Any, body: Any) -> Any:
    return tir.Allocate(buffer.data, buffer.dtype, list(buffer.shape), tir.const(True, "bool"),
                        body)


def _loop(name: str, extent: Any, body_of) -> Any:
    var = tir.Var(name, "int32")
    return tir.For(var, 0, extent, _SERIAL, body_of(var))


def _let(name: str, value: Any, body_of) -> Any:
    var = tir.Var(name, "int32")
    return tir.LetStmt(var, value, body_of(var))


def _sorts_before(a: Any, b: Any, is_ascend: bool) -> Any:
    """Whether key ``a`` strictly precedes key ``b`` (NaN is the largest key)."""
    strict = a < b if is_ascend else a > b
    if not str(a.dtype).startswith(("float", "bfloat")):
        return strict
    late, early = (b, a) if is_ascend else (a, b)  # the NaN one goes last / first
    nan_rule = _op.logical_and(_op.isnan(late), _op.logical_not(_op.isnan(early)))
    return _op.logical_or(strict, nan_rule)


def _merge_pass(n: Any, width: Any, src: Any, dst: Any, vals: Any, idxs: Any,
                is_ascend: bool) -> Any:
    """Merge every pair of sorted runs of ``width`` keys in half ``src`` into half ``dst``.

    ``src``/``dst`` are element offsets into the scratch buffers; a cursor buffer holds the
    read positions of the left run (``cur[0]``) and the right run (``cur[1]``). (A branch-free
    step that reads both runs' next keys and selects one measured no faster with gcc and
    slower with LLVM.)
    """
    cursor = _local("merge_cursor", "int32", 2)

    def block(b):
        lo = b * (width * 2)
        mid = _op.min(lo + width, n)
        hi = _op.min(lo + width * 2, n)

        def step(t):
            def take(side, position):
                return _seq(_store(vals, vals[src + position], dst + lo + t),
                            _store(idxs, idxs[src + position], dst + lo + t),
                            _store(cursor, position + 1, side))

            def compare(i, j):
                right_first = _sorts_before(vals[src + j], vals[src + i], is_ascend)
                both = tir.IfThenElse(right_first, take(1, j), take(0, i))
                return tir.IfThenElse(j < hi, both, take(0, i))

            return _let("i", cursor[0], lambda i: _let("j", cursor[1], lambda j: tir.IfThenElse(
                i < mid, compare(i, j), take(1, j))))

        return _allocate(cursor, _seq(_store(cursor, lo, 0), _store(cursor, mid, 1),
                                      _loop("t", hi - lo, step)))

    blocks = _op.floordiv(n + width * 2 - 1, width * 2)
    return _loop("b", blocks, block)


def _over_rows(data: te.Tensor, axis: int, k: Any, outputs: list[tuple[str, str]],
               name: str, row_body) -> list[te.Tensor]:
    """One extern stage running ``row_body(source, at, outs)`` for every row along ``axis``
    (``at(position)`` is the full index of a row element); the outputs keep ``k`` of the
    ``n`` positions, as sorted keys (``"values"``) and/or their positions (``"indices"``)."""
    shape = list(data.shape)
    out_shape = list(shape)
    out_shape[axis] = k
    rows = [d for d in range(len(shape)) if d != axis]

    def fcompute(ins, outs):
        row_vars = [tir.Var(f"r{d}", "int32") for d in rows]

        def at(position):
            index = list(row_vars)
            index.insert(axis, position)
            return index

        body = row_body(ins[0], at, outs)
        # One loop over all rows (parallel: rows are independent), each row's coordinates
        # unflattened from it.
        flat = tir.Var("row", "int32")
        stride: Any = 1
        count: Any = 1
        for var, d in zip(reversed(row_vars), reversed(rows)):
            extent = _op.max(shape[d], 1)  # a zero-size dim runs no rows; never divide by 0
            body = tir.LetStmt(var, _op.floormod(_op.floordiv(flat, stride), extent), body)
            stride, count = stride * extent, count * shape[d]
        return tir.For(flat, 0, count, tir.ForKind.PARALLEL, body)

    result = te.extern([out_shape] * len(outputs), [data], fcompute, name=name,
                       dtype=[dtype for _, dtype in outputs], tag="sort")
    return result if isinstance(result, list) else [result]


def _write_outputs(outputs: list[tuple[str, str]], outs: list, at, k: Any, keys: Any,
                   order: Any, offset: Any = 0) -> Any:
    """``out[.., t, ..] = keys[offset + t]`` (or the position ``order[offset + t]``)."""
    def element(t):
        stores = []
        for (kind, dtype), out in zip(outputs, outs):
            picked = keys[offset + t] if kind == "values" else _op.cast(order[offset + t], dtype)
            stores.append(tir.BufferStore(out, picked, at(t)))
        return _seq(*stores)

    return _loop("t", k, element)


def _merge_sort_rows(data: te.Tensor, axis: int, is_ascend: bool, k: Any,
                     outputs: list[tuple[str, str]], name: str) -> list[te.Tensor]:
    """Sort every row with a bottom-up merge sort; write its first ``k`` entries."""
    n = data.shape[axis]

    def row_body(source, at, outs):
        extent = _op.max(n, 1)
        vals = _local("sort_keys", data.dtype, extent * 2)
        idxs = _local("sort_order", "int32", extent * 2)
        state = _local("sort_state", "int32", 2)  # [run width, which half holds the runs]

        def load(t):
            return _seq(_store(vals, source[tuple(at(t))], t), _store(idxs, t, t))

        def merge_passes(width):
            def with_half(half):
                src, dst = half * n, (1 - half) * n
                return _seq(_merge_pass(n, width, src, dst, vals, idxs, is_ascend),
                            _store(state, width * 2, 0), _store(state, 1 - half, 1))

            return _let("half", state[1], with_half)

        row = _seq(_loop("t", n, load), _store(state, 1, 0), _store(state, 0, 1),
                   tir.While(state[0] < n, _let("width", state[0], merge_passes)),
                   _let("final", state[1], lambda half: _write_outputs(
                       outputs, outs, at, k, vals, idxs, half * n)))
        return _allocate(vals, _allocate(idxs, _allocate(state, row)))

    return _over_rows(data, axis, k, outputs, name, row_body)


def _heap_select_rows(data: te.Tensor, axis: int, is_ascend: bool, k: int,
                      outputs: list[tuple[str, str]], name: str) -> list[te.Tensor]:
    """topk keeping each row's best ``k`` in a binary heap whose root is the worst kept entry:
    one comparison per element that does not beat the root (most of them), O(log k) for one
    that does, O(k log k) to order the heap at the end -- O(n log k) at worst.

    Entries compare by key, then by position (a later equal key is worse), so the result is
    the stable order's first ``k``."""
    n = data.shape[axis]

    def row_body(source, at, outs):
        keys = _local("heap_keys", data.dtype, k)
        order = _local("heap_order", "int32", k)
        state = _local("heap_state", "int32", 3)  # [sift position, sifting, chosen child]

        def worse(i, j):
            """Whether heap entry ``i`` comes after entry ``j`` in the stable order."""
            ki, kj = keys[i], keys[j]
            tie = _op.logical_not(_sorts_before(ki, kj, is_ascend))
            return _op.logical_or(_sorts_before(kj, ki, is_ascend),
                                  _op.logical_and(tie, order[i] > order[j]))

        def swap(i, j):
            held_key = tir.Var("held_key", data.dtype)
            return tir.LetStmt(held_key, keys[i], _let("held_pos", order[i], lambda held: _seq(
                _store(keys, keys[j], i), _store(order, order[j], i),
                _store(keys, held_key, j), _store(order, held, j))))

        def sift_down(start, size):
            """Move entry ``start`` down until no child within ``size`` is worse."""
            def step(pos):
                left = pos * 2 + 1
                pick = _seq(_store(state, left, 2), tir.IfThenElse(
                    left + 1 < size, tir.IfThenElse(worse(left + 1, left),
                                                    _store(state, left + 1, 2))))
                settle = _let("child", state[2], lambda child: tir.IfThenElse(
                    worse(child, pos), _seq(swap(child, pos), _store(state, child, 0)),
                    _store(state, 0, 1)))
                return tir.IfThenElse(left < size, _seq(pick, settle), _store(state, 0, 1))

            return _seq(_store(state, start, 0), _store(state, 1, 1),
                        tir.While(state[1] != 0, _let("pos", state[0], step)))

        def fill(t):
            return _seq(_store(keys, source[tuple(at(t))], t), _store(order, t, t))

        def offer(t):
            x = tir.Var("x", data.dtype)
            enter = _seq(_store(keys, x, 0), _store(order, k + t, 0), sift_down(0, k))
            return tir.LetStmt(x, source[tuple(at(k + t))], tir.IfThenElse(
                _sorts_before(x, keys[0], is_ascend), enter))

        def extract(e):
            last = k - 1 - e
            return _seq(swap(0, last), sift_down(0, last))

        heapify = [sift_down(j, k) for j in range(k // 2 - 1, -1, -1)]
        row = _seq(_loop("t", k, fill), *heapify, _loop("t", n - k, offer),
                   _loop("e", k - 1, extract), _write_outputs(outputs, outs, at, k, keys, order))
        return _allocate(keys, _allocate(order, _allocate(state, row)))

    return _over_rows(data, axis, k, outputs, name, row_body)


def _axis_length(data: te.Tensor, axis: int) -> Any:
    n = data.shape[axis]
    return int(n.value) if isinstance(n, tir.IntImm) else n


def argsort(data: te.Tensor, axis: int = -1, is_ascend: bool = True,
            dtype: str = "int32") -> te.Tensor:
    """Indices that sort ``data`` along ``axis`` (stable; NaN sorts as the largest key).

    Example
    -------
    >>> from kiln import te, topi
    >>> topi.argsort(te.placeholder((3, 4), name="x"), axis=0).shape[0]
    3
    """
    axis = normalize_axes(axis, data.ndim)[0]
    n = _axis_length(data, axis)
    return _merge_sort_rows(data, axis, is_ascend, n, [("indices", dtype)], "T_argsort")[0]


def sort(data: te.Tensor, axis: int = -1, is_ascend: bool = True) -> te.Tensor:
    """``data`` sorted along ``axis`` (NaN sorts as the largest key).

    Example
    -------
    >>> from kiln import te, topi
    >>> topi.sort(te.placeholder((5,), name="x"), is_ascend=False).dtype
    'float32'
    """
    axis = normalize_axes(axis, data.ndim)[0]
    n = _axis_length(data, axis)
    return _merge_sort_rows(data, axis, is_ascend, n, [("values", data.dtype)], "T_sort")[0]


_RET_TYPES = {"both": ("values", "indices"), "values": ("values",), "indices": ("indices",)}


def topk(data: te.Tensor, k: int = 1, axis: int = -1, ret_type: str = "both",
         is_ascend: bool = False, dtype: str = "int32") -> list[te.Tensor]:
    """The ``k`` largest (smallest when ``is_ascend``) elements along ``axis`` and/or their
    indices: ``[values, indices]``, ``[values]`` or ``[indices]`` by ``ret_type``.

    ``k < 1`` (or None) means the whole axis. Ties keep their original order.

    Example
    -------
    >>> from kiln import te, topi
    >>> (idx,) = topi.topk(te.placeholder((4, 6), name="x"), 2, ret_type="indices")
    >>> [int(d) for d in idx.shape]
    [4, 2]
    """
    if ret_type not in _RET_TYPES:
        raise TVMError(f"topk: ret_type must be one of {sorted(_RET_TYPES)}, got {ret_type!r}")
    axis = normalize_axes(axis, data.ndim)[0]
    n = _axis_length(data, axis)
    k = n if k is None or (isinstance(k, int) and k < 1) else k
    if isinstance(k, int) and isinstance(n, int) and k > n:
        raise TVMError(f"topk: k={k} exceeds the length {n} of axis {axis}")
    dtypes = {"values": data.dtype, "indices": dtype}
    outputs = [(kind, dtypes[kind]) for kind in _RET_TYPES[ret_type]]
    if isinstance(k, int) and isinstance(n, int) and k * 4 <= n:
        return _heap_select_rows(data, axis, is_ascend, k, outputs, "T_topk")
    return _merge_sort_rows(data, axis, is_ascend, k, outputs, "T_topk")


__all__ = ["argsort", "sort", "topk", "ORDERING"]
