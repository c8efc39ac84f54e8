"""Executor/Runtime options as TVM v0.16 registers them, and the builds relay.build refuses
with a message naming what is valid."""

import pytest

import kiln as tvm
from kiln import relay
from kiln.relay.backend import Executor, Runtime


def _mod():
    a = relay.var("a", shape=(4,))
    return tvm.IRModule.from_expr(relay.Function([a], relay.nn.softmax(relay.exp(a))))


def test_registered_executors_runtimes_and_options():
    assert Executor.list_registered() == ["aot", "graph"]
    assert Runtime.list_registered() == ["cpp", "crt"]
    assert Executor.list_registered_options("aot") == {
        "link-params": "IntImm", "unpacked-api": "IntImm", "interface-api": "runtime.String",
        "workspace-byte-alignment": "IntImm", "constant-byte-alignment": "IntImm"}
    assert Executor.list_registered_options("graph") == {"link-params": "IntImm"}
    assert Runtime.list_registered_options("crt") == {"system-lib": "IntImm"}
    aot = Executor("aot", {"interface-api": "c", "unpacked-api": True})
    assert "interface-api" in aot and aot["link-params"] is True
    assert "interface-api" not in Executor("aot") and str(aot) == "aot"
    assert Runtime("crt", {"system-lib": True})["system-lib"] is True


@pytest.mark.parametrize("make, message", [
    (lambda: Executor("vm"), "unknown executor 'vm'; choose one of \\['aot', 'graph'\\]"),
    (lambda: Executor("aot", {"interface_api": "c"}), "has no option 'interface_api'"),
    (lambda: Executor("aot", {"interface-api": "cpp"}), "must be one of \\('packed', 'c'\\)"),
    (lambda: Executor("aot", {"workspace-byte-alignment": 0}), "must be positive"),
    (lambda: Executor("aot", {"unpacked-api": "yes"}), "must be bool"),
    (lambda: Runtime("crt", {"system_lib": True}), "has no option 'system_lib'"),
])
def test_bad_options_are_refused(make, message):
    with pytest.raises(tvm.TVMError, match=message):
        make()


@pytest.mark.parametrize("executor, runtime, message", [
    (Executor("aot", {"interface-api": "c"}), Runtime("crt"),
     "interface-api 'c' needs unpacked-api True .*valid combinations"),
    (Executor("aot", {"unpacked-api": True}), Runtime("cpp"),
     "Runtime\\('cpp'\\) needs unpacked-api False and interface-api 'packed'"),
    (Executor("aot", {"interface-api": "c", "unpacked-api": True}), Runtime("cpp"),
     "use Runtime\\('crt'\\) for the C interface"),
])
def test_unsupported_combinations_name_the_valid_ones(executor, runtime, message):
    with pytest.raises(tvm.TVMError, match=message):
        relay.build(_mod(), "c", executor=executor, runtime=runtime)


def test_workspace_io_needs_the_c_interface():
    with tvm.transform.PassContext(config={"tir.usmp.use_workspace_io": True}):
        with pytest.raises(tvm.TVMError, match="use_workspace_io needs interface-api 'c'"):
            relay.build(_mod(), "c", executor=Executor("aot"), runtime=Runtime("crt"))


def test_crt_needs_a_c_target_and_one_device():
    with pytest.raises(tvm.TVMError, match="Runtime\\('crt'\\) needs a C target"):
        relay.build(_mod(), "llvm", executor=Executor("aot"), runtime=Runtime("crt"))
    with pytest.raises(tvm.TVMError, match="compiles for one CPU target"):
        relay.build(_mod(), {"cpu": "c", "opencl": "opencl"}, executor=Executor("aot"))


def test_names_longer_than_the_crt_buffers_are_a_build_error():
    long_name = "m" * 110  # tvmgen_<110 chars>_fused_... passes 120 characters
    with pytest.raises(tvm.TVMError, match="TVM_CRT_MAX_STRLEN_FUNCTION_NAME = 120.*#8953"):
        relay.build(_mod(), "c", executor=Executor("graph"),
                    runtime=Runtime("crt", {"system-lib": True}), mod_name=long_name)
    a = relay.var("x" * 90, shape=(4,))
    mod = tvm.IRModule.from_expr(relay.Function([a], relay.exp(a)))
    with pytest.raises(tvm.TVMError, match="parameter name 'x{90}'.*TVM_CRT_MAX_STRLEN_PARAM"):
        relay.build(mod, "c", runtime=Runtime("crt"),
                    executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))


def test_crt_source_cannot_be_run_here():
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(_mod(), "c", executor=Executor("aot"), runtime=Runtime("crt"))
    with pytest.raises(tvm.TVMError, match="export_model_library_format"):
        lib["default"]


@pytest.mark.parametrize("executor", ["aot", "graph"])
@pytest.mark.parametrize("mod_name", ["", "my-model", "a b", "../x", None])
def test_mod_name_must_make_c_names(mod_name, executor):
    # The graph executor too: mod_name names C symbols and Model Library Format tar entries.
    with pytest.raises(tvm.TVMError, match="must be letters, digits and '_'"):
        relay.build(_mod(), "c", executor=Executor(executor), mod_name=mod_name)


def test_output_tensor_names_name_the_c_interface():
    a = relay.var("a", shape=(4,))
    func = relay.Function([a], relay.Tuple([relay.exp(a), relay.nn.relu(a)]))
    func = func.with_attr("output_tensor_names", ["Identity", "Identity:1"])
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), "c", runtime=Runtime("crt"),
                          executor=Executor("aot", {"interface-api": "c",
                                                    "unpacked-api": True}))
    assert "void* Identity;\n  void* Identity_1;" in lib.header
    assert "#define TVMGEN_DEFAULT_IDENTITY_1_SIZE 16" in lib.header


def test_inputs_whose_c_names_clash_are_refused():
    x, y = relay.var("in.0", shape=(2,)), relay.var("in_0", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.Function([x, y], relay.add(x, y)))
    with pytest.raises(tvm.TVMError, match="'in.0' and 'in_0' have the same C name 'in_0'"):
        relay.build(mod, "c", executor=Executor("aot"))
