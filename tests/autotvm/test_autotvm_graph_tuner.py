"""The graph tuner: its searches against brute force, layout transforms timed, the chosen
records built and checked against NumPy."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm.graph_tuner import (
    DPTuner,
    PBQPTuner,
    layout_shape,
    min_sum,
    pbqp,
)
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.contrib import graph_executor

TARGET = "llvm"


def _brute_force(unary, pairwise):
    best = None
    for choice in itertools.product(*(range(len(u)) for u in unary)):
        cost = sum(u[c] for u, c in zip(unary, choice))
        cost += sum(m[choice[a], choice[b]] for (a, b), m in pairwise.items())
        best = cost if best is None else min(best, cost)
    return best


def _cost(unary, pairwise, choice):
    return sum(u[c] for u, c in zip(unary, choice)) + sum(
        m[choice[a], choice[b]] for (a, b), m in pairwise.items())


GRAPHS = {
    "chain": [(0, 1), (1, 2), (2, 3), (3, 4)],
    "residual": [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (2, 4)],
    "diamond": [(0, 1), (0, 2), (1, 3), (2, 3)],
    "complete4": [(a, b) for a in range(4) for b in range(a + 1, 4)],
}


@pytest.mark.parametrize("shape", sorted(GRAPHS))
@pytest.mark.parametrize("seed", range(4))
def test_dp_is_optimal_and_pbqp_optimal_where_its_reductions_are_exact(shape, seed):
    rng = np.random.default_rng(seed)
    edges = GRAPHS[shape]
    n = 1 + max(max(e) for e in edges)
    unary = [rng.random(rng.integers(1, 5)) for _ in range(n)]
    pairwise = {(a, b): rng.random((len(unary[a]), len(unary[b]))) for a, b in edges}
    optimum = _brute_force(unary, pairwise)
    assert _cost(unary, pairwise, min_sum(unary, pairwise, list(range(n)))) == \
        pytest.approx(optimum)
    heuristic = _cost(unary, pairwise, pbqp(unary, pairwise))
    if shape == "complete4":  # a node of degree 3 at every step: RN, a heuristic
        assert heuristic >= optimum - 1e-12
    else:
        assert heuristic == pytest.approx(optimum)


def test_dp_refuses_a_table_past_its_limit():
    unary = [np.zeros(4)] * 4
    pairwise = {(a, b): np.zeros((4, 4)) for a in range(4) for b in range(a + 1, 4)}
    with pytest.raises(tvm.TVMError, match="use PBQPTuner"):
        min_sum(unary, pairwise, [0, 1, 2, 3], max_table=16)


def _convnet():
    data = relay.var("data", shape=(1, 8, 8, 8), dtype="float32")
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal(s).astype("float32") * 0.2 for i, s in
               enumerate([(16, 8, 3, 3), (16, 16, 3, 3), (8, 16, 1, 1)])}
    w = {k: relay.var(k, shape=v.shape) for k, v in weights.items()}
    a = relay.nn.relu(relay.nn.conv2d(data, w["w0"], padding=(1, 1), channels=16,
                                      kernel_size=(3, 3)))
    b = relay.nn.conv2d(a, w["w1"], padding=(1, 1), channels=16, kernel_size=(3, 3))
    c = relay.nn.conv2d(relay.add(a, b), w["w2"], channels=8, kernel_size=(1, 1))
    func = relay.Function([data, *w.values()], c)
    return tvm.IRModule.from_expr(func), weights


def _numpy_convnet(x, p):
    def conv(v, k, pad):
        v = np.pad(v, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        kh, kw = k.shape[2:]
        out = 0
        for dy in range(kh):
            for dx in range(kw):
                out = out + np.einsum("nchw,oc->nohw",
                                      v[:, :, dy:dy + v.shape[2] - 2 * pad,
                                        dx:dx + v.shape[3] - 2 * pad], k[:, :, dy, dx])
        return out
    a = np.maximum(conv(x, p["w0"], 1), 0)
    return conv(a + conv(a, p["w1"], 1), p["w2"], 0)


def _records(tasks, per_task=4, scale=1e-4):
    """Tuning records: a few configs of each task with made-up times near ``scale``."""
    rng = np.random.default_rng(1)
    records = []
    for task in tasks:
        space = task.config_space
        for index in rng.choice(len(space), size=per_task, replace=False):
            result = MeasureResult((float(rng.uniform(scale, 3 * scale)),), 0, 0.1, time.time())
            records.append((MeasureInput(task.target, task, space.get(int(index))), result))
    return records


def _legacy_tasks(tasks):
    """The older conv2d_nchw.x86 tasks of the same convs (NCHW in and out)."""
    return [autotvm.task.create("conv2d_nchw.x86", (*t.args[:5], t.args[7]), TARGET)
            for t in tasks]


def test_graph_tuner_on_a_small_convnet_picks_records_that_build_and_match_numpy(tmp_path):
    mod, params = _convnet()
    tasks = autotvm.task.extract_from_program(mod, params, TARGET,
                                              ops=[relay.op.get("nn.conv2d")])
    # the two 3x3 convs also as Winograd tasks, which the graph tuner leaves to
    # apply_history_best (their layouts are the direct conv's defaults)
    assert sorted(t.args[1][1] for t in tasks if t.name == "conv2d_nchw_winograd.x86") == \
        [(16, 8, 3, 3), (16, 16, 3, 3)]
    tasks = [t for t in tasks if t.name == "conv2d_NCHWc.x86"]
    assert len(tasks) == 3
    conv = [relay.op.get("nn.conv2d")]

    # kiln's NCHW convolution: no transform whatever the blocks, so the per-layer best
    tuner = DPTuner(mod["main"], {"data": (1, 8, 8, 8)}, _records(_legacy_tasks(tasks)), conv,
                    TARGET)
    tuner.benchmark_layout_transform(min_exec_num=10)
    tuner.run()
    assert tuner.per_layer_best_choice() == tuner._choice

    # the NCHWc template's blocked layouts (NCHW{tile_ic}c in, NCHW{tile_oc}c out): the
    # transforms between the convs count (the made-up conv times are a few transforms' long,
    # so the choice is a trade-off)
    records = _records(tasks, scale=2e-6)
    layout_log = tmp_path / "layouts.json"
    chosen = {}
    for cls in (DPTuner, PBQPTuner):
        tuner = cls(mod["main"], {"data": (1, 8, 8, 8)}, records, conv, TARGET, max_sch_num=3)
        tuner.benchmark_layout_transform(min_exec_num=10, layout_records=str(layout_log))
        tuner.run()
        members, unary, pairwise = tuner.problem()
        assert len(members) == 3 and all(len(u) == 3 for u in unary)
        assert tuner.total_cost(tuner._choice) == pytest.approx(_brute_force(unary, pairwise))
        assert tuner.total_cost(tuner._choice) <= \
            tuner.total_cost(tuner.per_layer_best_choice()) + 1e-12
        out = tmp_path / f"{cls.__name__}.log"
        tuner.write_opt_sch2record_file(str(out))
        chosen[cls] = out
    timed = layout_log.read_text().splitlines()
    assert timed and all('"cost"' in line for line in timed)

    x = np.random.default_rng(2).standard_normal((1, 8, 8, 8)).astype("float32")
    want = _numpy_convnet(x.astype("float64"), params)
    with autotvm.apply_graph_best(str(chosen[DPTuner])):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=TARGET, params=params)
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    module.set_input("data", x)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_graph_tuner_rejects_bad_input(tmp_path):
    mod, params = _convnet()
    conv = [relay.op.get("nn.conv2d")]
    with pytest.raises(tvm.TVMError, match="Could not find 'x'"):
        DPTuner(mod["main"], {"x": (1, 8, 8, 8)}, [], conv, TARGET)
    with pytest.raises(tvm.TVMError, match="has shape"):
        DPTuner(mod["main"], {"data": (1, 8, 4, 4)}, [], conv, TARGET)
    with pytest.raises(tvm.TVMError, match="no record for nn.conv2d"):
        DPTuner(mod["main"], {"data": (1, 8, 8, 8)}, [], conv, TARGET)
    with pytest.raises(tvm.TVMError, match="no call of"):
        DPTuner(mod["main"], {}, [], [relay.op.get("nn.dense")], TARGET)
    with pytest.raises(tvm.TVMError, match="does not apply"):
        layout_shape((1, 6, 4, 4), "NCHW4c")
    tasks = autotvm.task.extract_from_program(mod, params, TARGET)
    records = _records(tasks, per_task=2)
    log = tmp_path / "two.log"
    log.write_text("\n".join(autotvm.record.encode(i, r) for i, r in records) + "\n")
    with pytest.raises(tvm.TVMError, match="two configs for workload"):
        autotvm.apply_graph_best(str(log))
    tuner = PBQPTuner(mod["main"], {}, records, conv, TARGET)
    with pytest.raises(tvm.TVMError, match="call run"):
        tuner.get_optimal_records()
    with pytest.raises(tvm.TVMError, match="infer_layout=True"):
        tuner.benchmark_layout_transform(infer_layout=True)
    tuner._target = tvm.target.Target("c -keys=arm_cpu -mcpu=cortex-m4")
    with pytest.raises(tvm.TVMError, match="runs elsewhere"):
        tuner.benchmark_layout_transform()
