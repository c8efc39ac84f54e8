"""matmul_pack.x86 against NumPy, its selection by the cpu strategy, and no transpose kernel."""

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.contrib import graph_executor
from kiln.relay.op.strategy import select_implementation
from kiln.runtime.error import TVMError
from kiln.topi.x86.matmul import matmul_pack, schedule_matmul_pack


@pytest.mark.parametrize("transpose_a, transpose_b",
                         [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m, k, n", [(6, 20, 32), (5, 7, 10)])
def test_matmul_pack_matches_numpy(transpose_a, transpose_b, m, k, n):
    a = te.placeholder((k, m) if transpose_a else (m, k), name="a")
    b = te.placeholder((n, k) if transpose_b else (k, n), name="b")
    out = matmul_pack(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    f = kiln.build(schedule_matmul_pack([out]), [a, b, out], target="llvm")
    rng = np.random.default_rng(0)
    av = rng.standard_normal([int(d) for d in a.shape]).astype("float32")
    bv = rng.standard_normal([int(d) for d in b.shape]).astype("float32")
    result = kiln.nd.empty((m, n))
    f(kiln.nd.array(av), kiln.nd.array(bv), result)
    expected = (av.T if transpose_a else av) @ (bv.T if transpose_b else bv)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_matmul_pack_rejects_mismatched_reduction():
    with pytest.raises(TVMError, match="reduction sizes differ"):
        matmul_pack(te.placeholder((4, 8)), te.placeholder((6, 3)))


def test_cpu_strategy_picks_the_packed_matmul():
    a, b = te.placeholder((8, 16), name="a"), te.placeholder((16, 32), name="b")
    call = relay.nn.matmul(relay.var("a", shape=(8, 16)), relay.var("b", shape=(16, 32)))
    out_type = relay.TensorType((8, 32), "float32")
    impl, _ = select_implementation(call.op, call.attrs, [a, b], out_type, "llvm")
    assert impl.name == "matmul_pack.x86"
    impl, _ = select_implementation(call.op, call.attrs, [a, b], out_type, "c -keys=arm_cpu")
    assert impl.name == "matmul.generic"


def test_runtime_weight_matmul_builds_without_a_transpose_kernel():
    """x @ W and x.T @ g with run-time operands: one fused kernel each, no transpose."""
    x, w = relay.var("x", shape=(8, 24)), relay.var("w", shape=(24, 16))
    g = relay.var("g", shape=(8, 16))
    body = relay.Tuple([relay.tanh(relay.nn.matmul(x, w)),
                        relay.nn.matmul(x, g, transpose_a=True)])
    mod = kiln.IRModule.from_expr(relay.Function([x, w, g], body))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    names = [op.func_name for op in m.module.op_execs]
    assert not [n for n in names if "transpose" in n], names
    rng = np.random.default_rng(1)
    xv, wv, gv = (rng.standard_normal(s).astype("float32") for s in ((8, 24), (24, 16), (8, 16)))
    m.run(x=xv, w=wv, g=gv)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.tanh(xv @ wv), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.get_output(1).numpy(), xv.T @ gv, rtol=1e-5, atol=1e-5)
