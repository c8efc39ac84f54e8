"""FuseOps ends a group at an op whose output extents depend on input values (dyn.reshape …).

Such an op's dims are known only to the VM's shape function, so they must be bound by the
kernel's output buffer; fused into a consumer they were unbound ("variable 'out6_n1' is used
but never defined", ONNX test_loop11). The attribute that says so is registered with the
shape rules, which load lazily: the check runs in a fresh process, where FuseOps runs first.
"""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    import kiln as tvm
    from kiln import relay

    x = relay.var("x", shape=(relay.Any(), relay.Any()), dtype="float32")
    y = relay.var("y", shape=(relay.Any(),), dtype="float32")
    newshape = relay.concatenate(
        [relay.const(np.array([1], "int64")), relay.shape_of(y, dtype="int64")], 0)
    out = relay.concatenate([x, relay.reshape(y, newshape)], 0)
    mod = tvm.IRModule.from_expr(relay.Function([x, y], out))
    fused = relay.transform.FuseOps(2)(relay.transform.InferType()(mod))
    names = []
    relay.analysis.post_order_visit(fused["main"], lambda n: names.append(
        relay.transform.fuse_ops.fused_function_name(n))
        if isinstance(n, relay.Function) and n.get_attr("Primitive") else None)
    assert not any("dyn_reshape_concatenate" in n for n in names), names
    a, b = np.zeros((2, 3), "float32"), np.arange(3, dtype="float32")
    got = relay.create_executor("vm", mod=mod, target="llvm").evaluate()(a, b).numpy()
    np.testing.assert_array_equal(got, np.concatenate([a, b[None]]))
    print("ok")
""")


def test_data_dependent_reshape_is_not_fused_into_its_consumer():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("ok")
