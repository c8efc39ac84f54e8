"""kiln quickstart: compile a small ONNX CNN to native code, run it, time it.

    python examples/quickstart.py

The model (conv → relu → max-pool → conv → relu → global-average-pool → dense → softmax, with
fixed random weights) is written with ``onnx.helper`` into a temporary ``.onnx`` file, imported
with ``relay.frontend.from_onnx``, compiled with ``relay.build`` and run on the graph executor.
The result is checked against kiln's reference interpreter (NumPy semantics). Uses the LLVM
backend when llvmlite is installed (``pip install kiln[llvm]``), else the C backend through the
system compiler.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.target.codegen_llvm import llvm_available


def small_cnn_onnx(path: Path) -> None:
    """Write the example CNN (input ``image``: 1×3×32×32) as an ONNX model."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((16, 3, 3, 3)).astype("float32") * 0.2,
        "b1": rng.standard_normal(16).astype("float32") * 0.1,
        "w2": rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.1,
        "fc_w": rng.standard_normal((10, 32)).astype("float32") * 0.2,
        "fc_b": rng.standard_normal(10).astype("float32") * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def main() -> None:
    target = "llvm" if llvm_available() else "c"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small_cnn.onnx"
        small_cnn_onnx(path)
        mod, params = relay.frontend.from_onnx(str(path))
    print(mod.astext(show_meta_data=False))

    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    compile_s = time.perf_counter() - start

    dev = tvm.cpu(0)
    module = graph_executor.GraphModule(lib["default"](dev))
    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
    module.set_input("image", image)
    module.run()
    probs = module.get_output(0).numpy()

    reference = relay.create_executor("debug", mod=mod, params=params).evaluate()(image)
    error = float(np.abs(probs - reference.numpy()).max())
    timing = module.benchmark(dev, repeat=10, number=20)

    print(f"target: {target}")
    print(f"compiled in {compile_s:.2f} s: {lib.stats['kernels']} fused kernels, "
          f"{lib.stats['planned_bytes']} bytes planned for intermediates and params")
    print(f"class probabilities: {np.array2string(probs[0], precision=4)}")
    print(f"predicted class: {int(probs.argmax())}  (max |kiln - reference| = {error:.2e})")
    print(f"inference: median {timing.median * 1e3:.3f} ms over {len(timing.results)} repeats")


if __name__ == "__main__":
    main()
