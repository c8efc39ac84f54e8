"""kiln quickstart: build a small CNN in Relay, compile it to native code, run it, time it.

    python examples/quickstart.py

Uses the LLVM backend when llvmlite is installed (``pip install kiln[llvm]``), else the C
backend through the system compiler. The result is checked against kiln's reference
interpreter (NumPy semantics).
"""

from __future__ import annotations

import time

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.target.codegen_llvm import llvm_available


def small_cnn(batch: int = 1):
    """conv(3→16) + bias + relu → max pool → conv(16→32) + relu → global pool → dense(10)."""
    rng = np.random.default_rng(0)
    data = relay.var("data", shape=(batch, 3, 32, 32))
    params = {
        "w1": rng.standard_normal((16, 3, 3, 3)).astype("float32") * 0.2,
        "b1": rng.standard_normal(16).astype("float32") * 0.1,
        "w2": rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.1,
        "fc_w": rng.standard_normal((10, 32)).astype("float32") * 0.2,
        "fc_b": rng.standard_normal(10).astype("float32") * 0.1,
    }
    v = {name: relay.var(name, shape=value.shape) for name, value in params.items()}
    x = relay.nn.conv2d(data, v["w1"], padding=(1, 1), channels=16, kernel_size=(3, 3))
    x = relay.nn.relu(relay.nn.bias_add(x, v["b1"]))
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.relu(relay.nn.conv2d(x, v["w2"], padding=(1, 1), channels=32,
                                      kernel_size=(3, 3)))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    x = relay.nn.bias_add(relay.nn.dense(x, v["fc_w"]), v["fc_b"])
    func = relay.Function([data, *v.values()], relay.nn.softmax(x))
    return tvm.IRModule.from_expr(func), params


def main() -> None:
    target = "llvm" if llvm_available() else "c"
    mod, params = small_cnn()
    print(mod.astext(show_meta_data=False))

    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    compile_s = time.perf_counter() - start

    dev = tvm.cpu(0)
    module = graph_executor.GraphModule(lib["default"](dev))
    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
    module.set_input("data", image)
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
