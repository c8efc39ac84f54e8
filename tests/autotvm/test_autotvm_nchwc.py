"""conv2d_NCHWc.x86 and depthwise_conv2d_NCHWc.x86: spaces and fallbacks, every knob value
against torch, records steering AlterOpLayout's blocks (graph and VM), extraction, and the
graph tuner keeping neighbouring layouts in agreement."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from autotvm_templates import config_with as _config

import kiln as tvm
from kiln import autotvm, relay, te
from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.graph_tuner import DPTuner
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.autotvm.record import decode, encode
from kiln.autotvm.task.space import FallbackConfigEntity
from kiln.autotvm.task.task import default_config_index
from kiln.contrib import graph_executor
from kiln.topi.x86 import conv2d as x86_conv2d

TARGET = "llvm"
CONV = "conv2d_NCHWc.x86"
DEPTHWISE = "depthwise_conv2d_NCHWc.x86"


def _torch_conv(x, w, stride=1, pad=1, groups=1):
    return torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=stride,
                                      padding=pad, groups=groups).numpy()


def _workload(data_shape, kernel_shape, stride=1, pad=1):
    return (te.placeholder(data_shape), te.placeholder(kernel_shape), (stride, stride),
            (pad,) * 4, (1, 1), "NCHW", "NCHW", "float32")


def _unblock(y):
    """``[N, C / b, H, W, b]`` -> NCHW."""
    n, cb, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)


def _record(task, config, cost=1e-5):
    return MeasureInput(task.target, task, config), MeasureResult((cost,), 0, 0.1, time.time())


def test_the_space_has_tvms_knobs_and_holds_the_untuned_default():
    task = autotvm.task.create(CONV, _workload((1, 16, 10, 10), (32, 16, 3, 3)), TARGET)
    assert list(task.config_space.space_map) == ["tile_ic", "tile_oc", "tile_ow", "unroll_kw"]
    assert task.flop == 2 * 32 * 100 * 16 * 9
    with tvm.target.Target(TARGET):
        default = task.config_space.get(default_config_index(task))
        want_tile = x86_conv2d.tile_width(16, 10, x86_conv2d.DEFAULT_CONFIG, 3)
    assert (default["tile_ic"].size[-1], default["tile_oc"].size[-1]) == (16, 16)
    assert (default["tile_ow"].size[-1], default["unroll_kw"].val) == (want_tile, False)
    one = autotvm.task.create(CONV, _workload((1, 16, 8, 8), (32, 16, 1, 1), 2, 0), TARGET)
    assert list(one.config_space.space_map) == ["tile_ic", "tile_oc", "tile_ow", "tile_oh"]
    assert [e.val for e in one.config_space.space_map["tile_oh"].entities] == [1, 2]


def test_fallback_and_default_config_are_the_untuned_blocked_kernel_bit_for_bit():
    """Untuned, the template lowers to exactly what Relay's NCHWc implementation builds;
    the space's default config too (tuners measure it first)."""
    # unnamed placeholders, like those the template makes from the workload
    data, kernel = te.placeholder((1, 2, 10, 10, 8)), te.placeholder((2, 2, 3, 3, 8, 16))
    args = (data, kernel, (1, 1), (1, 1, 1, 1), (1, 1), "NCHW8c", "NCHW16c", "float32")
    with tvm.target.Target(TARGET):
        out = x86_conv2d.conv2d_NCHWc(*args)
        want = str(tvm.lower(x86_conv2d.schedule_conv2d_nchw([out]), [data, kernel, out],
                             name="f"))
        with autotvm.task.ApplyConfig(FallbackConfigEntity()):
            sch, bufs = autotvm.task.TASK_TABLE[CONV](*autotvm.task.serialize_args(args))
        assert str(tvm.lower(sch, bufs, name="f")) == want
    # the NCHW-terms workload while tuning: placeholders in the default blocks (16 / 16)
    task = autotvm.task.create(CONV, _workload((1, 16, 10, 10), (32, 16, 3, 3)), TARGET)
    data, kernel = te.placeholder((1, 1, 10, 10, 16), name="data"), \
        te.placeholder((2, 1, 3, 3, 16, 16), name="kernel")
    args = (data, kernel, (1, 1), (1, 1, 1, 1), (1, 1), "NCHW16c", "NCHW16c", "float32")
    GLOBAL_SCOPE.in_tuning = True
    try:
        with tvm.target.Target(TARGET):
            out = x86_conv2d.conv2d_NCHWc(*args)
            want = str(tvm.lower(x86_conv2d.schedule_conv2d_nchw([out]), [data, kernel, out],
                                 name="f"))
            sch, bufs = task.instantiate(task.config_space.get(default_config_index(task)))
            assert str(tvm.lower(sch, bufs, name="f")) == want
    finally:
        GLOBAL_SCOPE.in_tuning = False


