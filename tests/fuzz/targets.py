"""One fuzz target per kiln loader: its seed corpus and the call that feeds it one input.

Entry points: :data:`TARGETS` (name -> :class:`Target`), :func:`get_target`.

A target's ``seeds()`` runs in the campaign process (it may build models to get realistic
artifacts); ``setup()`` runs once in each worker process and returns the function that
loads one input. A loader passes when every input either loads or raises ``kiln.TVMError``
(or a subclass); any other exception is a finding, as are crashes and hangs.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Every kind of Relay node in one module: an ADT and match, if, let, references, tuples, an
# operator call with attributes, a symbolic dimension, function types and recursion.
RICH_RELAY_TEXT = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @length[A](%xs: List[A]) -> int32 {
  match (%xs) {
    Cons(_, %rest) => add(1, @length(%rest)),
    Nil => 0,
  }
}
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %n: Tensor[(?, 2), int64], %f: fn (float32) -> float32) {
  let %r = ref(0f);
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = (%0, %n, %f(1f));
  %2 = ref_write(%r, %1.2);
  if (less(ref_read(%r), 2f)) {
    (%1.0, @length(Cons(1, Nil)))
  } else {
    (nn.relu(%1.0), 0)
  }
}
"""

PACKED_ADD_C = b"""#include <tvm/runtime/c_backend_api.h>
const char __tvm_main__[] = "add_one";
int add_one(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  if (n != 1) { TVMAPISetLastError("add_one: expected 1 argument"); return -1; }
  DLTensor* a = (DLTensor*)args[0].v_handle;
  ((float*)a->data)[0] += 1.0f;
  return 0;
}
"""


@dataclass
class Target:
    """A loader under fuzzing."""

    name: str
    seeds: Callable[[], list[bytes]]
    setup: Callable[[], Callable[[bytes], object]]
    text: bool = False  # also apply token-level mutations
    timeout: float = 10.0  # seconds one input may take before it counts as a hang
    retry_factor: float = 6.0  # a hang is retried in a fresh worker with this much more time
    restart_every: int = 2000  # worker restarts bound what a long run accumulates


def _small_model():
    """A model with a fused kernel, a reshape (__nop) and two outputs: (mod, params)."""
    from kiln import relay

    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 8), dtype="float32")
    w = relay.const(rng.standard_normal((8, 8)).astype("float32"))
    b = relay.var("b", shape=(8,), dtype="float32")
    y = relay.nn.relu(relay.add(relay.nn.dense(x, w), b))
    out = relay.Tuple([relay.nn.softmax(y), relay.reshape(y, (2, 4))])
    import kiln

    mod = kiln.IRModule.from_expr(relay.Function([x, b], out))
    return mod, {"b": rng.standard_normal(8).astype("float32")}


def _graph_build():
    import kiln
    from kiln import relay

    mod, params = _small_model()
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(mod, target="llvm" if kiln.runtime.enabled("llvm") else "c",
                           params=params)


def _vm_build():
    import kiln
    from kiln import relay

    mod, params = _small_model()
    with kiln.transform.PassContext(opt_level=3):
        return relay.vm.compile(mod, target="c", params=params)


# ---- params blob and NDArray blob --------------------------------------------------------

def _arrays() -> dict[str, np.ndarray]:
    import ml_dtypes

    return {"w": np.arange(12, dtype="float32").reshape(3, 4), "flag": np.array([True, False]),
            "step": np.array(-7, dtype="int64"), "half": np.ones((2, 2), "float16"),
            "bf": np.ones(3, ml_dtypes.bfloat16), "empty": np.zeros((0, 5), "int8")}


def _params_seeds() -> list[bytes]:
    from kiln.runtime.params import save_param_dict

    arrays = _arrays()
    return [save_param_dict(arrays), save_param_dict({"w": arrays["w"]}), save_param_dict({})]


def _params_setup():
    from kiln.runtime.params import load_param_dict

    return load_param_dict


def _ndarray_seeds() -> list[bytes]:
    from kiln.runtime.params import save_ndarray

    return [save_ndarray(a) for a in _arrays().values()]


def _ndarray_setup():
    from kiln.runtime.binary import BinaryReader
    from kiln.runtime.params import load_ndarray

    def run(data: bytes):
        reader = BinaryReader(data, what="fuzzed NDArray")
        array = load_ndarray(reader)
        reader.expect_end()
        return array.numpy().sum()

    return run


# ---- graph JSON and VM executable ----------------------------------------------------------

def _graph_seeds() -> list[bytes]:
    return [_graph_build().get_graph_json().encode()]


def _graph_setup():
    from kiln.contrib import graph_executor
    from kiln.runtime.device import cpu

    lib = _graph_build().get_lib()

    def run(data: bytes):
        module = graph_executor.create(data.decode("utf-8", "replace"), lib, cpu(0))
        module.run()
        return module.get_num_outputs()

    return run


