"""The ``matmul_pack.x86`` template (``nn.matmul``, kiln.jit's ``@``): every transpose form
tunes, tuned records reach relay.build and kiln.jit, results match NumPy."""

from __future__ import annotations

import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay, te
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.autotvm.task.task import default_config_index
from kiln.contrib import graph_executor
from kiln.relay.op.strategy.registry import select_implementation

TARGET = "llvm -mcpu=core-avx2"
RNG = np.random.default_rng(5)


def _operands(m, n, k, ta, tb):
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype("float32")
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype("float32")
    return a, b, (a.T if ta else a) @ (b.T if tb else b)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False),
                                   (True, True)])
def test_configs_of_every_transpose_form_compute_the_product(ta, tb):
    a, b, want = _operands(6, 32, 24, ta, tb)
    task = autotvm.task.create("matmul_pack.x86", (te.placeholder(a.shape),
                                                   te.placeholder(b.shape), "float32", ta, tb),
                               TARGET)
    space = task.config_space
    default = default_config_index(task)
    assert default is not None
    picks = {default, 0, len(space) - 1, *RNG.choice(len(space), size=3, replace=False)}
    for index in sorted(int(i) for i in picks):
        with tvm.target.Target(TARGET):
            sch, args = task.instantiate(space.get(index))
        func = tvm.build(sch, args, TARGET)
        out = tvm.nd.empty(want.shape)
        func(tvm.nd.array(a), tvm.nd.array(b), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4,
                                   err_msg=str(space.get(index)))


def _matmul_module(ta, tb, a, b):
    x = relay.var("a", shape=a.shape)
    y = relay.var("b", shape=b.shape)
    return tvm.IRModule.from_expr(relay.Function(
        [x, y], relay.nn.matmul(x, y, transpose_a=ta, transpose_b=tb)))


def _record_file(tmp_path, task, index):
    log = tmp_path / "matmul.log"
    result = MeasureResult((1e-5,), 0, 0.1, time.time())
    log.write_text(autotvm.record.encode(
        MeasureInput(task.target, task, task.config_space.get(index)), result) + "\n")
    return log


def test_tuned_matmul_record_reaches_relay_build_and_jit(tmp_path, monkeypatch):
    from kiln.jit import myia
    from kiln.topi.x86 import matmul as x86_matmul

    # (a transposed b becomes nn.dense, whose template is dense_pack.x86)
    a, b, want = _operands(4, 32, 16, False, False)
    mod = _matmul_module(False, False, a, b)
    (task,) = autotvm.task.extract_from_program(mod, None, TARGET)
    assert task.name == "matmul_pack.x86"
    space = task.config_space
    # a config unlike the default: the smallest column block the space offers
    index = min(range(len(space)), key=lambda i: (space.get(i)["tile_x"].size[-1], i))
    tuned = space.get(index)
    log = _record_file(tmp_path, task, index)
    inputs = [te.placeholder(a.shape), te.placeholder(b.shape)]
    attrs = mod["main"].body.attrs
    out_type = relay.TensorType(want.shape, "float32")
    with autotvm.apply_history_best(str(log)):
        impl, _ = select_implementation("nn.matmul", attrs, inputs, out_type, TARGET)
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=TARGET)
        scheduled = []  # the knobs kiln.jit's build schedules its matmul with
        schedule = x86_matmul.schedule_matmul_pack
        monkeypatch.setattr(x86_matmul, "schedule_matmul_pack", lambda outs, config=None: (
            scheduled.append(config), schedule(outs, config))[1])
        got_jit = myia(lambda p, q: p @ q)(a, b)
    assert impl.name == "matmul_pack.x86"
    assert impl.config["tile_x"] == tuned["tile_x"].size[-1]
    assert impl.config["tile_k"] == tuned["tile_k"].size[-1]
    assert scheduled and all(c["tile_x"] == tuned["tile_x"].size[-1] for c in scheduled)
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    module.set_input("a", a)
    module.set_input("b", b)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_jit, want, rtol=1e-4, atol=1e-4)
