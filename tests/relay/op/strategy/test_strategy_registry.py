"""The strategy registry: coverage of the Tier-1 ops, dispatch by target keys, selection."""

from __future__ import annotations

import pathlib

import pytest

import kiln
from kiln import te
from kiln.ir.op import Op
from kiln.ir.type import TensorType
from kiln.relay.op import op_attrs as A
from kiln.relay.op import strategy
from kiln.relay.op.strategy import coverage, generic, registry
from kiln.runtime.error import OpNotImplemented, TVMError
from kiln.target import Target

DENSE_INPUTS = ([te.placeholder((4, 32), name="x"), te.placeholder((16, 32), name="w")],
                TensorType((4, 16), "float32"))


def test_every_tier1_op_has_a_strategy():
    missing = [name for name in coverage.TIER1 if Op.get(name).get_attr("FTVMStrategy") is None]
    assert missing == []
    # the data-dependent and dynamic-shape ops included (their kernels take run-time extents)
    assert "dyn_reshape.generic" in registry.IMPLEMENTATIONS_OF["dyn.reshape"]
    assert "argwhere.generic" in registry.IMPLEMENTATIONS_OF["argwhere"]


def test_injective_ops_register_compute_and_schedule():
    for name in strategy.COMPUTES:
        op = Op.get(name)
        assert op.get_attr("FTVMCompute") is not None, name
        if generic.schedule_kind(name) == "injective":
            assert op.get_attr("FTVMSchedule") is generic.schedule_injective, name


def test_every_registered_implementation_has_both_halves():
    assert "dense_pack.x86" in registry.IMPLEMENTATIONS
    assert "conv2d_nchw.x86" in registry.IMPLEMENTATIONS
    for name, impl in registry.IMPLEMENTATIONS.items():
        assert callable(impl.compute) and callable(impl.schedule), name
        assert isinstance(impl.config, dict), name
        assert impl.name == name
    knobs = registry.IMPLEMENTATIONS["dense_pack.x86"].config
    assert {"tile_y", "tile_x", "tile_k"} <= set(knobs)


def test_dispatch_follows_target_keys_with_generic_fallback():
    inputs, out_type = DENSE_INPUTS
    attrs = A.DenseAttrs()
    cpu = strategy.strategy_for("nn.dense", attrs, inputs, out_type, Target("llvm"))
    assert [i.name for i in cpu.implementations] == ["dense.generic", "dense_pack.x86"]
    arm = strategy.strategy_for("nn.dense", attrs, inputs, out_type,
                                Target("c -keys=arm_cpu -mcpu=cortex-a53"))
    assert [i.name for i in arm.implementations] == ["dense.generic"]
    cortex_m = strategy.strategy_for("nn.dense", attrs, inputs, out_type,
                                     Target("c -keys=arm_cpu -mcpu=cortex-m7"))
    assert [i.name for i in cortex_m.implementations] == ["dense.generic",
                                                          "dense_micro_kernel.arm_cpu"]


def test_select_implementation_takes_the_highest_plevel_and_builds():
    inputs, out_type = DENSE_INPUTS
    target = Target("llvm")
    impl, outs = strategy.select_implementation("nn.dense", A.DenseAttrs(), inputs, out_type,
                                                target)
    assert impl.name == "dense_pack.x86"
    sch = impl.schedule(A.DenseAttrs(), outs, target)
    mod = kiln.build(sch, inputs + outs, target=target, name="dense")
    import numpy as np

    x = np.random.default_rng(0).standard_normal((4, 32)).astype("float32")
    w = np.random.default_rng(1).standard_normal((16, 32)).astype("float32")
    out = kiln.nd.empty((4, 16), "float32")
    mod["dense"](kiln.nd.array(x), kiln.nd.array(w), out)
    np.testing.assert_allclose(out.numpy(), x @ w.T, rtol=1e-4, atol=1e-4)


def test_a_tuned_selector_overrides_plevel():
    inputs, out_type = DENSE_INPUTS
    calls = []

    def prefer_generic(op, attrs, ins, out, target, impls):
        calls.append(op.name)
        return "dense.generic" if op.name == "nn.dense" else None

    registry.register_tuned_selector(prefer_generic)
    try:
        impl, _ = strategy.select_implementation("nn.dense", A.DenseAttrs(), inputs, out_type,
                                                 Target("llvm"))
    finally:
        registry._TUNED_SELECTORS.remove(prefer_generic)
    assert impl.name == "dense.generic" and calls == ["nn.dense"]


def test_ops_without_kernels_and_duplicates_raise_clear_errors():
    x = te.placeholder((3,), name="x")
    with pytest.raises(OpNotImplemented, match="device_copy"):
        strategy.select_implementation("device_copy", None, [x], TensorType((3,), "float32"),
                                       Target("c"))
    with pytest.raises(TVMError, match="registered twice"):
        strategy.register_strategy("add", "generic")(lambda *a: None)
    with pytest.raises(TVMError, match="not registered"):
        strategy.select_implementation("no_such_op", None, [x], None, Target("c"))


def test_schedule_functions_dispatch_by_target_key():
    from kiln import topi

    x = te.placeholder((256, 256), name="x")  # above tir.parallel_min_work
    y = topi.exp(x)
    cpu = strategy.schedule_injective(None, [y], Target("llvm"))
    arm = strategy.schedule_injective(None, [y], Target("c -keys=arm_cpu"))
    from kiln.tir.stmt import ForKind

    assert any(a.kind == ForKind.PARALLEL for a in cpu[y].iter_var_attrs.values())
    assert not any(a.kind == ForKind.PARALLEL for a in arm[y].iter_var_attrs.values())


def test_committed_coverage_table_is_current():
    path = pathlib.Path(__file__).resolve().parents[4] / "docs" / "ops_coverage.md"
    assert path.read_text() == coverage.coverage_markdown()


def test_a_tuner_can_pass_knobs_to_both_halves():
    import numpy as np

    impl = registry.IMPLEMENTATIONS["dense_pack.x86"]
    inputs, out_type = DENSE_INPUTS
    config = {"tile_x": 8, "tile_y": 2, "tile_k": 2}
    outs = impl.compute(A.DenseAttrs(), inputs, out_type, config)
    packed = outs[0].op.input_tensors[1]
    assert int(packed.shape[2]) == 8
    sch = impl.schedule(A.DenseAttrs(), outs, Target("llvm"), config)
    mod = kiln.build(sch, inputs + outs, target="llvm", name="dense")
    x = np.random.default_rng(2).standard_normal((4, 32)).astype("float32")
    w = np.random.default_rng(3).standard_normal((16, 32)).astype("float32")
    out = kiln.nd.empty((4, 16), "float32")
    mod["dense"](kiln.nd.array(x), kiln.nd.array(w), out)
    np.testing.assert_allclose(out.numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
