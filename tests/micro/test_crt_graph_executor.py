"""The C graph executor runs models built by kiln for the CRT (target "c",
Runtime("crt", {"system-lib": True}), Executor("graph", {"link-params": ...})): graph JSON,
params and the generated C (kernels, function registry, linked params) compiled with the CRT.
Outputs are compared with NumPy and with kiln's Python graph executor.
"""

from __future__ import annotations

import numpy as np
import pytest
from crt_testlib import C_TEST_DIR, build_program, run_program

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend import Executor, Runtime


def _mlp():
    """dense+bias+relu -> dense -> softmax, returning (probabilities, hidden)."""
    x = relay.var("x", shape=(2, 16), dtype="float32")
    w1 = relay.var("w1", shape=(32, 16), dtype="float32")
    b1 = relay.var("b1", shape=(32,), dtype="float32")
    w2 = relay.var("w2", shape=(10, 32), dtype="float32")
    hidden = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w1), b1))
    out = relay.nn.softmax(relay.nn.dense(hidden, w2))
    rng = np.random.default_rng(0)
    params = {
        "w1": rng.standard_normal((32, 16)).astype("float32"),
        "b1": rng.standard_normal(32).astype("float32"),
        "w2": rng.standard_normal((10, 32)).astype("float32"),
    }
    func = relay.Function([x, w1, b1, w2], relay.Tuple([out, hidden]))
    return tvm.IRModule.from_expr(func), params, {"x": rng.standard_normal((2, 16), "float32")}


def _mlp_reference(params, inputs):
    hidden = np.maximum(inputs["x"] @ params["w1"].T + params["b1"], 0)
    logits = hidden @ params["w2"].T
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return [e / e.sum(axis=1, keepdims=True), hidden]


def _cnn():
    """conv2d+relu -> max_pool -> reshape -> dense, with a reshape the planner turns into __nop."""
    x = relay.var("data", shape=(1, 3, 8, 8), dtype="float32")
    w = relay.var("conv_w", shape=(4, 3, 3, 3), dtype="float32")
    d = relay.var("dense_w", shape=(5, 64), dtype="float32")
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    y = relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = relay.nn.dense(relay.reshape(y, (1, 64)), d)
    rng = np.random.default_rng(1)
    params = {
        "conv_w": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
        "dense_w": rng.standard_normal((5, 64)).astype("float32"),
    }
    mod = tvm.IRModule.from_expr(relay.Function([x, w, d], y))
    return mod, params, {"data": rng.standard_normal((1, 3, 8, 8), "float32")}


_BUILDS = {}


CORTEX_M4 = "c -keys=arm_cpu -mcpu=cortex-m4"


def _build(model_fn, link_params, target="c"):
    """relay.build for the CRT (system-lib, graph executor) and for the host, once each."""
    key = (model_fn, link_params, target)
    if key not in _BUILDS:
        mod, params, inputs = model_fn()
        with tvm.transform.PassContext(opt_level=3):
            crt = relay.build(
                mod,
                target=target,
                params=params,
                runtime=Runtime("crt", {"system-lib": True}),
                executor=Executor("graph", {"link-params": link_params}),
            )
            host = relay.build(mod, target="c", params=params)
        _BUILDS[key] = (crt, host, inputs)
    return _BUILDS[key]


def _sources(lib):
    """The C source of a module and of everything it imports."""
    return [lib.get_source()] + [s for m in lib.imported_modules for s in _sources(m)]


class Built:
    """A model built by kiln for the CRT and the C graph executor program that runs it."""

    def __init__(self, out_dir, name, model_fn, linked=False, target="c"):
        self.factory, self.host, self.inputs = _build(model_fn, linked, target)
        self.graph_json = self.factory.get_graph_json()
        self.params = {k: v.numpy() for k, v in self.factory.get_params().items()}
        self.dir = out_dir / name
        self.dir.mkdir(parents=True)
        generated = []
        for i, source in enumerate(_sources(self.factory.get_lib())):
            generated.append(self.dir / f"lib{i}.c")
            generated[-1].write_text(source)
        (self.dir / "graph.json").write_text(self.graph_json)
        (self.dir / "params.bin").write_bytes(tvm.runtime.save_param_dict(self.params))
        self.exe = build_program(
            out_dir,
            f"{name}_runner",
            [C_TEST_DIR / "graph_runner.c"],
            components=("common", "memory", "graph_executor"),
            generated=generated,
        )

    def run(self, params="params.bin", inputs=None, expect_ok=True, graph="graph.json"):
        inputs = self.inputs if inputs is None else inputs
        args = [str(self.dir / graph), str(self.dir / params) if params != "-" else "-"]
        args.append(str(self.dir))
        for name, value in inputs.items():
            path = self.dir / f"in_{name}.bin"
            path.write_bytes(np.ascontiguousarray(value).tobytes())
            args.append(f"{name}={path}")
        proc = run_program(self.exe, *args)
        if not expect_ok:
            assert proc.returncode == 2, proc.stdout + proc.stderr
            return proc.stdout
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def outputs(self, like):
        return [
            np.fromfile(self.dir / f"output{i}.bin", dtype=ref.dtype).reshape(ref.shape)
            for i, ref in enumerate(like)
        ]

    def python_outputs(self):
        m = graph_executor.GraphModule(self.host["default"](tvm.cpu(0)))
        m.set_input(**self.inputs)
        m.run()
        return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("crt_graph")


@pytest.fixture(scope="module")
def mlp(out_dir):
    return Built(out_dir, "mlp", _mlp)


@pytest.fixture(scope="module")
def cnn(out_dir):
    return Built(out_dir, "cnn", _cnn)


