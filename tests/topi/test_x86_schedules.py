"""x86 schedules (parallel, vectorized, register-blocked) give the NumPy answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from topi_testlib import run_many

from kiln import topi
from kiln.topi.x86 import conv2d as x86_conv2d
from kiln.topi.x86 import dense as x86_dense

RNG = np.random.default_rng(5)


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_dense_pack_with_and_without_epilogue(target):
    a, w, b = f32(6, 40), f32(48, 40), f32(48)
    a1 = f32(1, 24)
    w1 = f32(20, 24)

    def plain(x, y):
        return x86_dense.dense_pack(x, y)

    def with_epilogue(x, y, z):
        return topi.nn.relu(x86_dense.dense_pack(x, y, z))

    def odd_config(x, y):
        return x86_dense.dense_pack(x, y, config={"tile_x": 8})

    cases = [(plain, [a, w]), (with_epilogue, [a, w, b]), (plain, [a1, w1])]
    results = run_many(cases, target, x86_dense.schedule_dense_pack)
    np.testing.assert_allclose(results[0][0], a @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(results[1][0], np.maximum(a @ w.T + b, 0), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(results[2][0], a1 @ w1.T, rtol=1e-4, atol=1e-4)
    odd = run_many([(odd_config, [a, w])], target,
                   lambda outs: x86_dense.schedule_dense_pack(outs, {"tile_x": 8,
                                                                     "tile_y": 3}))
    np.testing.assert_allclose(odd[0][0], a @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_conv2d_nchw_x86_with_and_without_epilogue(target):
    x, w, b = f32(1, 5, 9, 10), f32(6, 5, 3, 3), f32(6)
    x2, w2 = f32(2, 3, 11, 11), f32(4, 3, 5, 5)

    def plain(d, k):
        return x86_conv2d.conv2d_nchw(d, k, 1, 1, 1)

    def fused(d, k, bias):
        return topi.nn.relu(topi.nn.bias_add(x86_conv2d.conv2d_nchw(d, k, 1, 1, 1), bias))

    def strided(d, k):
        return x86_conv2d.conv2d_nchw(d, k, 2, 2, 1)

    results = run_many([(plain, [x, w]), (fused, [x, w, b]), (strided, [x2, w2])], target,
                       x86_conv2d.schedule_conv2d_nchw)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    np.testing.assert_allclose(results[0][0], ref.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(results[1][0], torch.relu(ref + torch.from_numpy(b)[:, None,
                                                                                   None]),
                               rtol=1e-4, atol=1e-4)
    ref2 = torch.nn.functional.conv2d(torch.from_numpy(x2), torch.from_numpy(w2), stride=2,
                                      padding=2)
    np.testing.assert_allclose(results[2][0], ref2.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_injective_and_reduce_schedules(target):
    x, y = f32(3, 16), f32(16)
    odd = f32(5, 7)
    cases = [(lambda a, b: topi.exp(topi.add(a, b)), [x, y]),
             (lambda a: topi.multiply(a, 2.0), [odd]),
             (lambda a: topi.negative(a), [np.zeros((0, 8), "float32")])]
    results = run_many(cases, target, topi.x86.schedule_injective)
    np.testing.assert_allclose(results[0][0], np.exp(x + y), rtol=1e-5)
    np.testing.assert_allclose(results[1][0], odd * 2)
    assert results[2][0].shape == (0, 8)
    reduced = run_many([(lambda a: topi.sum(a, axis=1), [x]),
                        (lambda a: topi.argmax(a, axis=0), [x]),
                        (lambda a: topi.max(a, axis=None), [odd])], target,
                       topi.x86.schedule_reduce)
    np.testing.assert_allclose(reduced[0][0], x.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(reduced[1][0], x.argmax(0))
    np.testing.assert_allclose(reduced[2][0], odd.max())


def test_arm_cpu_injective_schedule_builds_without_threads():
    x = f32(4, 8)
    results = run_many([(lambda a: topi.sigmoid(a), [x])], "c -keys=arm_cpu",
                       topi.arm_cpu.schedule_injective)
    np.testing.assert_allclose(results[0][0], 1 / (1 + np.exp(-x)), rtol=1e-5)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_depthwise_conv2d_x86(target):
    from kiln.topi.x86 import depthwise

    x, w, b = f32(1, 4, 9, 14), f32(8, 1, 3, 3), f32(8)

    def plain(d, k):
        return depthwise.depthwise_conv2d_nchw(d, k, 1, 1, 1)

    def fused(d, k, bias):
        return topi.nn.relu(topi.nn.bias_add(depthwise.depthwise_conv2d_nchw(d, k, 2, 1, 1),
                                             bias))

    results = run_many([(plain, [x, w]), (fused, [x, w, b])], target,
                       depthwise.schedule_depthwise_conv2d_nchw)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1,
                                     groups=4)
    np.testing.assert_allclose(results[0][0], ref.numpy(), rtol=1e-4, atol=1e-4)
    ref2 = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                                      padding=1, groups=4) + torch.from_numpy(b)[:, None, None]
    np.testing.assert_allclose(results[1][0], torch.relu(ref2).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_transpose_moving_the_innermost_axis_is_tiled_and_exact(target):
    from kiln.topi.x86 import schedule_injective

    x2, x4 = f32(48, 32), f32(2, 16, 8, 24)
    cases = [(lambda a: topi.transpose(a, [1, 0]), [x2]),
             (lambda a: topi.multiply(topi.transpose(a, [0, 3, 1, 2]), 2.0), [x4]),
             (lambda a: topi.transpose(a, [0, 2, 1, 3]), [x4])]  # innermost stays: untiled
    results = run_many(cases, target, schedule_injective)
    np.testing.assert_array_equal(results[0][0], x2.T)
    np.testing.assert_array_equal(results[1][0], x4.transpose(0, 3, 1, 2) * 2.0)
    np.testing.assert_array_equal(results[2][0], x4.transpose(0, 2, 1, 3))

    from kiln import te
    sch = schedule_injective([topi.transpose(te.placeholder((48, 32)), [1, 0])])
    assert len(sch.stages[-1].leaf_iter_vars) == 4  # (tiles fused), row, 2 x column parts


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_odd_rows_stay_the_inner_loop_of_an_injective_op(target):
    """A padded image row (13 wide) is the inner loop under one parallel loop over the rest,
    not fused into per-element tasks."""
    from kiln import te
    from kiln.topi.x86 import schedule_injective

    x = f32(2, 3, 11, 11)
    pad = (lambda a: topi.nn.pad(topi.multiply(a, 2.0), [0, 0, 1, 1], [0, 0, 1, 1], 7.0))
    results = run_many([(pad, [x])], target, schedule_injective)
    want = np.pad(x * 2.0, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=7.0)
    np.testing.assert_array_equal(results[0][0], want)
    sch = schedule_injective([topi.nn.pad(te.placeholder((2, 3, 11, 11)), [0, 0, 1, 1],
                                          [0, 0, 1, 1])])
    row = sch.stages[-1].leaf_iter_vars[-1]
    assert int(row.dom.extent) == 13