def _vm_seeds() -> list[bytes]:
    code, _ = _vm_build().save()
    return [bytes(code)]


def _vm_setup():
    from kiln.runtime.device import cpu
    from kiln.runtime.vm import Executable, VirtualMachine

    _, lib = _vm_build().save()

    def run(data: bytes):
        exe = Executable.load_exec(data, lib)
        VirtualMachine(exe, cpu())
        return exe.bytecode  # the disassembler walks every instruction

    return run


# ---- module archive ------------------------------------------------------------------------

def _tar_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _archive_seeds() -> list[bytes]:
    return [
        _tar_bytes({"k.c": b"int k(void) { return 1; }\n",
                    "kiln_link_options.txt": b"-O2 -march=native"}),
        _tar_bytes({"lib0.c": PACKED_ADD_C, "kiln_link_options.txt": b"-O3 -std=gnu11 -lm"}),
        _tar_bytes({"a.c": b"int a;\n", "b.c": b"int b(void) { return 2; }\n"}),
    ]


def _archive_setup():
    from kiln.runtime.module import load_module

    workdir = tempfile.mkdtemp(prefix="kiln_fuzz_archive_")
    counter = iter(range(1 << 62))

    def run(data: bytes):
        path = os.path.join(workdir, f"input{next(counter)}.tar")
        with open(path, "wb") as file:
            file.write(data)
        try:
            return load_module(path).type_key
        finally:
            os.unlink(path)

    return run


def _mlf_seeds() -> list[bytes]:
    import kiln
    from kiln.relay.backend import Executor, Runtime

    mod, params = _small_model()
    executor = Executor("aot", {"interface-api": "c", "unpacked-api": True})
    with kiln.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        lib = kiln.relay.build(mod, target="c", executor=executor, runtime=Runtime("crt"),
                               params=params)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.tar")
        kiln.micro.export_model_library_format(lib, path)
        # Without its copy of the C runtime (readers fall back to kiln's), the archive is a
        # tenth of the size, so far more of each mutant lands in the model's own files.
        out = io.BytesIO()
        with tarfile.open(path) as whole, tarfile.open(fileobj=out, mode="w") as lean:
            for member in whole.getmembers():
                if not member.name.startswith("./runtime"):
                    lean.addfile(member, whole.extractfile(member) if member.isfile() else None)
        return [out.getvalue()]


def _mlf_setup():
    from kiln.micro.board import ModelLibrary
    from kiln.micro.model_library_format import read_metadata

    workdir = tempfile.mkdtemp(prefix="kiln_fuzz_mlf_")
    path = os.path.join(workdir, "model.tar")

    def run(data: bytes):
        with open(path, "wb") as file:
            file.write(data)
        read_metadata(path)
        library = ModelLibrary(path)
        return library.inputs, library.outputs

    return run


# ---- TFLite --------------------------------------------------------------------------------

def _tflite_seeds() -> list[bytes]:
    """A float CNN and an int8 one (conv, depthwise, pool, fully connected, softmax)."""
    from kiln.relay.testing.tflite import TFLiteModelBuilder

    rng = np.random.default_rng(0)

    def cnn(dtype: str) -> bytes:
        q = {} if dtype == "float32" else {"scale": 0.05, "zero_point": -3}
        wq = {} if dtype == "float32" else {"scale": [0.01, 0.02], "zero_point": [0, 0],
                                            "quantized_dimension": 0}
        bq = {} if dtype == "float32" else {"scale": [5e-4, 1e-3], "zero_point": [0, 0]}
        bias_dtype = "float32" if dtype == "float32" else "int32"
        b = TFLiteModelBuilder()
        x = b.add_input("x", (1, 6, 6, 1), dtype, **q)
        w = b.add_const("w", rng.integers(-5, 5, (2, 3, 3, 1)), dtype, **wq)
        c = b.add_tensor("c", (1, 6, 6, 2), dtype, **q)
        b.add_operator("CONV_2D", [x, w, b.add_const("b", [1, -1], bias_dtype, **bq)], [c],
                       "Conv2DOptions", Padding=0, StrideH=1, StrideW=1,
                       FusedActivationFunction=1)
        d = b.add_tensor("d", (1, 6, 6, 2), dtype, **q)
        dw = b.add_const("dw", rng.integers(-5, 5, (1, 3, 3, 2)), dtype,
                         **({**wq, "quantized_dimension": 3} if wq else {}))
        b.add_operator("DEPTHWISE_CONV_2D", [c, dw, -1], [d], "DepthwiseConv2DOptions",
                       Padding=0, StrideH=1, StrideW=1, DepthMultiplier=1)
        p = b.add_tensor("p", (1, 3, 3, 2), dtype, **q)
        b.add_operator("AVERAGE_POOL_2D", [d], [p], "Pool2DOptions", Padding=1, StrideH=2,
                       StrideW=2, FilterHeight=2, FilterWidth=2)
        f = b.add_tensor("f", (1, 3), dtype, **q)
        fw = b.add_const("fw", rng.integers(-5, 5, (3, 18)), dtype,
                         **({"scale": 0.01, "zero_point": 0} if q else {}))
        b.add_operator("FULLY_CONNECTED", [p, fw], [f])
        s = b.add_tensor("s", (1, 3), dtype,
                         **({"scale": 1 / 256, "zero_point": -128} if q else {}))
        b.add_operator("SOFTMAX", [f], [s], "SoftmaxOptions", Beta=1.0)
        b.add_output(s)
        return b.finish()

    return [cnn("float32"), cnn("int8")]


