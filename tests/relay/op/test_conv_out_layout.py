"""A convolution's ``out_layout`` (its result in another layout than its data) is honoured by
every build: the kernels wrote the data's layout into a tensor typed in ``out_layout``
(a failed argument check, or a silently wrong answer when both shapes agreed). Oracle: torch,
its NCHW result rearranged with NumPy."""

import json

import numpy as np
import pytest
import torch

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

RNG = np.random.default_rng(11)


def _blocked(a: np.ndarray, block: int) -> np.ndarray:
    """NCHW -> NCHW{block}c."""
    n, c, h, w = a.shape
    return a.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2)


def _run(call, x, w, target, opt_level=3):
    data = relay.var("x", shape=x.shape, dtype=str(x.dtype))
    weight = relay.var("w", shape=w.shape, dtype=str(w.dtype))
    mod = tvm.IRModule.from_expr(relay.Function([data, weight], call(data, weight)))
    with tvm.transform.PassContext(opt_level=opt_level):
        lib = relay.build(mod, target=target, params={"w": w})
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(x=x)
    kernels = [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"]
               if n["op"] == "tvm_op"]
    return m.get_output(0).numpy(), kernels


# (data shape, out channels, stride, out_layout, torch result -> out_layout)
CONV2D_CASES = [
    # C = H = W: the NCHW result has the NHWC shape (was silently wrong)
    ((1, 10, 10, 10), 10, 1, "NHWC", lambda a: a.transpose(0, 2, 3, 1)),
    ((2, 16, 9, 9), 32, 1, "NCHW16c", lambda a: _blocked(a, 16)),
    ((2, 3, 11, 11), 24, 2, "NCHW8c", lambda a: _blocked(a, 8)),
    ((1, 8, 10, 10), 12, 2, "NCHW3c", lambda a: _blocked(a, 3)),
]


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=core-avx2", "c"])
@pytest.mark.parametrize("shape,out_channels,stride,out_layout,rearrange", CONV2D_CASES,
                         ids=[case[3] for case in CONV2D_CASES])
def test_conv2d_result_in_out_layout_matches_torch(shape, out_channels, stride, out_layout,
                                                   rearrange, target):
    x = RNG.standard_normal(shape).astype("float32")
    w = RNG.standard_normal((out_channels, shape[1], 3, 3)).astype("float32")

    def call(d, k):
        return relay.nn.relu(relay.nn.conv2d(d, k, (stride, stride), (1, 1, 1, 1),
                                             channels=out_channels, kernel_size=(3, 3),
                                             out_layout=out_layout))

    got, kernels = _run(call, x, w, target)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride,
                                      padding=1).numpy()
    np.testing.assert_allclose(got, np.maximum(rearrange(want), 0), rtol=1e-4, atol=1e-4)
    if out_layout != "NHWC":
        # x86 computes a blocked result directly: one kernel reading the NCHW input as it is
        assert len(kernels) == 1 and "contrib_conv2d_NCHWc" in kernels[0]


def test_conv2d_out_layout_without_alter_op_layout_matches_torch():
    x = RNG.standard_normal((1, 16, 7, 7)).astype("float32")
    w = RNG.standard_normal((16, 16, 3, 3)).astype("float32")
    got, _ = _run(lambda d, k: relay.nn.conv2d(d, k, padding=(1, 1), channels=16,
                                               kernel_size=(3, 3), out_layout="NCHW16c"),
                  x, w, "llvm", opt_level=0)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    np.testing.assert_allclose(got, _blocked(want.numpy(), 16), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_conv1d_and_conv3d_results_in_channels_last_match_torch(target):
    x1 = RNG.standard_normal((2, 8, 12)).astype("float32")
    w1 = RNG.standard_normal((6, 8, 3)).astype("float32")
    got, _ = _run(lambda d, k: relay.nn.conv1d(d, k, padding=(1, 1), out_layout="NWC"),
                  x1, w1, target)
    want = torch.nn.functional.conv1d(torch.from_numpy(x1), torch.from_numpy(w1), padding=1)
    np.testing.assert_allclose(got, want.numpy().transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    x3 = RNG.standard_normal((1, 4, 5, 6, 7)).astype("float32")
    w3 = RNG.standard_normal((8, 4, 3, 3, 3)).astype("float32")
    got, _ = _run(lambda d, k: relay.nn.conv3d(d, k, padding=(1, 1, 1), out_layout="NDHWC"),
                  x3, w3, target)
    want = torch.nn.functional.conv3d(torch.from_numpy(x3), torch.from_numpy(w3), padding=1)
    np.testing.assert_allclose(got, want.numpy().transpose(0, 2, 3, 4, 1), rtol=1e-4,
                               atol=1e-4)


def test_int8_conv2d_result_in_a_blocked_out_layout_matches_exact_sums():
    # the 8-bit x86 kernel writes NCHW: a blocked out_layout takes the generic path
    x = RNG.integers(0, 20, (1, 16, 8, 8)).astype("uint8")
    w = RNG.integers(-5, 5, (32, 16, 3, 3)).astype("int8")
    got, _ = _run(lambda d, k: relay.nn.conv2d(d, k, padding=(1, 1), channels=32,
                                               kernel_size=(3, 3), out_dtype="int32",
                                               out_layout="NCHW16c"),
                  x, w, "llvm")
    want = torch.nn.functional.conv2d(torch.from_numpy(x.astype("float64")),
                                      torch.from_numpy(w.astype("float64")), padding=1)
    np.testing.assert_array_equal(got, _blocked(want.numpy().astype("int64"), 16))
