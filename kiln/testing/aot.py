"""TVM's AOT test helpers (``tvm.testing.aot``, v0.16 names): build models with
``Executor("aot")`` + ``Runtime("crt")``, export them in Model Library Format, compile the
generated C with a generated ``main`` on the host and check the outputs in C.

Entry points: :class:`AOTTestModel`, :class:`AOTCompiledTestModel`, :class:`AOTTestRunner`,
:class:`AOTDataLinkage`, :func:`compile_models`, :func:`run_and_check`,
:func:`compile_and_run`, :func:`generate_ref_data`, :func:`get_dtype_range`.

The host runner (``makefile="default"``) compiles the ``codegen/host/src/*.c`` files of every
model's Model Library Format with the system C compiler and links them with kiln's C runtime
(``kiln/micro/crt``: ``common``, ``memory`` and the host platform template, which serves
``TVMBackendAllocWorkspace`` from a static page-allocated buffer sized from the workspace the
builds report). The generated ``main`` initializes the platform, runs each model through its
entry point (the C interface's structs, or DLTensors for the packed one) and prints
``AOT_TEST_SUCCESS`` when every output matches within tolerance.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["AOTTestModel", "AOTCompiledTestModel", "AOTDataLinkage", "AOTTestRunner",
           "AOT_DEFAULT_RUNNER", "AOT_SUCCESS_TOKEN", "AOT_FAILURE_TOKEN", "compile_models",
           "run_and_check", "compile_and_run", "generate_ref_data", "get_dtype_range"]

AOT_SUCCESS_TOKEN = "AOT_TEST_SUCCESS"
AOT_FAILURE_TOKEN = "AOT_TEST_FAILURE"
NP_TYPE_TO_C = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
                "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t",
                "float32": "float", "float64": "double", "bool": "bool"}


class AOTTestModel(NamedTuple):
    """A model to test: Relay module, inputs and expected outputs by name."""

    module: Any
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    output_tolerance: int | float | None = None
    name: str = "default"
    params: dict[str, np.ndarray] | None = None
    extra_memory_in_bytes: int = 0


class AOTCompiledTestModel(NamedTuple):
    """A test model and what relay.build made of it."""

    model: AOTTestModel
    executor_factory: Any


class AOTDataLinkage(NamedTuple):
    """Where the test data lives: a linker section and an alignment."""

    section: str
    alignment: int


class AOTTestRunner(NamedTuple):
    """How to run the test program: kiln runs it on the host (``makefile="default"``)."""

    makefile: str = "default"
    prologue: str = ""
    epilogue: str = ""
    includes: list[str] = []
    parameters: dict[str, str] = {}
    pass_config: dict[str, Any] = {}


AOT_DEFAULT_RUNNER = AOTTestRunner()


def _mangle(mod_name: str, name: str) -> str:
    return f"tvmgen_{mod_name}_{name}"


def _c_value(value: Any, dtype: np.dtype) -> str:
    if dtype.kind == "f":
        v = float(value)
        if np.isnan(v):
            return "NAN"
        if np.isinf(v):
            return "INFINITY" if v > 0 else "-INFINITY"
        return f"{v:.9e}" + ("f" if dtype == np.float32 else "")
    if dtype.kind == "b":
        return "1" if value else "0"
    return f"{int(value)}" + ("LL" if dtype.itemsize == 8 else "")


def _data_header(symbol: str, data: np.ndarray, path: str,
                 linkage: AOTDataLinkage | None) -> None:
    flat = np.ascontiguousarray(data).reshape(-1)
    ctype = NP_TYPE_TO_C.get(str(flat.dtype))
    if ctype is None:
        raise ValueError(f"Data type {flat.dtype} not expected.")
    attrs = ""
    if linkage is not None:
        attrs = f'__attribute__((section("{linkage.section}"), aligned({linkage.alignment}))) '
    values = ", ".join(_c_value(v, flat.dtype) for v in flat) or "0"
    with open(os.path.join(path, f"{symbol}.h"), "w") as f:
        f.write("#include <stddef.h>\n#include <stdint.h>\n#include <stdbool.h>\n"
                "#include <math.h>\n")
        f.write(f"const size_t {symbol}_len = {flat.size};\n")
        f.write(f"{attrs}{ctype} {symbol}[{max(flat.size, 1)}] = {{{values}}};\n")


def compile_models(models: AOTTestModel | list[AOTTestModel], interface_api: str,
                   use_unpacked_api: bool, workspace_byte_alignment: int = 8,
                   constant_byte_alignment: int = 8, enable_op_fusion: bool = True,
                   pass_config: dict[str, Any] | None = None, use_runtime_executor: bool = True,
                   target: Any = "c", workspace_memory_pools: Any = None,
                   constant_memory_pools: Any = None, schedule_name: str | None = None,
                   runtime: Any = None) -> list[AOTCompiledTestModel]:
    """Build every model with ``Executor("aot")`` for the C runtime."""
    import kiln as tvm
    from kiln import relay
    from kiln.relay.backend import Executor, Runtime

    models = models if isinstance(models, list) else [models]
    runtime = runtime or Runtime("crt")
    if runtime.name != "crt":
        raise tvm.TVMError(f"Currently only 'crt' is supported by the test framework, but got "
                           f"{runtime.name}")
    if schedule_name is not None:
        raise tvm.TVMError("compile_models: schedule_name (fixed AutoTVM configs) is not "
                           "supported by kiln's AOT test helpers")
    executor = Executor("aot", {"workspace-byte-alignment": workspace_byte_alignment,
                                "constant-byte-alignment": constant_byte_alignment,
                                "interface-api": interface_api,
                                "unpacked-api": use_unpacked_api})
    config = {"tir.disable_vectorize": True, **(pass_config or {})}
    if not enable_op_fusion:
        config["relay.FuseOps.max_depth"] = 1
    target = tvm.target.Target(target) if isinstance(target, str) else target
    compiled = []
    for model in models:
        with tvm.transform.PassContext(opt_level=3, config=config):
            kwargs = {"ir_mod": model.module, "params": model.params, "mod_name": model.name,
                      "target": target}
            if use_runtime_executor:
                kwargs.update(executor=executor, runtime=runtime,
                              workspace_memory_pools=workspace_memory_pools,
                              constant_memory_pools=constant_memory_pools)
            compiled.append(AOTCompiledTestModel(model, relay.build(**kwargs)))
    return compiled


def _main_source(models: list[AOTCompiledTestModel], runner: AOTTestRunner,
                 interface_api: str, use_workspace_io: bool,
                 print_output_on_mismatch: bool) -> str:
    lines = ["#include <stdio.h>", "#include <stdint.h>", "#include <stdbool.h>",
             "#include <math.h>", "#include <tvm/runtime/c_runtime_api.h>",
             "#include <tvm/runtime/c_backend_api.h>", "#include <tvm/runtime/crt/platform.h>"]
    lines += [f'#include "{inc}"' for inc in runner.includes]
    for compiled in models:
        model = compiled.model
        if interface_api == "c":
            lines.append(f'#include "tvmgen_{model.name}.h"')
        else:
            lines.append(f"TVM_DLL int32_t {_mangle(model.name, 'run')}(TVMValue* args, "
                         "int* type_codes, int num_args, TVMValue* out_ret_value, "
                         "int* out_ret_tcode, void* resource_handle);")
        for kind in ("input_data", "output_data", "expected_output_data"):
            names = model.inputs if kind == "input_data" else model.outputs
            for key in names:
                lines.append(f'#include "{_mangle(model.name, kind)}_{_sanitize(key)}.h"')
    lines += [runner.prologue, "int main(void) {",
              "  if (TVMPlatformInitialize() != 0) {",
              f'    printf("{AOT_FAILURE_TOKEN}: TVMPlatformInitialize\\n"); return 1;', "  }"]
    for compiled in models:
        lines += _run_model(compiled, interface_api, use_workspace_io)
        lines += _compare(compiled, print_output_on_mismatch)
    lines += [runner.epilogue, f'  printf("{AOT_SUCCESS_TOKEN}\\n");', "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _sanitize(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _run_model(compiled: AOTCompiledTestModel, interface_api: str,
               use_workspace_io: bool) -> list[str]:
    model, factory = compiled.model, compiled.executor_factory
    name = model.name
    ins = [s.name for s in factory.plan.inputs]
    outs = [s.name for s in factory.plan.outputs]
    fail = (f'  {{ printf("{AOT_FAILURE_TOKEN}: {name} run failed\\n"); return 1; }}')
    data = {n: f"{_mangle(name, 'input_data')}_{_sanitize(n)}" for n in ins}
    data.update({n: f"{_mangle(name, 'output_data')}_{_sanitize(n)}" for n in outs})
    missing = [n for n in ins if n not in model.inputs] + [n for n in outs
                                                             if n not in model.outputs]
    if missing:
        raise ValueError(f"model {name!r}: no test data for {missing}; the build's inputs are "
                         f"{ins} and its outputs {outs}")
    if interface_api == "c":
        lines, pools_arg = _external_pools(factory)
        if use_workspace_io:
            lines += [f"  struct tvmgen_{name}_inputs {name}_in = "
                      f"tvmgen_{name}_map_inputs(&{name}_pools);",
                      f"  struct tvmgen_{name}_outputs {name}_out = "
                      f"tvmgen_{name}_map_outputs(&{name}_pools);"]
            lines += [f"  for (size_t i = 0; i < sizeof({data[n]}); ++i) "
                      f"((uint8_t*){name}_in.{_sanitize(n)})[i] = ((uint8_t*){data[n]})[i];"
                      for n in ins]
            lines.append(f"  if (tvmgen_{name}_run(&{name}_pools) != 0){fail}")
            lines += [f"  for (size_t i = 0; i < sizeof({data[n]}); ++i) "
                      f"((uint8_t*){data[n]})[i] = ((uint8_t*){name}_out.{_sanitize(n)})[i];"
                      for n in outs]
            return lines
        init_in = ", ".join(f".{_sanitize(n)} = {data[n]}" for n in ins)
        init_out = ", ".join(f".{_sanitize(n)} = {data[n]}" for n in outs)
        return lines + [f"  struct tvmgen_{name}_inputs {name}_in = {{{init_in}}};",
                        f"  struct tvmgen_{name}_outputs {name}_out = {{{init_out}}};",
                        f"  if (tvmgen_{name}_run(&{name}_in, &{name}_out{pools_arg}) != 0)"
                        f"{fail}"]
    # packed interface: DLTensors, as the C AOT executor passes them
    lines = []
    specs = list(factory.plan.inputs) + list(factory.plan.outputs)
    for i, spec in enumerate(specs):
        from kiln.runtime.dtype import DataType

        t = DataType(spec.dtype)
        dims = ", ".join(str(d) for d in spec.shape) or "1"
        lines += [f"  int64_t {name}_shape{i}[] = {{{dims}}};",
                  f"  DLTensor {name}_t{i} = {{.data = {data[spec.name]}, .device = {{kDLCPU, 0}},"
                  f" .ndim = {len(spec.shape)}, .dtype = {{{int(t.type_code)}, {t.bits}, "
                  f"{t.lanes}}}, .shape = {name}_shape{i}, .strides = NULL, .byte_offset = 0}};"]
    n = len(specs)
    lines += [f"  TVMValue {name}_args[{n}]; int {name}_codes[{n}];"]
    lines += [f"  {name}_args[{i}].v_handle = &{name}_t{i}; {name}_codes[{i}] = "
              "kTVMDLTensorHandle;" for i in range(n)]
    lines += [f"  TVMValue {name}_ret; int {name}_ret_code;",
              f"  if ({_mangle(name, 'run')}({name}_args, {name}_codes, {n}, &{name}_ret, "
              f"&{name}_ret_code, NULL) != 0){fail}"]
    return lines


def _external_pools(factory: Any) -> tuple[list[str], str]:
    """C lines declaring the pools the application provides (sized and, for constants,
    filled by the header's macros) and the run call's extra argument."""
    name = factory.libmod_name
    external = [p for p in factory.aot.pools if not p.internal]
    if not external:
        return [], ""
    lines, members = [], []
    for pool in external:
        prefix = f"TVMGEN_{name}_{_sanitize(pool.name)}".upper()
        array = f"{name}_{pool.name}"
        if pool.constant:
            lines.append(f"  static uint8_t {array}[{prefix}_CONSTANT_POOL_SIZE] "
                         f"__attribute__((aligned(16))) = {{{prefix}_CONSTANT_POOL_DATA}};")
        else:
            lines.append(f"  static uint8_t {array}[{prefix}_WORKSPACE_POOL_SIZE + 1] "
                         "__attribute__((aligned(16)));")
        members.append(f".{_sanitize(pool.name)} = {array}")
    lines.append(f"  struct tvmgen_{name}_workspace_pools {name}_pools = "
                 f"{{{', '.join(members)}}};")
    return lines, f", &{name}_pools"


def _compare(compiled: AOTCompiledTestModel, print_output_on_mismatch: bool) -> list[str]:
    model = compiled.model
    lines = []
    for key, expected in model.outputs.items():
        got = f"{_mangle(model.name, 'output_data')}_{_sanitize(key)}"
        want = f"{_mangle(model.name, 'expected_output_data')}_{_sanitize(key)}"
        is_float = np.asarray(expected).dtype.kind == "f"
        tolerance = model.output_tolerance or (0.001 if is_float else 0)
        diff = f"fabs((double){got}[i] - (double){want}[i])"
        report = (f'printf("{key}[%d]: got %f expected %f\\n", (int)i, (double){got}[i], '
                  f"(double){want}[i]); " if print_output_on_mismatch else "")
        lines.append(f"  for (size_t i = 0; i < {want}_len; ++i) {{ if ({diff} > {tolerance}) "
                     f'{{ {report}printf("{AOT_FAILURE_TOKEN}: {model.name} {key}\\n"); '
                     "return 1; } }")
    return lines


def run_and_check(models: list[AOTCompiledTestModel], runner: AOTTestRunner,
                  interface_api: str, debug_calculated_workspaces: bool = False,
                  workspace_byte_alignment: int = 8, constant_byte_alignment: int = 8,
                  data_linkage: AOTDataLinkage | None = None, test_dir: str | None = None,
                  verbose: bool = False, use_workspace_io: bool = False,
                  debug_last_error: bool = False,
                  checker: Callable[[str], bool] | None = None,
                  print_output_on_mismatch: bool = False) -> bool:
    """Export, compile and run the test program; assert it printed AOT_TEST_SUCCESS."""
    import kiln as tvm

    if runner.makefile != "default":
        raise tvm.TVMError(f"kiln runs AOT tests on the host; runner makefile "
                           f"{runner.makefile!r} is not available (use AOT_DEFAULT_RUNNER)")
    with contextlib.ExitStack() as stack:
        if test_dir is None:
            test_dir = os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "test")
        return _run_and_check_in(models, runner, interface_api, data_linkage, test_dir,
                                 verbose, use_workspace_io, checker, print_output_on_mismatch)


def _run_and_check_in(models: list[AOTCompiledTestModel], runner: AOTTestRunner,
                      interface_api: str, data_linkage: AOTDataLinkage | None, base: str,
                      verbose: bool, use_workspace_io: bool,
                      checker: Callable[[str], bool] | None,
                      print_output_on_mismatch: bool) -> bool:
    from kiln.micro.model_library_format import model_files

    base = os.path.abspath(base)
    include = os.path.join(base, "include")
    os.makedirs(include, exist_ok=True)
    sources, includes = [], [include]
    workspace_bytes = 0
    for compiled in models:
        model, factory = compiled.model, compiled.executor_factory
        model_dir = os.path.join(base, model.name)
        # the model's codegen/ files, as export_model_library_format writes them
        for rel, data in model_files(factory).items():
            if rel.startswith("codegen/"):
                os.makedirs(os.path.dirname(os.path.join(model_dir, rel)), exist_ok=True)
                with open(os.path.join(model_dir, rel), "wb") as f:
                    f.write(data)
        src_dir = os.path.join(model_dir, "codegen", "host", "src")
        sources += [os.path.join(src_dir, f) for f in sorted(os.listdir(src_dir))]
        includes.append(os.path.join(model_dir, "codegen", "host", "include"))
        workspace_bytes += factory.stats["workspace_size_bytes"] + model.extra_memory_in_bytes
        for key, value in model.inputs.items():
            _data_header(f"{_mangle(model.name, 'input_data')}_{_sanitize(key)}",
                         np.asarray(value), include, data_linkage)
        for key, value in model.outputs.items():
            value = np.asarray(value)
            _data_header(f"{_mangle(model.name, 'output_data')}_{_sanitize(key)}",
                         np.zeros(value.shape, value.dtype), include, data_linkage)
            _data_header(f"{_mangle(model.name, 'expected_output_data')}_{_sanitize(key)}",
                         value, include, data_linkage)
    main = os.path.join(base, "test.c")
    with open(main, "w") as f:
        f.write(_main_source(models, runner, interface_api, use_workspace_io,
                             print_output_on_mismatch))
    if checker is not None and not checker(base):
        return False
    exe = _build_program(base, sources + [main], includes, workspace_bytes, verbose)
    run = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    if verbose or (print_output_on_mismatch and AOT_FAILURE_TOKEN in run.stdout):
        print(run.stdout, run.stderr)
    assert AOT_SUCCESS_TOKEN in run.stdout, run.stdout + run.stderr
    return True


_CRT_OBJECTS: dict[tuple[str, ...], list[Any]] = {}


def _crt_objects(flags: tuple[str, ...]) -> list[Any]:
    """The CRT's common + memory objects, compiled once per process and flags."""
    from kiln.micro import crt_build

    if flags not in _CRT_OBJECTS:
        out = tempfile.mkdtemp(prefix="kiln-aot-crt-")
        _CRT_OBJECTS[flags] = crt_build.compile_objects(
            out, crt_build.crt_sources(("common", "memory")), cflags=flags)
    return list(_CRT_OBJECTS[flags])


def _build_program(base: str, sources: list[str], includes: list[str], workspace_bytes: int,
                   verbose: bool) -> str:
    """Link the generated C and the test main with the CRT; the platform's static buffer
    holds the workspace twice over plus room for the page allocator's tables."""
    from kiln.micro import crt_build

    platform = os.path.join(crt_build.get_standalone_crt_dir(), "template",
                            "platform-template.c")
    size = 2 * workspace_bytes + 65536
    crt_flags = (*crt_build.STRICT_CFLAGS, "-O1")
    gen_flags = ("-std=gnu11", "-O2", "-Wall", "-Wno-unused-variable")
    exe = os.path.join(base, "aot_test_runner")
    try:
        objects = _crt_objects(crt_flags)
        objects += crt_build.compile_objects(
            os.path.join(base, "platform"), [platform],
            cflags=(*crt_flags, f"-DTVM_WORKSPACE_SIZE_BYTES={size}"))
        objects += crt_build.compile_objects(os.path.join(base, "build"), sources,
                                             cflags=gen_flags, include=includes)
        if verbose:
            print("Linking", exe, "from", [str(o) for o in objects])
        crt_build.link_executable(exe, objects)
    except TVMError as err:
        raise AssertionError(f"the AOT test program did not build:\n{err}") from None
    return exe


def compile_and_run(models: AOTTestModel | list[AOTTestModel], runner: AOTTestRunner,
                    interface_api: str, use_unpacked_api: bool,
                    debug_calculated_workspaces: bool = False,
                    workspace_byte_alignment: int = 8, constant_byte_alignment: int = 8,
                    enable_op_fusion: bool = True, data_linkage: AOTDataLinkage | None = None,
                    use_runtime_executor: bool = True, target: Any = "c",
                    target_opts: dict | None = None, test_dir: str | None = None,
                    verbose: bool = False, schedule_name: str | None = None,
                    debug_last_error: bool = False,
                    checker: Callable[[str], bool] | None = None,
                    print_output_on_mismatch: bool = False, runtime: Any = None) -> bool:
    """Compile the models for AOT + CRT and check their outputs in a C program (TVM's
    ``compile_and_run``); ``interface_api`` "c" needs ``use_unpacked_api`` True."""
    if target_opts:
        for key, val in target_opts.items():
            target += f" {key}={val}"
    compiled = compile_models(models, interface_api, use_unpacked_api,
                              workspace_byte_alignment, constant_byte_alignment,
                              enable_op_fusion, runner.pass_config, use_runtime_executor,
                              target, schedule_name=schedule_name, runtime=runtime)
    use_io = bool(runner.pass_config.get("tir.usmp.use_workspace_io", False))
    return run_and_check(compiled, runner, interface_api, debug_calculated_workspaces,
                         workspace_byte_alignment, constant_byte_alignment, data_linkage,
                         test_dir, verbose, use_io, debug_last_error, checker,
                         print_output_on_mismatch)


def get_dtype_range(dtype: str) -> tuple[Any, Any]:
    """``(min, max)`` of a float or integer dtype."""
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        info = np.finfo(np_dtype)
    elif np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
    else:
        raise TypeError(f"dtype ({dtype}) must indicate some floating-point or integral "
                        "data type.")
    return info.min, info.max


def generate_ref_data(mod: Any, input_data: dict[str, Any], params: dict | None = None,
                      target: str = "llvm") -> dict[str, np.ndarray]:
    """Reference outputs by name (``output`` or ``output<i>``) from the graph executor."""
    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.target.codegen_llvm import llvm_available

    if target == "llvm" and not llvm_available():
        target = "c"
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        lib = relay.build(mod, target=target, params=params)
    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    module.set_input(**input_data)
    module.run()
    count = module.get_num_outputs()
    out = [module.get_output(i).numpy() for i in range(count)]
    main = mod if isinstance(mod, relay.Function) else mod["main"]
    attrs = main.attrs or {}
    names = list(attrs["output_tensor_names"]) if "output_tensor_names" in attrs else (
        ["output"] if count == 1 else [f"output{i}" for i in range(count)])
    return dict(zip(names, out))
