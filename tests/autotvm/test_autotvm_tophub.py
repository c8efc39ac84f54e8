"""TopHub: kiln's packaged pre-tuned records, applied by autotvm.tophub.context(target)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.contrib import graph_executor
from kiln.runtime.error import TVMError

# the packaged workload: ResNet-18's first 3x3 conv
DATA, KERNEL = (1, 64, 56, 56), (64, 64, 3, 3)
WORKLOAD = ("conv2d_nchw.x86", ("TENSOR", DATA, "float32"), ("TENSOR", KERNEL, "float32"),
            (1, 1), (1, 1, 1, 1), (1, 1), "float32")


def test_the_llvm_package_holds_a_config_for_resnet18_first_conv():
    assert autotvm.tophub.check_backend(None, "llvm")
    for target in ("llvm", "llvm -mcpu=native", "c"):  # kiln's host c target: same templates
        with autotvm.tophub.context(target) as best:
            config = best.query(tvm.target.Target(target), WORKLOAD)
            assert not config.is_fallback, target
            assert config["tile_ic"].size[-1] == 32 and config["tile_oc"].size[-1] == 32
    # a Cortex-M target has no package: its context holds nothing
    cortex_m = tvm.target.Target("c -keys=arm_cpu -mcpu=cortex-m4")
    with autotvm.tophub.context(cortex_m) as best:
        assert best.query(cortex_m, WORKLOAD).is_fallback


def test_relay_build_under_tophub_uses_the_packaged_blocks_and_stays_correct():
    rng = np.random.default_rng(0)
    weight = rng.random(KERNEL, "float32") - 0.5
    data = relay.var("data", shape=DATA)
    mod = tvm.IRModule.from_expr(relay.Function([data], relay.nn.conv2d(
        data, relay.const(weight), padding=(1, 1), channels=64, kernel_size=(3, 3))))
    x = rng.random(DATA, "float32")
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    want = np.einsum("ncyxhw,ochw->noyx", windows, weight)
    packed = {}
    for use_tophub in (False, True):
        with tvm.transform.PassContext(opt_level=3):
            if use_tophub:
                with autotvm.tophub.context("llvm"):
                    lib = relay.build(mod, target="llvm")
            else:
                lib = relay.build(mod, target="llvm")
        packed[use_tophub] = [tuple(p.shape) for p in lib.get_params().values()]
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        m.set_input("data", x)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)
    assert packed[False] == [(4, 64, 3, 3, 16)]  # kiln's modelled 16-channel blocks
    # the package's conv2d_NCHWc.x86 line: tile_oc 32 (the data is the graph's NCHW input)
    assert packed[True] == [(2, 64, 3, 3, 32)]


def test_tophub_location_none_a_folder_or_a_url(tmp_path, monkeypatch):
    monkeypatch.setenv("TOPHUB_LOCATION", "NONE")
    with autotvm.tophub.context("llvm") as nothing:
        assert nothing is None
    monkeypatch.setenv("TOPHUB_LOCATION", str(tmp_path))  # a folder without packages
    assert not autotvm.tophub.check_backend(None, "llvm")
    with autotvm.tophub.context("llvm") as best:
        assert best.query(tvm.target.Target("llvm"), WORKLOAD).is_fallback
    monkeypatch.setenv("TOPHUB_LOCATION", "https://example.org/tophub")
    with pytest.raises(TVMError, match="never downloads"):
        autotvm.tophub.context("llvm")
