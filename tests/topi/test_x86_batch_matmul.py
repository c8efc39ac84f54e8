"""batch_matmul_pack.x86 against NumPy, and its selection by the cpu strategy."""

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.relay.op.strategy import select_implementation
from kiln.topi.x86.batch_matmul import batch_matmul_pack, schedule_batch_matmul_pack


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("transpose_b", [True, False])
@pytest.mark.parametrize("bx, by", [(4, 4), (1, 3), (3, 1)])
def test_batch_matmul_pack_matches_numpy(target, transpose_b, bx, by):
    x = te.placeholder((bx, 6, 20), name="x")
    y = te.placeholder((by, 24, 20) if transpose_b else (by, 20, 24), name="y")
    out = batch_matmul_pack(x, y, transpose_b=transpose_b)
    f = kiln.build(schedule_batch_matmul_pack([out]), [x, y, out], target=target)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((bx, 6, 20)).astype("float32")
    yv = rng.standard_normal([int(d) for d in y.shape]).astype("float32")
    result = kiln.nd.empty((max(bx, by), 6, 24))
    f(kiln.nd.array(xv), kiln.nd.array(yv), result)
    expected = np.matmul(xv, np.swapaxes(yv, 1, 2) if transpose_b else yv)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_cpu_strategy_picks_the_packed_batch_matmul():
    x, y = te.placeholder((2, 8, 16), name="x"), te.placeholder((2, 32, 16), name="y")
    call = relay.nn.batch_matmul(relay.var("x", shape=(2, 8, 16)),
                                 relay.var("y", shape=(2, 32, 16)))
    out_type = relay.TensorType((2, 8, 32), "float32")
    impl, _ = select_implementation(call.op, call.attrs, [x, y], out_type, "llvm")
    assert impl.name == "batch_matmul_pack.x86"
    impl, _ = select_implementation(call.op, call.attrs, [x, y], out_type, "c -keys=arm_cpu")
    assert impl.name != "batch_matmul_pack.x86"
