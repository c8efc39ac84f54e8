"""Generated C meets kiln's C runtime: the packed AOT interface through the C AOT executor and
the graph executor + link-params flavour through the C graph executor, both found through the
generated system-lib registry, under ASan + UBSan; and every flavour compiles warning-free
(-Wall -Wextra -Werror) with gcc and arm-none-eabi-gcc."""

import subprocess

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro import crt_build
from kiln.relay.backend import Executor, Runtime

SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g")
FLAVOURS = {
    "aot-c": Executor("aot", {"interface-api": "c", "unpacked-api": True}),
    "aot-packed-unpacked": Executor("aot", {"interface-api": "packed", "unpacked-api": True}),
    "aot-packed": Executor("aot", {"interface-api": "packed", "unpacked-api": False}),
    "graph-link-params": Executor("graph", {"link-params": True}),
}
WEIGHT = np.linspace(-1, 1, 8 * 3 * 9, dtype="float32").reshape(8, 3, 3, 3)


def _model():
    x = relay.var("data", shape=(1, 3, 8, 8))
    y = relay.nn.relu(relay.nn.conv2d(x, relay.const(WEIGHT), padding=(1, 1)))
    y = relay.nn.softmax(relay.nn.batch_flatten(relay.nn.max_pool2d(y, (2, 2), (2, 2))))
    return tvm.IRModule.from_expr(relay.Function([x], y))


def _build(flavour, target="c -keys=arm_cpu -mcpu=cortex-m4"):
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        return relay.build(_model(), target, runtime=Runtime("crt", {"system-lib": True}),
                           executor=FLAVOURS[flavour])


def _sources(lib, out):
    from kiln.micro.model_library_format import model_files

    paths = []
    for rel, data in model_files(lib).items():
        if rel.startswith("codegen/host/"):
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            paths.append(path)
    return paths


def _reference(x):
    with tvm.transform.PassContext(opt_level=3):
        return relay.create_executor("debug", mod=_model()).evaluate()(x).numpy()


PROLOGUE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/platform.h>
static TVMModuleHandle system_lib(void) {
  TVMFunctionHandle get; TVMValue ret; int code;
  if (TVMPlatformInitialize() != 0 || TVMInitializeRuntime() != 0) exit(10);
  if (TVMFuncGetGlobal("runtime.SystemLib", &get) != 0) exit(11);
  if (TVMFuncCall(get, NULL, NULL, 0, &ret, &code) != 0) exit(12);
  return ret.v_handle;
}
"""

AOT_MAIN = PROLOGUE + r"""
#include <tvm/runtime/crt/aot_executor.h>
int main(void) {
  TVMAotExecutor* ex; DLDevice dev = {kDLCPU, 0};
  if (TVMAotExecutor_Create(system_lib(), dev, &ex, "default") != 0) {
    printf("create: %s\n", TVMGetLastError()); return 1; }
  if (TVMAotExecutor_GetNumInputs(ex) != 1 || TVMAotExecutor_GetNumOutputs(ex) != 1) return 2;
  if (TVMAotExecutor_GetInputIndex(ex, "data") != 0) return 3;
  if (fread(ex->args[0].dl_tensor.data, 4, 192, stdin) != 192) return 4;
  if (TVMAotExecutor_Run(ex) != 0) { printf("run: %s\n", TVMGetLastError()); return 5; }
  fwrite(ex->args[1].dl_tensor.data, 4, 128, stdout);
  return TVMAotExecutor_Release(ex, dev);
}
"""

GRAPH_MAIN = PROLOGUE + r"""
#include <tvm/runtime/crt/graph_executor.h>
#include "graph.h"
int main(void) {
  TVMGraphExecutor* ex; DLDevice dev = {kDLCPU, 0};
  static float in[192], out[128];
  int64_t ishape[4] = {1, 3, 8, 8}, oshape[2] = {1, 128};
  DLTensor tin = {in, dev, 4, {kDLFloat, 32, 1}, ishape, NULL, 0};
  DLTensor tout = {out, dev, 2, {kDLFloat, 32, 1}, oshape, NULL, 0};
  if (TVMGraphExecutor_Create(kGraphJson, system_lib(), &dev, &ex) != 0) {
    printf("create: %s\n", TVMGetLastError()); return 1; }
  if (fread(in, 4, 192, stdin) != 192) return 4;
  if (TVMGraphExecutor_SetInput(ex, "data", &tin) != 0) return 5;
  if (TVMGraphExecutor_Run(ex) != 0) { printf("run: %s\n", TVMGetLastError()); return 6; }
  if (TVMGraphExecutor_GetOutput(ex, 0, &tout) != 0) return 7;
  fwrite(out, 4, 128, stdout);
  return TVMGraphExecutor_Release(&ex);
}
"""


@pytest.mark.parametrize("flavour", ["aot-packed-unpacked", "aot-packed", "graph-link-params"])
def test_generated_code_runs_on_the_c_runtime(flavour, tmp_path):
    lib = _build(flavour)
    main = tmp_path / "main.c"
    main.write_text(GRAPH_MAIN if flavour.startswith("graph") else AOT_MAIN)
    if flavour.startswith("graph"):
        (tmp_path / "graph.h").write_text(
            "static const char kGraphJson[] = " + "\n".join(
                '"' + line.replace("\\", "\\\\").replace('"', '\\"') + '\\n"'
                for line in lib.get_graph_json().splitlines()) + ";\n")
    flags = (*crt_build.STRICT_CFLAGS, "-O1", *SANITIZE)
    component = "graph_executor" if flavour.startswith("graph") else "aot_executor"
    objects = crt_build.compile_objects(
        tmp_path / "crt", [*crt_build.crt_sources(("common", "memory", component)),
                           f"{crt_build.get_standalone_crt_dir()}/template/platform-template.c"],
        cflags=flags)
    objects += crt_build.compile_objects(tmp_path / "model", [*_sources(lib, tmp_path), main],
                                         cflags=flags, include=[tmp_path,
                                                                tmp_path / "codegen/host/include"])
    exe = crt_build.link_executable(tmp_path / "model.exe", objects,
                                    ldflags=(*SANITIZE, "-lm"))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    run = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, timeout=120,
                         env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert run.returncode == 0, run.stdout[:300] + run.stderr[:2000]
    got = np.frombuffer(run.stdout, dtype="float32").reshape(1, 128)
    np.testing.assert_allclose(got, _reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cc", ["gcc", "arm-none-eabi-gcc"])
def test_every_flavour_compiles_warning_free(cc, tmp_path):
    # A missing cross compiler fails (CI installs gcc-arm-none-eabi); it is no reason to skip.
    flags = (*crt_build.STRICT_CFLAGS, "-O2")
    if cc.startswith("arm"):
        flags += crt_build.CORTEX_M4_CFLAGS
    for flavour in FLAVOURS:
        out = tmp_path / flavour
        sources = _sources(_build(flavour), out)
        crt_build.compile_objects(out / "obj", sources, cc=cc, cflags=flags,
                                  include=[out / "codegen/host/include"])