def _covering_configs(task) -> list:
    """Configs of ``task`` that together give every knob every one of its values."""
    space, missing = task.config_space, {(name, i) for name, knob in
                                         task.config_space.space_map.items()
                                         for i in range(len(knob))}
    chosen = []
    for index in range(len(space)):
        config = space.get(index)
        have = {(name, knob.entities.index(config[name]))
                for name, knob in space.space_map.items()}
        if have & missing:
            chosen.append(config)
            missing -= have
    assert not missing
    return chosen


@pytest.mark.parametrize("data_shape, kernel_shape, stride, pad", [
    ((1, 16, 9, 9), (32, 16, 3, 3), 1, 1),
    ((1, 16, 8, 8), (16, 16, 1, 1), 2, 0),
])
def test_every_knob_value_computes_the_conv(data_shape, kernel_shape, stride, pad):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(data_shape).astype("float32")
    w = rng.standard_normal(kernel_shape).astype("float32")
    want = _torch_conv(x, w, stride, pad)
    task = autotvm.task.create(CONV, _workload(data_shape, kernel_shape, stride, pad), TARGET)
    for config in _covering_configs(task):
        with tvm.target.Target(TARGET):
            sch, bufs = task.instantiate(config)
            func = tvm.build(sch, bufs, TARGET)
        out = tvm.nd.array(np.zeros([int(d) for d in bufs[-1].shape], "float32"))
        func(tvm.nd.array(x), tvm.nd.array(w), out)
        assert out.shape[-1] == config["tile_oc"].size[-1]
        np.testing.assert_allclose(_unblock(out.numpy()), want, rtol=1e-4, atol=1e-4,
                                   err_msg=str(config))


