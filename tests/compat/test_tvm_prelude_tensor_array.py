"""TVM-idiom tensor-array and py_converter code (``import tvm``) running on kiln.

Written the way TVM v0.16's own tests use these APIs: ``Prelude(mod)`` with
``get_global_var(name, dtype)`` / ``get_tensor_ctor``, ``StaticTensorArrayOps(...).register()``,
results walked through ``tvm.runtime.container.ADT`` and ``ConstructorValue``; NumPy is the
oracle.
"""

import numpy as np
import tvm
import tvm.testing
from tvm import relay
from tvm.relay.backend.interpreter import ConstructorValue
from tvm.relay.prelude import Prelude, StaticTensorArrayOps
from tvm.relay.testing import run_as_python


def vmobj_to_list(mod, o, dtype="float32"):
    _, tensor_nil, *_ = mod.get_type(f"tensor_{dtype}_t")
    if isinstance(o, tvm.nd.NDArray):
        return [o.numpy().tolist()]
    if isinstance(o, tvm.runtime.container.ADT):
        if len(o) == 0:
            return [0] if tensor_nil.tag == o.tag else []
        result = []
        for f in o:
            result.extend(vmobj_to_list(mod, f, dtype))
        return result
    if isinstance(o, ConstructorValue):
        name = o.constructor.name_hint
        if name == "Cons":
            return vmobj_to_list(mod, o.fields[0], dtype) + vmobj_to_list(mod, o.fields[1], dtype)
        if name == "Nil":
            return []
        if "tensor_nil" in name:
            return [0]
        return [o.fields[0].numpy()]
    raise RuntimeError(f"Unknown object type: {type(o)}")


def check_tensor_array(ta_mod, ref_res, *args, dtype="float32"):
    for kind in ["debug", "vm"]:
        result = relay.create_executor(kind, mod=ta_mod, device=tvm.cpu(0),
                                       target="llvm").evaluate()(*args)
        got = vmobj_to_list(ta_mod, result, dtype)
        tvm.testing.assert_allclose(np.concatenate([np.ravel(r) for r in ref_res]),
                                    np.concatenate([np.ravel(g) for g in got]))


def test_tensor_array_write_then_stack():
    mod = tvm.IRModule()
    p = Prelude(mod)
    v1, v2 = relay.var("v1"), relay.var("v2")
    tensor1 = p.get_tensor_ctor("tensor1", "float32")
    write = p.get_global_var("tensor_array_write", "float32")
    ta = p.get_global_var("tensor_array", "float32")(relay.const(2))
    ta = write(write(ta, relay.const(0), tensor1(v1)), relay.const(1), tensor1(v2))
    mod["main"] = relay.Function([v1, v2], p.get_global_var("tensor_array_stack", "float32")(ta))
    a, b = np.array([1.0, 2.0], "float32"), np.array([3.0, 4.0], "float32")
    check_tensor_array(mod, [np.stack([a, b])], a, b)


def test_static_tensor_array_gather():
    mod = tvm.IRModule()
    p = Prelude(mod)
    ops = StaticTensorArrayOps(p, "float32", (3, 2))
    ops.register()
    x, idx = relay.var("x"), relay.var("idx", shape=(relay.Any(),), dtype="int32")
    unstack = p.get_global_var_static("tensor_array_unstack", "float32", (3, 2))
    out = StaticTensorArrayOps(p, "float32", (2,))
    out.register()
    gather = p.get_global_var_static("tensor_array_gather", "float32", (2,))
    mod["main"] = relay.Function([x, idx], gather(unstack(x), idx))
    data = np.arange(6, dtype="float32").reshape(3, 2)
    check_tensor_array(mod, [data[[2, 0]]], data, np.array([2, 0], "int32"))


def test_run_as_python_agrees_with_the_vm():
    mod = tvm.IRModule()
    p = Prelude(mod)
    x = relay.var("x", shape=(4,), dtype="float32")
    length = p.mod.get_global_var("length")
    func = relay.Function([x], relay.Tuple([
        relay.nn.softmax(x), length(p.cons(x, p.cons(x, p.nil())))]))
    data = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    got = run_as_python(func(relay.const(data)), mod)
    want = relay.create_executor("vm", mod=mod, target="llvm").evaluate(func)(data)
    tvm.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6)
    assert int(got[1].numpy()) == int(want[1].numpy()) == 2
