"""conv2d_nchw_winograd.x86: extraction beside the direct conv (3x3 stride 1 only), the space
and its configs against torch, and records choosing it over the direct conv (TVM's rule: the
lowest cost among implementations with records) with the result unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from autotvm_templates import config_with as _config

import kiln as tvm
from kiln import autotvm, relay, te
from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.autotvm.task.task import default_config_index
from kiln.contrib import graph_executor
from kiln.topi.nn.winograd import winograd_matrices
from kiln.topi.x86 import conv2d_winograd as x86_winograd

TARGET = "llvm"
WINOGRAD = "conv2d_nchw_winograd.x86"
DIRECT = "conv2d_NCHWc.x86"
RNG = np.random.default_rng(23)


def _record(task, config, cost):
    return MeasureInput(task.target, task, config), MeasureResult((cost,), 0, 0.1, 0.0)


def _net(weight_var=False):
    """3x3 stride-1 conv + bias + relu, then a 3x3 stride-2 conv and a 1x1 conv: the model,
    its input, torch's result and the first conv's weight."""
    x = RNG.standard_normal((1, 16, 10, 9)).astype("float32")
    w1 = (RNG.standard_normal((32, 16, 3, 3)) / 12).astype("float32")
    b1 = RNG.standard_normal(32).astype("float32")
    w2 = (RNG.standard_normal((16, 32, 3, 3)) / 12).astype("float32")
    w3 = (RNG.standard_normal((16, 16, 1, 1)) / 4).astype("float32")
    data = relay.var("x", shape=x.shape)
    weight = relay.var("w", shape=w1.shape) if weight_var else relay.const(w1)
    a = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, weight, padding=(1, 1)),
                                        relay.const(b1)))
    b = relay.nn.conv2d(a, relay.const(w2), strides=(2, 2), padding=(1, 1))
    c = relay.nn.conv2d(b, relay.const(w3))
    params = [data, weight] if weight_var else [data]
    mod = tvm.IRModule.from_expr(relay.Function(params, c))
    t = torch.from_numpy
    want = torch.relu(torch.nn.functional.conv2d(t(x), t(w1), t(b1), padding=1))
    want = torch.nn.functional.conv2d(want, t(w2), stride=2, padding=1)
    want = torch.nn.functional.conv2d(want, t(w3)).numpy()
    return mod, x, want, w1


def _build(mod, records=None, weight=None):
    import contextlib

    ctx = autotvm.apply_history_best(records) if records is not None else \
        contextlib.nullcontext()
    with ctx, tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, TARGET)
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    return lib, module


def _run(module, x, weight=None):
    module.set_input("x", x)
    if weight is not None:
        module.set_input("w", weight)
    module.run()
    return module.get_output(0).numpy()


def _tasks(mod):
    return {(t.name, t.args[1][1]): t for t in autotvm.task.extract_from_program(
        mod, {}, TARGET, ops=[relay.op.get("nn.conv2d")])}


def test_extraction_gives_the_winograd_task_beside_the_direct_one_for_3x3_stride_1_only():
    mod, _, _, _ = _net()
    tasks = _tasks(mod)
    assert sorted(tasks) == [(DIRECT, (16, 16, 1, 1)), (DIRECT, (16, 32, 3, 3)),
                             (DIRECT, (32, 16, 3, 3)), (WINOGRAD, (32, 16, 3, 3))]
    task = tasks[(WINOGRAD, (32, 16, 3, 3))]
    # TVM's conv2d_nchw_winograd workload, and the direct conv's flops (GFLOPS compare)
    assert task.args == (("TENSOR", (1, 16, 10, 9), "float32"),
                         ("TENSOR", (32, 16, 3, 3), "float32"), (1, 1), (1, 1, 1, 1), (1, 1),
                         "float32")
    assert task.flop == tasks[(DIRECT, (32, 16, 3, 3))].flop == 2 * 32 * 90 * 16 * 9
    assert list(task.config_space.space_map) == ["tile_size", "tile_oc", "tile_t",
                                                 "gemm_parallel"]
    with tvm.target.Target(TARGET):
        default = task.config_space.get(default_config_index(task))
    # the modelled default: F(2), as F(4) would leave 9 tiles of 4 x 4 (too few blocks)
    assert (default["tile_size"].val, default["tile_oc"].size[-1]) == (2, 16)
    assert x86_winograd.tile_size(1, 28, 28, x86_winograd.DEFAULT_CONFIG) == 4


@pytest.mark.parametrize("out_channels, winograd", [(12, False), (3, False), (24, True)])
def test_extraction_offers_winograd_only_where_an_output_channel_block_divides(
        out_channels, winograd):
    # the space's channel blocks are 8, 16 and 32: a conv with 12 output channels had an
    # empty split, and extract_from_program failed for the whole model
    data = relay.var("x", shape=(1, 16, 8, 8))
    weight = RNG.standard_normal((out_channels, 16, 3, 3)).astype("float32")
    mod = tvm.IRModule.from_expr(relay.Function([data], relay.nn.conv2d(
        data, relay.const(weight), padding=(1, 1))))
    tasks = _tasks(mod)
    shape = (out_channels, 16, 3, 3)
    # the direct task (conv2d_nchw.x86 under 8 output channels), and Winograd's if it fits
    assert len(tasks) == 1 + winograd and ((WINOGRAD, shape) in tasks) == winograd
    if winograd:
        space = tasks[(WINOGRAD, shape)].config_space
        blocks = {space.get(i)["tile_oc"].size[-1] for i in range(len(space))}
        assert blocks == {8}


@pytest.mark.parametrize("knobs", [
    {"tile_size": 2, "tile_oc": 32, "tile_t": 7, "gemm_parallel": "point"},
    {"tile_size": 4, "tile_oc": 8, "tile_t": 16, "gemm_parallel": "tiles"},
])
def test_tuning_configs_compute_the_conv(knobs):
    """As measured while tuning: blocked data and the kernel transformed and packed outside
    (NumPy here: U = G g G^T), result NCHW16c; against torch."""
    mod, x, _, w = _net()
    task = _tasks(mod)[(WINOGRAD, (32, 16, 3, 3))]
    config = _config(task, **knobs)
    m, oc_bn = knobs["tile_size"], knobs["tile_oc"]
    _, g, _ = winograd_matrices(m, 3)
    u = np.einsum("ar,oirs,bs->aboi", g, w.astype(np.float64), g)
    u = u.reshape(m + 2, m + 2, 32 // oc_bn, oc_bn, 16).transpose(0, 1, 2, 4, 3)
    GLOBAL_SCOPE.in_tuning = True
    try:
        with tvm.target.Target(TARGET):
            sch, bufs = task.instantiate(config)
            func = tvm.build(sch, bufs, TARGET)
    finally:
        GLOBAL_SCOPE.in_tuning = False
    out = tvm.nd.empty([int(d) for d in bufs[-1].shape])
    blocked = x.reshape(1, 1, 16, 10, 9).transpose(0, 1, 3, 4, 2)
    func(tvm.nd.array(blocked.copy()), tvm.nd.array(u.astype("float32")), out)
    y = out.numpy()
    got = y.transpose(0, 1, 4, 2, 3).reshape(1, 32, 10, 9)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                      padding=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _winograd_params(lib) -> list:
    return [p.shape for p in lib.get_params().values() if len(p.shape) == 5 and
            p.shape[0] == p.shape[1] and p.shape[0] in (4, 6)]


def test_a_faster_winograd_record_is_chosen_and_the_result_stays():
    mod, x, want, _ = _net()
    tasks = _tasks(mod)
    winograd, direct = tasks[(WINOGRAD, (32, 16, 3, 3))], tasks[(DIRECT, (32, 16, 3, 3))]
    config = _config(winograd, tile_size=2, tile_oc=16, tile_t=8, gemm_parallel="tiles")
    records = [_record(direct, direct.config_space.get(0), 2e-5),
               _record(winograd, config, 1e-5)]
    untuned_lib, untuned = _build(mod)
    assert _winograd_params(untuned_lib) == []
    assert "winograd" not in untuned_lib.get_graph_json()
    lib, module = _build(mod, records)
    # the kernel transformed and packed at compile time: [alpha, alpha, O / 16, I, 16]
    assert _winograd_params(lib) == [(4, 4, 2, 16, 16)]
    nodes = [n["name"] for n in json.loads(lib.get_graph_json())["nodes"]]
    assert any("winograd" in name for name in nodes)
    # on the untuned blocks: no layout transform more than untuned
    assert lib.get_graph_json().count("layout_transform") == \
        untuned_lib.get_graph_json().count("layout_transform")
    got = _run(module, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, _run(untuned, x), rtol=1e-4, atol=1e-4)
    # a slower Winograd record leaves the direct conv
    slower = [_record(direct, direct.config_space.get(0), 1e-5),
              _record(winograd, config, 2e-5)]
    lib, _ = _build(mod, slower)
    assert _winograd_params(lib) == [] and "winograd" not in lib.get_graph_json()


def test_a_winograd_record_for_a_weight_input_transforms_it_at_run_time():
    """A weight that is not a constant stays an nn.conv2d: the Winograd implementation
    transforms it inside the kernel."""
    mod, x, want, w = _net(weight_var=True)
    tasks = _tasks(mod)
    winograd = tasks[(WINOGRAD, (32, 16, 3, 3))]
    config = _config(winograd, tile_size=4, tile_oc=16, tile_t=4, gemm_parallel="point")
    lib, module = _build(mod, [_record(winograd, config, 1e-6)])
    nodes = [n["name"] for n in json.loads(lib.get_graph_json())["nodes"]]
    assert any("conv2d" in name for name in nodes)
    np.testing.assert_allclose(_run(module, x, w), want, rtol=1e-4, atol=1e-4)


def test_the_strategy_offers_winograd_below_the_direct_conv():
    from kiln.ir.type import TensorType
    from kiln.relay.op.op_attrs import Conv2DAttrs
    from kiln.relay.op.strategy.registry import strategy_for

    data, kernel = te.placeholder((1, 16, 8, 8)), te.placeholder((16, 16, 3, 3))

    def impls(**attrs):
        conv = Conv2DAttrs(**{"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1),
                              "groups": 1, "data_layout": "NCHW", "kernel_layout": "OIHW",
                              **attrs})
        with tvm.target.Target(TARGET):
            found = strategy_for("nn.conv2d", conv, [data, kernel],
                                 TensorType((1, 16, 8, 8), "float32"), TARGET)
        return {i.name: i.plevel for i in found.implementations}

    offered = impls()
    assert offered[WINOGRAD] < offered["conv2d_nchw.x86"]
    assert WINOGRAD not in impls(strides=(2, 2)) and WINOGRAD not in impls(dilation=(2, 2))
    assert x86_winograd.applies((3, 3), (1, 1), (1, 1), 1)
    assert not x86_winograd.applies((1, 1), (1, 1), (1, 1), 1)