def _residual_net():
    """conv 16->32 (3x3) + relu, conv 32->32 (3x3), the residual add; constants weights."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.2
    w2 = rng.standard_normal((32, 32, 3, 3)).astype("float32") * 0.2
    x = relay.var("x", shape=(1, 16, 10, 10))
    a = relay.nn.relu(relay.nn.conv2d(x, relay.const(w1), padding=(1, 1)))
    b = relay.nn.conv2d(a, relay.const(w2), padding=(1, 1))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.add(a, b)))
    data = rng.standard_normal((1, 16, 10, 10)).astype("float32")
    hidden = np.maximum(_torch_conv(data, w1), 0)
    return mod, data, hidden + _torch_conv(hidden, w2)


def _build(mod, records=None, vm=False):
    with tvm.transform.PassContext(opt_level=3):
        if records is None:
            return relay.vm.compile(mod, TARGET) if vm else relay.build(mod, TARGET)
        with autotvm.apply_history_best(records):
            return relay.vm.compile(mod, TARGET) if vm else relay.build(mod, TARGET)


def _run_graph(lib, data):
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    module.set_input("x", data)
    module.run()
    return module.get_output(0).numpy()


def test_records_choose_the_blocks_and_the_model_stays_correct_on_graph_and_vm():
    mod, data, want = _residual_net()
    tasks = {t.args[1][1]: t for t in autotvm.task.extract_from_program(mod, {}, TARGET)
             if t.name == CONV}
    first, second = tasks[(32, 16, 3, 3)], tasks[(32, 32, 3, 3)]
    records = [_record(first, _config(first, tile_ic=8, tile_oc=8)),
               _record(second, _config(second, tile_ic=8, tile_oc=32, unroll_kw=True))]
    untuned = _build(mod)
    assert sorted(p.shape for p in untuned.get_params().values()) == \
        [(2, 2, 3, 3, 16, 16), (2, 16, 3, 3, 16)]
    lib = _build(mod, records)
    # the first conv reads the graph's NCHW input (OIHW8o), the second NCHW8c data
    assert sorted(p.shape for p in lib.get_params().values()) == \
        [(1, 4, 3, 3, 8, 32), (4, 16, 3, 3, 8)]
    np.testing.assert_allclose(_run_graph(lib, data), want, rtol=1e-4, atol=1e-4)
    exe = _build(mod, records, vm=True)
    shapes = sorted(c.shape for c in exe.constants if len(getattr(c, "shape", ())) > 4)
    assert shapes == [(1, 4, 3, 3, 8, 32), (4, 16, 3, 3, 8)]
    machine = tvm.runtime.vm.VirtualMachine(exe, tvm.cpu(0))
    np.testing.assert_allclose(machine.run(data).numpy(), want, rtol=1e-4, atol=1e-4)


def test_conv2d_nchw_records_no_longer_stop_the_blocking():
    """A record of the older conv2d_nchw.x86 task (an old log) leaves a conv that
    AlterOpLayout blocks on its default blocks."""
    mod, data, want = _residual_net()
    legacy = autotvm.task.create("conv2d_nchw.x86", (
        te.placeholder((1, 16, 10, 10)), te.placeholder((32, 16, 3, 3)), (1, 1),
        (1, 1, 1, 1), (1, 1), "float32"), TARGET)
    lib = _build(mod, [_record(legacy, _config(legacy, tile_oc=32))])
    assert sorted(p.shape for p in lib.get_params().values()) == \
        [(2, 2, 3, 3, 16, 16), (2, 16, 3, 3, 16)]
    np.testing.assert_allclose(_run_graph(lib, data), want, rtol=1e-4, atol=1e-4)


def test_extract_from_program_gives_deduplicated_nchwc_tasks_of_a_residual_net():
    rng = np.random.default_rng(2)

    def const(*shape):
        return relay.const(rng.standard_normal(shape).astype("float32"))

    x = relay.var("x", shape=(1, 16, 8, 8))
    a = relay.nn.relu(relay.nn.conv2d(x, const(16, 16, 3, 3), padding=(1, 1)))
    b = relay.nn.conv2d(a, const(16, 16, 3, 3), padding=(1, 1))
    c = relay.nn.relu(relay.nn.conv2d(relay.add(a, b), const(16, 16, 3, 3), padding=(1, 1)))
    d = relay.nn.conv2d(c, const(32, 16, 1, 1), strides=(2, 2))
    e = relay.nn.conv2d(d, const(32, 1, 3, 3), padding=(1, 1), groups=32)
    f = relay.nn.conv2d(e, const(4, 32, 1, 1))  # narrow: stays NCHW, the older task
    mod = tvm.IRModule.from_expr(relay.Function([x], f))
    tasks = autotvm.task.extract_from_program(mod, {}, TARGET,
                                              ops=[relay.op.get("nn.conv2d")])
    got = sorted((t.name, t.args[1][1]) for t in tasks)
    # the 3x3 stride-1 conv also as the Winograd task (TVM's arm_cpu extraction gives both)
    assert got == [(CONV, (16, 16, 3, 3)), (CONV, (32, 16, 1, 1)),
                   ("conv2d_nchw.x86", (4, 32, 1, 1)),
                   ("conv2d_nchw_winograd.x86", (16, 16, 3, 3)), (DEPTHWISE, (32, 1, 3, 3))]
    nchwc = next(t for t in tasks if t.name == CONV)
    assert nchwc.args[5:] == ("NCHW", "NCHW", "float32")


def test_depthwise_template_every_block_and_its_record_steers_the_layout():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 9, 9)).astype("float32")
    w = rng.standard_normal((32, 1, 3, 3)).astype("float32")
    want = _torch_conv(x, w, groups=32)
    task = autotvm.task.create(DEPTHWISE, _workload(x.shape, w.shape), TARGET)
    assert list(task.config_space.space_map) == ["tile_oc", "tile_ow"]
    with tvm.target.Target(TARGET):
        default = task.config_space.get(default_config_index(task))
    assert default["tile_oc"].size[-1] == 16
    for block in (4, 8, 16, 32):
        config = _config(task, tile_oc=block)
        with tvm.target.Target(TARGET):
            sch, bufs = task.instantiate(config)
            func = tvm.build(sch, bufs, TARGET)
        out = tvm.nd.array(np.zeros([int(d) for d in bufs[-1].shape], "float32"))
        func(tvm.nd.array(x), tvm.nd.array(w), out)
        np.testing.assert_allclose(_unblock(out.numpy()), want, rtol=1e-4, atol=1e-4)
    # in a model: a record's block is AlterOpLayout's (the kernel OIHW1i8o)
    pointwise = rng.standard_normal((16, 32, 1, 1)).astype("float32")
    data = relay.var("x", shape=x.shape)
    body = relay.nn.relu(relay.nn.conv2d(data, relay.const(w), padding=(1, 1), groups=32))
    mod = tvm.IRModule.from_expr(relay.Function([data], relay.nn.conv2d(
        body, relay.const(pointwise))))
    lib = _build(mod, [_record(task, _config(task, tile_oc=8))])
    assert (4, 1, 3, 3, 1, 8) in [p.shape for p in lib.get_params().values()]
    np.testing.assert_allclose(_run_graph(lib, x), _torch_conv(np.maximum(want, 0), pointwise,
                                                               pad=0), rtol=1e-4, atol=1e-4)


def test_graph_tuner_makes_neighbouring_layouts_agree(tmp_path):
    """Per layer, the first conv is fastest writing NCHW8c and the second reading NCHW16c;
    the graph tuner pays the nanosecond for blocks that agree instead of a transform."""
    mod, data, want = _residual_net()
    tasks = {t.args[1][1]: t for t in autotvm.task.extract_from_program(mod, {}, TARGET)
             if t.name == CONV}
    first, second = tasks[(32, 16, 3, 3)], tasks[(32, 32, 3, 3)]
    records = [_record(first, _config(first, tile_ic=16, tile_oc=8), 1.000e-4),
               _record(first, _config(first, tile_ic=16, tile_oc=16), 1.001e-4),
               _record(second, _config(second, tile_ic=16, tile_oc=16), 1.000e-4),
               _record(second, _config(second, tile_ic=8, tile_oc=8), 1.001e-4)]
    tuner = DPTuner(mod["main"], {"x": (1, 16, 10, 10)}, records,
                    [relay.op.get("nn.conv2d")], TARGET)
    tuner.benchmark_layout_transform(min_exec_num=10)
    tuner.run()
    chosen = {inp.task.args[1][1]: inp.config for inp, _ in tuner.get_optimal_records()}
    assert chosen[(32, 16, 3, 3)]["tile_oc"].size[-1] == \
        chosen[(32, 32, 3, 3)]["tile_ic"].size[-1]
    assert tuner.total_cost(tuner._choice) < tuner.total_cost(tuner.per_layer_best_choice())
    log = tmp_path / "graph.log"
    tuner.write_opt_sch2record_file(str(log))
    with autotvm.apply_graph_best(str(log)), tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, TARGET)
    np.testing.assert_allclose(_run_graph(lib, data), want, rtol=1e-4, atol=1e-4)


def test_records_outside_the_space_are_ignored_and_bad_lines_raise(tmp_path, caplog):
    mod, data, want = _residual_net()
    task = next(t for t in autotvm.task.extract_from_program(mod, {}, TARGET)
                if t.args[1][1] == (32, 16, 3, 3) and t.name == CONV)
    inp, res = _record(task, _config(task, tile_ic=8, tile_oc=8))
    line = json.loads(encode(inp, res))
    line["config"]["entity"][0] = ["tile_ic", "sp", [-1, 2]]  # a block kiln never offers
    log = tmp_path / "foreign.log"
    log.write_text(json.dumps(line) + "\n")
    with caplog.at_level("WARNING", "autotvm"):
        lib = _build(mod, str(log))
    assert "not in kiln's space" in caplog.text
    assert (2, 16, 3, 3, 16) in [p.shape for p in lib.get_params().values()]  # the default
    np.testing.assert_allclose(_run_graph(lib, data), want, rtol=1e-4, atol=1e-4)
    line["config"]["entity"][0] = ["tile_ic", "sp", "eight"]
    with pytest.raises(tvm.TVMError):
        decode(json.dumps(line))


def test_row_blocks_of_a_1x1_conv_with_two_outputs():
    """tile_oh where the conv is not computed inside a single output stage (it and its relu
    are both outputs): the conv's own loops take the rows x columns register block."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 6, 6)).astype("float32")
    w = rng.standard_normal((16, 16, 1, 1)).astype("float32")
    data, kernel = te.placeholder((1, 2, 6, 6, 8)), te.placeholder((2, 2, 1, 1, 8, 8))
    config = {"tile_oh": 2, "tile_ow": 3}
    with tvm.target.Target(TARGET):
        y = x86_conv2d.conv2d_NCHWc(data, kernel, 1, 0, 1, "NCHW8c", "NCHW8c",
                                    config=config)
        z = tvm.topi.nn.relu(y)
        func = tvm.build(x86_conv2d.schedule_conv2d_nchw([y, z], config), [data, kernel, y, z],
                         TARGET)
    blocked_x = x.reshape(1, 2, 8, 6, 6).transpose(0, 1, 3, 4, 2)
    blocked_w = w.reshape(2, 8, 2, 8, 1, 1).transpose(0, 2, 4, 5, 3, 1)
    outs = [tvm.nd.array(np.zeros((1, 2, 6, 6, 8), "float32")) for _ in range(2)]
    func(tvm.nd.array(blocked_x), tvm.nd.array(blocked_w), *outs)
    want = _torch_conv(x, w, pad=0)
    np.testing.assert_allclose(_unblock(outs[0].numpy()), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_unblock(outs[1].numpy()), np.maximum(want, 0), rtol=1e-4,
                               atol=1e-4)
