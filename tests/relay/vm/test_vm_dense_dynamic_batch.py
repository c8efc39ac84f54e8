"""Dense layers with a ``relay.Any`` batch in the VM run on the packed x86 kernels.

One executable per target runs every batch size against NumPy. AlterOpLayout turns each
``nn.dense`` on a constant weight into ``nn.contrib_dense_pack`` with the weight behind a
``layout_transform`` that FoldConstant folds: the executable holds the packed weights
``[N / 16, K, 16]`` as constants and its kernels are the ``contrib_dense_pack`` ones.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.vm import VirtualMachine

K, HIDDEN, OUT = 40, 48, 32
RNG = np.random.default_rng(23)
W1 = RNG.standard_normal((HIDDEN, K)).astype("float32")
B1 = RNG.standard_normal(HIDDEN).astype("float32")
W2 = RNG.standard_normal((OUT, HIDDEN)).astype("float32")


def _two_layers(batch) -> kiln.IRModule:
    """relu(x @ W1.T + b1) @ W2.T + r: bias and relu fused after the first dense, an add of
    a second ``Any``-batch input (a residual) after the second."""
    x = relay.var("x", shape=(batch, K))
    r = relay.var("r", shape=(batch, OUT))
    hidden = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, relay.const(W1)),
                                             relay.const(B1)))
    out = relay.add(relay.nn.dense(hidden, relay.const(W2)), r)
    return kiln.IRModule.from_expr(relay.Function([x, r], out))


def _expected(x, r):
    return np.maximum(x @ W1.T + B1, 0) @ W2.T + r


def _compile(mod, target):
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target)
    return exe, VirtualMachine(exe, kiln.cpu(0))


@pytest.fixture(scope="module", params=["llvm", "llvm -mcpu=core-avx2", "c"])
def any_batch(request):
    return _compile(_two_layers(relay.Any()), request.param)


# full groups of 4 rows, tails of 1-2 rows as a pair, of 3 as one more group of 4
@pytest.mark.parametrize("batch", [0, 1, 2, 3, 4, 5, 7, 8, 33])
def test_one_executable_runs_every_batch(any_batch, batch):
    _, vm = any_batch
    x = RNG.standard_normal((batch, K)).astype("float32")
    r = RNG.standard_normal((batch, OUT)).astype("float32")
    np.testing.assert_allclose(vm.run(x, r).numpy(), _expected(x, r), rtol=1e-4, atol=1e-4)


def test_packed_kernels_are_chosen_and_weights_packed_at_compile_time(any_batch):
    exe, _ = any_batch
    kernels = [n for n in exe.primitive_names if "shape_func" not in n]
    assert len(kernels) == 2
    assert all("contrib_dense_pack" in n and n.endswith("_dyn") for n in kernels)
    shapes = {tuple(c.shape) for c in exe.constants}
    # the folded layout_transform: [N, K] weights are held as [N / 16, K, 16]
    assert {(HIDDEN // 16, K, 16), (OUT // 16, HIDDEN, 16)} <= shapes
    assert (HIDDEN, K) not in shapes and (OUT, HIDDEN) not in shapes


def test_a_wrong_reduction_size_is_a_clear_error(any_batch):
    _, vm = any_batch
    with pytest.raises(kiln.TVMError, match="expects"):
        vm.run(np.zeros((2, K + 1), "float32"), np.zeros((2, OUT), "float32"))


def test_static_batch_keeps_the_static_packed_kernels():
    exe, vm = _compile(_two_layers(4), "llvm")
    kernels = [n for n in exe.primitive_names if "shape_func" not in n]
    assert len(kernels) == 2
    assert all("contrib_dense_pack" in n and not n.endswith("_dyn") for n in kernels)
    x = RNG.standard_normal((4, K)).astype("float32")
    r = RNG.standard_normal((4, OUT)).astype("float32")
    np.testing.assert_allclose(vm.run(x, r).numpy(), _expected(x, r), rtol=1e-4, atol=1e-4)


def test_weight_given_at_run_time_is_packed_inside_the_kernel():
    x = relay.var("x", shape=(relay.Any(), K))
    w = relay.var("w", shape=(HIDDEN, K))
    mod = kiln.IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w)))
    exe, vm = _compile(mod, "llvm")
    kernels = [n for n in exe.primitive_names if "shape_func" not in n]
    assert kernels == ["tvmgen_vm_mod_fused_nn_dense_dyn"]
    for batch in (1, 5):
        xs = RNG.standard_normal((batch, K)).astype("float32")
        np.testing.assert_allclose(vm.run(xs, W1).numpy(), xs @ W1.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", ["m", 6])
def test_dense_strategy_picks_the_packed_kernel_for_a_symbolic_batch(rows):
    from kiln import te
    from kiln.ir.type import TensorType
    from kiln.relay.op.op_attrs import DenseAttrs
    from kiln.relay.op.strategy import select_implementation

    data = te.placeholder((te.var(rows, "int64") if rows == "m" else rows, K), name="x")
    weight = te.placeholder((HIDDEN, K), name="w")
    impl, _ = select_implementation("nn.dense", DenseAttrs(), [data, weight],
                                    TensorType((data.shape[0], HIDDEN), "float32"), "llvm")
    assert impl.name == "dense_pack.x86"
