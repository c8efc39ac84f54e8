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


def test_user_memory_pools_are_provided_by_the_application():
    from kiln.ir.memory_pools import (
        ConstantMemoryPools,
        ConstantPoolInfo,
        PoolInfoProperties,
        WorkspaceMemoryPools,
        WorkspacePoolInfo,
    )
    from kiln.testing.aot import compile_models, run_and_check

    mod, inputs = _conv_model(), _inputs()
    target = tvm.target.Target("c")
    workspace = WorkspaceMemoryPools([
        WorkspacePoolInfo("sram", [target], PoolInfoProperties(size_hint_bytes=200)),
        WorkspacePoolInfo("dram", [target])])
    constants = ConstantMemoryPools([ConstantPoolInfo("flash", [target])])
    model = AOTTestModel(module=mod, inputs=inputs, outputs=generate_ref_data(mod, inputs))
    [compiled] = compile_models(model, "c", True, workspace_memory_pools=workspace,
                                constant_memory_pools=constants)
    factory = compiled.executor_factory
    header = factory.header
    assert "#define TVMGEN_DEFAULT_SRAM_WORKSPACE_POOL_SIZE" in header
    assert "#define TVMGEN_DEFAULT_FLASH_CONSTANT_POOL_DATA" in header
    assert "struct tvmgen_default_workspace_pools* workspace_pools" in header
    sizes = dict(zip(("sram", "dram"), factory.plan.workspace.sizes))
    assert sizes["sram"] <= 200 and sizes["dram"] > 0  # the small pool filled first
    assert run_and_check([compiled], AOT_DEFAULT_RUNNER, "c")


def test_memory_pool_errors():
    from kiln.ir.memory_pools import (
        ConstantMemoryPools,
        ConstantPoolInfo,
        PoolInfoProperties,
        WorkspaceMemoryPools,
        WorkspacePoolInfo,
    )
    from kiln.relay.backend import Executor, Runtime

    tiny = WorkspaceMemoryPools([WorkspacePoolInfo("sram", [], PoolInfoProperties(16))])
    with pytest.raises(tvm.TVMError, match="do not fit the workspace pools"):
        relay.build(_conv_model(), "c", runtime=Runtime("crt"), workspace_memory_pools=tiny,
                    executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    with pytest.raises(tvm.TVMError, match="planned by the AOT executor"):
        relay.build(_conv_model(), "c", workspace_memory_pools=tiny)
    constants = ConstantMemoryPools([ConstantPoolInfo("flash")])
    with pytest.raises(tvm.TVMError, match="constant_memory_pools need interface-api 'c'"):
        relay.build(_conv_model(), "c", runtime=Runtime("crt"), executor=Executor("aot"),
                    constant_memory_pools=constants)
    with pytest.raises(tvm.TVMError, match="pool name must be a C identifier"):
        WorkspacePoolInfo("my pool")
    with pytest.raises(tvm.TVMError, match="names must be unique"):
        WorkspaceMemoryPools([WorkspacePoolInfo("a"), WorkspacePoolInfo("a")])


@pytest.mark.parametrize("name", ["cnn", "kws_dscnn", "mlp"])
def test_micro_models_with_cortex_m_schedules_run_on_the_crt(name):
    from kiln.relay.testing import micro_models

    spec = micro_models.MODELS[name]()
    mod, params = micro_models.to_relay(spec)
    inputs = {mod["main"].params[0].name_hint: spec.random_input()}
    model = AOTTestModel(module=mod, inputs=inputs, params=params, output_tolerance=1e-4,
                         outputs=generate_ref_data(mod, inputs, params))
    assert compile_and_run(model, AOT_DEFAULT_RUNNER, "c", True,
                           target="c -keys=arm_cpu -mcpu=cortex-m4")


def test_int8_conv_of_tvm_micro_tests_runs_exactly():
    from kiln.micro.testing import get_conv2d_relay_module

    mod = get_conv2d_relay_module()
    rng = np.random.default_rng(0)
    inputs = {"data": rng.integers(-128, 127, (1, 3, 64, 64)).astype("int8")}
    params = {"weight": rng.integers(-128, 127, (8, 3, 5, 5)).astype("int8")}
    outputs = generate_ref_data(mod, inputs, params)
    assert outputs["output"].dtype == np.int32
    assert compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=outputs,
                                        params=params), AOT_DEFAULT_RUNNER, "c", True)


@pytest.mark.parametrize("interface_api, unpacked", [("c", True), ("packed", True)])
def test_bool_inputs(interface_api, unpacked):
    a, b = relay.var("a", shape=(4,), dtype="bool"), relay.var("b", shape=(4,))
    mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.where(a, b, relay.negative(b))))
    inputs = {"a": np.array([1, 0, 1, 0], bool), "b": np.arange(4, dtype="float32")}
    model = AOTTestModel(module=mod, inputs=inputs, outputs=generate_ref_data(mod, inputs))
    assert compile_and_run(model, AOT_DEFAULT_RUNNER, interface_api, unpacked)