def _tflite_setup():
    from kiln.relay.frontend import from_tflite

    def run(data: bytes):
        mod, _ = from_tflite(data)
        return len(mod.functions)

    return run


# ---- ONNX ----------------------------------------------------------------------------------

def _onnx_seeds() -> list[bytes]:
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes, inputs, outputs, inits=(), opset=17):
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    def info(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    w = numpy_helper.from_array(np.ones((4, 3), "float32"), "w")
    shape = numpy_helper.from_array(np.array([3, -1], "int64"), "shape")
    conv_w = numpy_helper.from_array(np.ones((2, 1, 3, 3), "float32"), "cw")
    return [m.SerializeToString() for m in [
        model([helper.make_node("MatMul", ["x", "w"], ["h"]),
               helper.make_node("Relu", ["h"], ["r"]),
               helper.make_node("Softmax", ["r"], ["y"], axis=1)],
              [info("x", ["batch", 4])], [info("y", ["batch", 3])], [w], opset=11),
        model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
              [info("x", [2, 6])], [info("y", [3, 4])], [shape]),
        model([helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
               helper.make_node("Concat", ["p", "p"], ["y"], axis=1)],
              [info("x", [1, 1, 6, 6])], [info("y", [1, 4, 3, 3])], [conv_w]),
    ]]


def _onnx_setup():
    from kiln.relay.frontend import from_onnx

    def run(data: bytes):
        mod, _ = from_onnx(data)
        return len(mod.functions)

    return run


# ---- Relay text and IR JSON ----------------------------------------------------------------

def _relay_text_seeds() -> list[bytes]:
    mod, _ = _small_model()
    return [RICH_RELAY_TEXT.encode(), mod.astext(show_meta_data=True).encode(),
            _graph_build().ir_mod.astext(show_meta_data=True).encode()]


def _relay_text_setup():
    from kiln.relay.parser import parse
    from kiln.runtime.object import import_node_type_modules

    import_node_type_modules()  # the operators, once here, not inside an input's time limit

    def run(data: bytes):
        mod = parse(data.decode("utf-8", "replace"))
        return mod.astext()  # printing what was parsed must work too

    return run


def _ir_json_seeds() -> list[bytes]:
    import kiln

    mod, _ = _small_model()
    rich = kiln.parser.parse(RICH_RELAY_TEXT)
    return [kiln.save_json(x).encode() for x in (rich, mod, _graph_build().ir_mod,
                                                 {"axis": [1, 2.5, "x", None, True]})]


def _ir_json_setup():
    from kiln.runtime.object import import_node_type_modules
    from kiln.runtime.serialization import load_json

    import_node_type_modules()  # once here, not inside the first input's time limit

    return load_json


# ---- the harness's own check ----------------------------------------------------------------

def _selftest_setup():
    from kiln.runtime.error import TVMError

    def run(data: bytes):
        if data.startswith(b"crash"):
            os.abort()
        if data.startswith(b"hang"):
            time.sleep(3600)
        if data.startswith(b"bare"):
            raise KeyError("a bare exception")
        if data.startswith(b"ok"):
            return None
        raise TVMError("a clear error")

    return run


TARGETS: dict[str, Target] = {t.name: t for t in [
    Target("params", _params_seeds, _params_setup),
    Target("ndarray", _ndarray_seeds, _ndarray_setup),
    Target("graph_json", _graph_seeds, _graph_setup, text=True),
    Target("vm_executable", _vm_seeds, _vm_setup),
    Target("module_archive", _archive_seeds, _archive_setup, timeout=120.0, restart_every=300),
    Target("model_library_format", _mlf_seeds, _mlf_setup),
    Target("onnx", _onnx_seeds, _onnx_setup),
    Target("tflite", _tflite_seeds, _tflite_setup),
    Target("relay_text", _relay_text_seeds, _relay_text_setup, text=True),
    Target("ir_json", _ir_json_seeds, _ir_json_setup, text=True),
]}
SELFTEST = Target("selftest", lambda: [b"ok"], _selftest_setup, timeout=2.0, retry_factor=1.0)


def get_target(name: str) -> Target:
    """The target called ``name`` (``selftest`` is the harness's own check)."""
    if name == SELFTEST.name:
        return SELFTEST
    if name not in TARGETS:
        raise KeyError(f"no fuzz target {name!r}; known: {', '.join(TARGETS)}")
    return TARGETS[name]
