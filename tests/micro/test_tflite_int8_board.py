"""The int8 KWS DS-CNN written as TFLite, imported with from_tflite, built for a Cortex-M4 with
the AOT executor and run standalone on the emulated Cortex-M (QEMU) and on the host: its int8
output equals LiteRT's reference kernels on the same bytes. A MobileNet-style CNN (stride-2
depthwise layers with uneven SAME padding) checks the depthwise micro-kernels on the board."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro.board import StandaloneProject
from kiln.relay.backend import Executor, Runtime
from kiln.relay.testing import micro_models
from kiln.relay.testing.micro_models_int8 import to_tflite_int8

litert = pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("tflite")

TARGETS = {"dsp": "c -keys=arm_cpu -mcpu=cortex-m4",
           "portable": "c -keys=arm_cpu -mcpu=cortex-m4 -mattr=+nodsp"}


def litert_output(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    interp = litert.Interpreter(model_content=model_bytes,
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def build_archive(model_bytes: bytes, target: str, path) -> str:
    mod, params = relay.frontend.from_tflite(model_bytes)
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = relay.build(mod, target=tvm.target.Target(target), params=params,
                             executor=Executor("aot", {"interface-api": "c",
                                                       "unpacked-api": True}),
                             runtime=Runtime("crt", {"system-lib": True}))
    tvm.micro.export_model_library_format(module, str(path))
    return str(path)


@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    model = micro_models.kws_dscnn()
    model_bytes = to_tflite_int8(model)
    x = np.clip(np.round(model.random_input(7) * 128), -128, 127).astype("int8")
    return model_bytes, x, litert_output(model_bytes, x), tmp_path_factory.mktemp("kws_int8")


@pytest.mark.parametrize("board", ["qemu-cortex-m4", "host"])
@pytest.mark.parametrize("kernels", list(TARGETS))
def test_int8_kws_standalone_equals_litert(kws, board, kernels):
    model_bytes, x, want, tmp = kws
    archive = tmp / f"{kernels}.tar"
    if not archive.exists():
        build_archive(model_bytes, TARGETS[kernels], archive)
    project = StandaloneProject(str(archive), board, build_dir=tmp / f"{kernels}-{board}")
    project.build()
    got = project.run({"input": x}).outputs[0]
    assert got.dtype == np.int8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_int8_cnn_on_qemu_equals_litert(tmp_path):
    """The small CNN (3x3 convs with padding through the DSP kernel, max pools, a 784-input
    fully connected layer) on the emulated Cortex-M4."""
    model = micro_models.cnn()
    model_bytes = to_tflite_int8(model)
    x = np.clip(np.round(model.random_input(3) * 128), -128, 127).astype("int8")
    archive = build_archive(model_bytes, TARGETS["dsp"], tmp_path / "cnn.tar")
    project = StandaloneProject(archive, "qemu-cortex-m4", build_dir=tmp_path / "build")
    project.build()
    got = project.run({"input": x}).outputs[0]
    np.testing.assert_array_equal(got, litert_output(model_bytes, x))


def test_int8_mobilenet_on_qemu_equals_host(tmp_path):
    """Depthwise convolutions (stride 1 and 2) through the depthwise micro-kernel on the
    emulated Cortex-M4: equal to kiln on the host (llvm, x86 int8 kernels) and within one step
    of LiteRT (kiln rounds requantize once, TFLite's reference kernels twice)."""
    from kiln.contrib import graph_executor

    model = micro_models.mobilenet_tiny()
    model_bytes = to_tflite_int8(model)
    x = np.clip(np.round(model.random_input(3) * 128), -128, 127).astype("int8")
    mod, params = relay.frontend.from_tflite(model_bytes)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    host = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    host.set_input("input", x)
    host.run()
    want = host.get_output(0).numpy()
    archive = build_archive(model_bytes, TARGETS["dsp"], tmp_path / "mobilenet.tar")
    project = StandaloneProject(archive, "qemu-cortex-m4", build_dir=tmp_path / "build")
    project.build()
    got = project.run({"input": x}).outputs[0]
    np.testing.assert_array_equal(got, want)
    diff = np.abs(got.astype(int) - litert_output(model_bytes, x).astype(int))
    assert diff.max() <= 1
