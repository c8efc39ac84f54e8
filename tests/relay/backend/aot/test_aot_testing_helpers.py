"""TVM-style AOT tests through kiln.testing.aot: compile_and_run checks outputs in C."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro.testing import get_target, mlf_extract_workspace_size_bytes
from kiln.micro.testing.aot_test_utils import AOT_DEFAULT_RUNNER
from kiln.testing.aot import (
    AOTTestModel,
    AOTTestRunner,
    compile_and_run,
    generate_ref_data,
)


def _conv_model():
    x = relay.var("x", shape=(1, 2, 6, 6))
    w = relay.const(np.linspace(-1, 1, 4 * 2 * 3 * 3, dtype="float32").reshape(4, 2, 3, 3))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    y = relay.nn.softmax(relay.nn.batch_flatten(relay.nn.avg_pool2d(y, (2, 2), (2, 2))))
    return tvm.IRModule.from_expr(relay.Function([x], relay.Tuple([y, relay.exp(y)])))


def _inputs():
    return {"x": np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype("float32")}


@pytest.mark.parametrize("interface_api, unpacked, pass_config", [
    ("c", True, {}),
    ("packed", True, {}),
    ("packed", False, {}),
    ("c", True, {"tir.usmp.enable": False}),
    ("c", True, {"tir.usmp.use_workspace_io": True}),
])
def test_compile_and_run(interface_api, unpacked, pass_config):
    mod, inputs = _conv_model(), _inputs()
    outputs = generate_ref_data(mod, inputs)
    assert sorted(outputs) == ["output0", "output1"]
    runner = AOTTestRunner(pass_config=pass_config)
    assert compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=outputs), runner,
                           interface_api, unpacked)


def test_two_models_in_one_program():
    models = []
    for name in ("first", "second"):
        mod, inputs = _conv_model(), _inputs()
        models.append(AOTTestModel(module=mod, inputs=inputs,
                                   outputs=generate_ref_data(mod, inputs), name=name))
    assert compile_and_run(models, AOT_DEFAULT_RUNNER, "c", True,
                           target=str(get_target("crt")))


def test_a_wrong_expectation_fails_in_c():
    mod, inputs = _conv_model(), _inputs()
    outputs = {k: v + 1 for k, v in generate_ref_data(mod, inputs).items()}
    with pytest.raises(AssertionError, match="AOT_TEST_FAILURE: default output0"):
        compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=outputs),
                        AOT_DEFAULT_RUNNER, "c", True)


def test_workspace_size_in_the_mlf_metadata(tmp_path):
    from kiln.relay.backend import Executor, Runtime

    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(_conv_model(), "c", runtime=Runtime("crt", {"system-lib": True}),
                          executor=Executor("graph", {"link-params": True}))
    path = tvm.micro.export_model_library_format(lib, tmp_path / "m.tar")
    assert mlf_extract_workspace_size_bytes(path) == lib.stats["planned_bytes"] > 0


def test_micro_targets():
    assert str(get_target("crt")) == str(tvm.target.target.micro("host"))
    assert "-mcpu=cortex-m7" in str(get_target("qemu-cortex-m", "mps2_an500"))
    with pytest.raises(tvm.TVMError, match="unknown board 'uno'"):
        get_target("qemu-cortex-m", "uno")
    with pytest.raises(ValueError, match="`board` type is required"):
        get_target("qemu-cortex-m")
