"""dense_pack.x86 with a symbolic row count (a ``relay.Any`` batch): one kernel, any batch.

Each kernel is built once per target with its row count a ``te.var`` and then run at several
row counts (a tail group included) against NumPy; the lowered TIR is checked for what makes
it fast: a constant-size, vectorized register block and a parallel loop over column blocks.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir, topi
from kiln.ir.module import IRModule
from kiln.runtime.error import TVMError
from kiln.tir.stmt_functor import post_order_visit
from kiln.topi.x86 import dense as x86_dense

K, N = 40, 48  # N / 16 = 3 packed column blocks
# 0: an empty batch runs no group; 1, 2, 5: a tail pair (one row repeated at 1 and 5);
# 3, 7: a tail of three rows as one more group of four; 4, 8: full groups only
ROWS = (0, 1, 2, 3, 4, 5, 7, 8, 33)
RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _packed(weight: np.ndarray, lanes: int = 16) -> np.ndarray:
    """``[N, K]`` → ``[N / lanes, K, lanes]``, written out in NumPy (the oracle's layout)."""
    n, k = weight.shape
    return np.ascontiguousarray(weight.reshape(n // lanes, lanes, k).transpose(0, 2, 1))


def _rows_var() -> tir.Var:
    return te.var("m", "int64")


def _packed_bias_relu(config=None):
    """relu(data @ W.T + bias) on a prepacked weight (what contrib_dense_pack lowers to)."""
    x = te.placeholder((_rows_var(), K), name="x")
    wp = te.placeholder((N // 16, K, 16), name="wp")
    b = te.placeholder((N,), name="b")
    y = topi.nn.relu(x86_dense.dense_packed_weight(x, wp, b, config=config))
    return [x, wp, b], y


def _packed_plain(config=None):
    """data @ W.T alone: the dense op is the kernel's output."""
    x = te.placeholder((_rows_var(), K), name="x")
    wp = te.placeholder((N // 16, K, 16), name="wp")
    return [x, wp], x86_dense.dense_packed_weight(x, wp, config=config)


def _unpacked_weight(config=None):
    """dense_pack.x86 on an ``[N, K]`` weight: the kernel packs it itself (a weight that is
    not a constant, so AlterOpLayout cannot fold the packing)."""
    x = te.placeholder((_rows_var(), K), name="x")
    w = te.placeholder((N, K), name="w")
    return [x, w], x86_dense.dense_pack(x, w, config=config)


def _residual_add(config=None):
    """data @ W.T + residual, the residual with a row variable of its own (as a fused VM
    kernel sees two ``Any``-batch arguments): the groups are computed into a buffer first."""
    x = te.placeholder((_rows_var(), K), name="x")
    wp = te.placeholder((N // 16, K, 16), name="wp")
    r = te.placeholder((te.var("m_residual", "int64"), N), name="r")
    d = x86_dense.dense_packed_weight(x, wp, config=config)
    y = te.compute(r.shape, lambda i, j: r[i, j] + d[i, j], name="T_add", tag="broadcast")
    return [x, wp, r], y


KERNELS = {
    "residual": (_residual_add, None),
    "bias_relu": (_packed_bias_relu, None),
    "plain": (_packed_plain, None),
    "unpacked": (_unpacked_weight, None),
    "rows_of_3": (_packed_bias_relu, {"tile_y_symbolic": 3, "tile_k": 3}),
    "parallel": (_packed_plain, {"rows_symbolic": 10**6}),
    "rows_of_8": (_packed_plain, {"tile_y_symbolic": 8, "accumulators": 16}),
}


def _lowered(name: str) -> tuple[list, te.Tensor, object]:
    make, config = KERNELS[name]
    inputs, out = make(config)
    sch = x86_dense.schedule_dense_pack([out], config)
    mod = kiln.lower(sch, [*inputs, out], name=name)
    return inputs, out, mod[mod.get_global_vars()[0]]


@pytest.fixture(scope="module")
def lowered():
    return {name: _lowered(name) for name in KERNELS}


@pytest.fixture(scope="module", params=["llvm", "llvm -mcpu=core-avx2", "c"])
def built(request, lowered):
    """All kernels in one module per target (one C compile); AVX2 as well as the host's
    AVX-512: 16-lane vectors split in two."""
    mod = IRModule({name: prim for name, (_, _, prim) in lowered.items()})
    return kiln.build(mod, target=request.param)


def _run(built, name: str, arrays: list[np.ndarray]) -> np.ndarray:
    out = kiln.nd.empty((arrays[0].shape[0], N), "float32")
    built[name](*[kiln.nd.array(a) for a in arrays], out)
    return out.numpy()


@pytest.mark.parametrize("rows", ROWS)
def test_one_kernel_runs_every_batch_with_bias_and_relu(built, rows):
    x, w, b = f32(rows, K), f32(N, K), f32(N)
    got = _run(built, "bias_relu", [x, _packed(w), b])
    np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["plain", "parallel"])
def test_dense_as_the_kernel_output(built, name):
    w = f32(N, K)
    for rows in ROWS:
        x = f32(rows, K)
        np.testing.assert_allclose(_run(built, name, [x, _packed(w)]), x @ w.T, rtol=1e-4,
                                   atol=1e-4)


def test_unpacked_weight_is_packed_inside_the_kernel(built):
    w = f32(N, K)
    for rows in ROWS:
        x = f32(rows, K)
        np.testing.assert_allclose(_run(built, "unpacked", [x, w]), x @ w.T, rtol=1e-4,
                                   atol=1e-4)


def test_epilogue_with_its_own_row_variable(built, lowered):
    w = f32(N, K)
    for rows in ROWS:
        x, r = f32(rows, K), f32(rows, N)
        np.testing.assert_allclose(_run(built, "residual", [x, _packed(w), r]), x @ w.T + r,
                                   rtol=1e-4, atol=1e-4)
    # every product is computed into a buffer of its own, each through a constant block
    assert _block_extents(lowered["residual"][2]) == {"T_dense_pack_rows4.local": [64],
                                                       "T_dense_pack_rows2.local": [32]}


def test_row_groups_that_do_not_divide_the_batch(built):
    w, b = f32(N, K), f32(N)
    for rows in (1, 2, 4, 5, 7):
        x = f32(rows, K)
        got = _run(built, "rows_of_3", [x, _packed(w), b])
        np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_groups_of_eight_with_tails_of_four_and_two(built):
    w = f32(N, K)
    for rows in range(0, 20):
        x = f32(rows, K)
        np.testing.assert_allclose(_run(built, "rows_of_8", [x, _packed(w)]), x @ w.T,
                                   rtol=1e-4, atol=1e-4)


def _block_extents(prim) -> dict[str, list[int]]:
    return {a.buffer_var.name: [int(e) for e in a.extents] for a in _nodes(prim, tir.Allocate)
            if a.buffer_var.name.startswith("T_dense_pack_rows")
            and all(isinstance(e, tir.IntImm) for e in a.extents)}


def _nodes(prim, kind):
    found = []
    post_order_visit(prim.body, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


# buffer -> (rows, packed column blocks): 8 accumulators of 16 lanes in AVX2 registers
FOURS = {"T_dense_pack_rows4": (4, 1), "T_dense_pack_rows2.local": (2, 1)}


@pytest.mark.parametrize(("name", "blocks"), [
    ("bias_relu", FOURS), ("plain", FOURS),
    ("rows_of_3", {"T_dense_pack_rows3": (3, 1), "T_dense_pack_rows1.local": (1, 3)})])
def test_register_blocks_have_constant_size_and_vector_accumulators(lowered, name, blocks):
    """The full groups' block (in the output's group loop) and the tail pair's (into a
    buffer of its own): constant extents, ``rows x 16`` accumulators each."""
    prim = lowered[name][2]
    allocs = {a.buffer_var.name: a for a in _nodes(prim, tir.Allocate)
              if a.buffer_var.name in blocks}
    assert {n: [int(e) for e in a.extents] for n, a in allocs.items()} == {
        n: [rows * columns * 16] for n, (rows, columns) in blocks.items()}
    for buffer_name, (rows, columns) in blocks.items():
        updates = [s for s in _nodes(prim, tir.BufferStore)
                   if s.buffer.data is allocs[buffer_name].buffer_var
                   and isinstance(s.indices[0], tir.Ramp)]
        assert all(s.indices[0].lanes == 16 for s in updates)
        # one 16-lane update per row and column block in the reduction, one zero-fill each (the full
        # groups' zero-fill again in the peeled last group, whose reduction simplified away)
        peeled = 0 if buffer_name.endswith(".local") else rows
        assert len(updates) == (2 * rows + peeled) * columns


def test_full_groups_reduce_without_a_guard(lowered):
    """The full groups' reduction guard is peeled off by LoopPartition: no condition is
    left around the accumulation (it would stay inside the reduction loop)."""
    prim = lowered["bias_relu"][2]
    stores = []
    for cond in _nodes(prim, tir.IfThenElse):
        post_order_visit(cond.then_case, lambda n: stores.append(n.buffer.name)
                         if isinstance(n, tir.BufferStore) else None)
    assert stores and not [n for n in stores if n.startswith("T_dense_pack_rows4")]


def test_output_stores_are_contiguous_vectors(lowered):
    prim = lowered["bias_relu"][2]
    out = [s for s in _nodes(prim, tir.BufferStore) if s.buffer.name == "T_relu"]
    assert out and all(isinstance(s.indices[0], tir.Ramp) for s in out)
    assert all(int(s.indices[0].stride) == 1 for s in out)


def test_large_products_run_column_blocks_in_parallel(lowered):
    def kinds(name):
        return {int(f.kind) for f in _nodes(lowered[name][2], tir.For)}

    parallel = int(tir.ForKind.PARALLEL)
    assert parallel in kinds("parallel")
    # 2 * K * N flops per row is far below parallel_min_flops: one thread
    assert parallel not in kinds("plain")


def test_static_rows_keep_the_two_dimensional_product():
    x = te.placeholder((6, K), name="x")
    wp = te.placeholder((N // 16, K, 16), name="wp")
    y = x86_dense.dense_packed_weight(x, wp)
    assert y.op.tag == "dense_pack" and [int(d) for d in y.shape] == [6, N]


def test_symbolic_rows_compute_in_groups():
    x = te.placeholder((_rows_var(), K), name="x")
    y = x86_dense.dense_packed_weight(x, te.placeholder((N // 16, K, 16), name="wp"),
                                      config={"tile_y_symbolic": 4})
    grouped = y.op.input_tensors[0]
    assert grouped.op.tag == "dense_pack"
    assert [int(d) for d in grouped.shape[1:]] == [4, N]


def test_reduction_mismatch_is_a_clear_error():
    x = te.placeholder((_rows_var(), K + 1), name="x")
    with pytest.raises(TVMError, match="columns but the packed weight reduces over"):
        x86_dense.dense_packed_weight(x, te.placeholder((N // 16, K, 16), name="wp"))