def test_mlp_matches_numpy_and_python_executor(mlp):
    mlp.run()
    expected = mlp.python_outputs()
    got = mlp.outputs(expected)
    assert len(got) == 2
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    _, params, inputs = _mlp()
    for g, r in zip(got, _mlp_reference(params, inputs)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_cnn_matches_python_executor(cnn):
    cnn.run()
    expected = cnn.python_outputs()
    got = cnn.outputs(expected)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)
    assert '"__nop"' in cnn.graph_json  # the reshape alias is skipped, not called


def test_cortex_m_kernels_run_on_the_host_crt(out_dir):
    # The bare-metal dialect (scalar arm_cpu schedules; big scratch from
    # TVMBackendAllocWorkspace in the packed wrappers) through the page allocator.
    built = Built(out_dir, "cnn_m4", _cnn, linked=True, target=CORTEX_M4)
    built.run(params="-")
    expected = built.python_outputs()
    np.testing.assert_allclose(built.outputs(expected)[0], expected[0], rtol=1e-4, atol=1e-4)


def test_linked_params_need_no_params_blob(out_dir):
    built = Built(out_dir, "mlp_linked", _mlp, linked=True)
    built.run(params="-")
    expected = built.python_outputs()
    for g, e in zip(built.outputs(expected), expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    # Linked storage is read-only memory on a device: loading params over it is refused.
    assert "is linked into the module" in built.run(expect_ok=False)


def test_bad_inputs_and_params_are_errors(mlp):
    out = mlp.run(inputs={"nope": np.zeros(3, "float32")}, expect_ok=False)
    assert "Could not find 'nope' in graph's inputs" in out
    name = sorted(mlp.params)[0]
    wrong = {name: np.zeros(3, "float32")}
    (mlp.dir / "bad_params.bin").write_bytes(tvm.runtime.save_param_dict(wrong))
    assert f"param '{name}' has another shape" in mlp.run(params="bad_params.bin", expect_ok=False)
    (mlp.dir / "odd_params.bin").write_bytes(tvm.runtime.save_param_dict({"zz": np.ones(1)}))
    assert "Could not find 'zz'" in mlp.run(params="odd_params.bin", expect_ok=False)


def test_missing_kernel_is_named(mlp):
    name = mlp.factory.get_lib().imported_modules[0].function_names[0]
    (mlp.dir / "renamed.json").write_text(mlp.graph_json.replace(f'"{name}"', '"not_a_kernel"'))
    out = mlp.run(graph="renamed.json", expect_ok=False)
    assert "calls 'not_a_kernel', which the module does not have" in out


def test_too_long_function_name_is_an_error_not_a_truncation(mlp):
    # TVM issue #8953: fused names longer than the buffer were cut and then not found.
    name = mlp.factory.get_lib().imported_modules[0].function_names[0]
    long_name = name + "_" * (130 - len(name))
    (mlp.dir / "long.json").write_text(mlp.graph_json.replace(f'"{name}"', f'"{long_name}"'))
    out = mlp.run(graph="long.json", expect_ok=False)
    assert "is longer than 119 characters (raise TVM_CRT_MAX_STRLEN_FUNCTION_NAME" in out


def _op_node(graph):
    return next(n for n in graph["nodes"] if n["op"] == "tvm_op")


def _set(path, value):
    def edit(graph):
        target = graph
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


CORRUPTIONS = {
    "storage id": (_set(["attrs", "storage_id", 1, 0], 99), "has storage id 99; ids must be"),
    "row ptr": (lambda g: g["node_row_ptr"].pop(), "node_row_ptr has"),
    "op": (lambda g: _op_node(g).update(op="bogus"), 'has op "bogus"; expected'),
    "input node": (lambda g: _op_node(g)["inputs"][0].__setitem__(0, 999), "refers to node 999"),
    "rank": (_set(["attrs", "shape", 1, 0], [1] * 7), "more than 6 dimensions (raise TVM_CRT"),
    "negative": (_set(["attrs", "shape", 1, 0], [2, -3]), "negative dimension -3"),
    "dtype": (_set(["attrs", "dltype", 1, 0], "float33x"), "invalid dtype string 'float33x'"),
    "no heads": (lambda g: g.pop("heads"), "lacks one of nodes, arg_nodes, heads"),
    "arity": (lambda g: _op_node(g)["attrs"].update(num_inputs="5"), "but its attrs say 5"),
    "arg node": (
        lambda g: g["arg_nodes"].append(g["nodes"].index(_op_node(g))),
        "is not an input node",
    ),
    "max args": (
        lambda g: (
            _op_node(g).update(inputs=[[0, 0, 0]] * 10)
            or _op_node(g)["attrs"].update(num_inputs="10")
        ),
        "(raise TVM_CRT_MAX_ARGS",
    ),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_graph_is_an_error_naming_the_problem(mlp, corruption):
    import json

    edit, message = CORRUPTIONS[corruption]
    graph = json.loads(mlp.graph_json)
    edit(graph)
    name = f"corrupt_{corruption.replace(' ', '_')}.json"
    (mlp.dir / name).write_text(json.dumps(graph))
    assert message in mlp.run(graph=name, expect_ok=False)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"nodes": [], "nodes": []}', '"nodes" appears twice'),
        ("{} trailing", "expected the end of the graph JSON at offset 3"),
        ('{"metadata": ' + "[" * 40, "TVM_CRT_MAX_JSON_DEPTH"),
        (
            '{"attrs": {"storage_id": ["list_int", []], "storage_id": ["list_int", []]}}',
            "attrs.storage_id appears twice",
        ),
        ("", "expected '{' (an object) at offset 0, found the end of the text"),
    ],
)
def test_malformed_graph_text_is_an_error(mlp, text, message):
    (mlp.dir / "malformed.json").write_text(text)
    assert message in mlp.run(graph="malformed.json", expect_ok=False)
