"""``kiln compile --runtime crt``: a Model Library Format for the C runtime from an ONNX file."""

import json
import tarfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.driver.cli import main
from kiln.micro import model_library_format as mlf


@pytest.fixture
def onnx_model(tmp_path):
    w = numpy_helper.from_array(np.linspace(-1, 1, 40, dtype="float32").reshape(10, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.fixture
def standalone_crt(tmp_path, monkeypatch):
    """A stand-in CRT tree when kiln/micro/crt has not landed in this checkout."""
    import os

    if os.path.isdir(os.path.join(mlf.get_standalone_crt_dir(), "include")):
        return
    root = tmp_path / "crt"
    for rel in ("include/tvm/runtime/crt/module.h", "template/crt_config-template.h",
                "template/platform-template.c"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("/* stand-in */\n")
    monkeypatch.setattr(mlf, "get_standalone_crt_dir", lambda: str(root))


def test_compile_aot_crt_writes_a_model_library_format(onnx_model, tmp_path, capsys,
                                                      standalone_crt):
    out = tmp_path / "model.tar"
    argv = ["compile", str(onnx_model), "--target", "c -mcpu=cortex-m4", "--executor", "aot",
            "--runtime", "crt", "-o", str(out)]
    assert main(argv) == 0
    assert "Model Library Format" in capsys.readouterr().out
    with tarfile.open(out) as tar:
        names = tar.getnames()
        meta = json.loads(tar.extractfile("./metadata.json").read())
        header = tar.extractfile("./codegen/host/include/tvmgen_default.h").read().decode()
    assert "./codegen/host/src/default_lib0.c" in names
    assert meta["modules"]["default"]["executors"] == ["aot"]
    assert "-mcpu=cortex-m4" in meta["modules"]["default"]["target"][0]
    assert "#define TVMGEN_DEFAULT_X_SIZE 40" in header


def test_compile_graph_crt_and_refusals(onnx_model, tmp_path, capsys):
    out = tmp_path / "graph.tar"
    assert main(["compile", str(onnx_model), "--runtime", "crt", "-o", str(out)]) == 0
    with tarfile.open(out) as tar:
        assert "./executor-config/graph/default.graph" in tar.getnames()
    assert main(["compile", str(onnx_model), "--executor", "vm", "--runtime", "crt"]) == 1
    assert "the C runtime has no VM" in capsys.readouterr().err


def test_compile_and_run_a_host_aot_package(onnx_model, tmp_path, capsys):
    out = tmp_path / "aot.tar"
    assert main(["compile", str(onnx_model), "--executor", "aot", "-o", str(out)]) == 0
    assert "AOT workspace pool" in capsys.readouterr().out
    x = np.random.default_rng(0).standard_normal((1, 10)).astype("float32")
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                 str(tmp_path / "out.npz"), "--print-time", "--repeat", "2"]) == 0
    assert "time: median" in capsys.readouterr().out
    w = np.linspace(-1, 1, 40, dtype="float32").reshape(10, 4)
    r = np.maximum(x @ w, 0)
    want = np.exp(r - r.max()) / np.exp(r - r.max()).sum()
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], want, rtol=1e-5)
