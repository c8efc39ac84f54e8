"""The Python examples of the seed design documents run on kiln, verbatim.

The seed texts (``../shared/seeds/*.txt``, or the folder ``$KILN_SEEDS_DIR`` names; on a plain
clone the verbatim excerpts in ``tests/seed_examples/``, see ``tests/seed_documents.py``) are the
TVM design documents kiln was built from. Each example is cut out of its seed text from its
first line to its last, dedented, and run with ``tvm`` imports rewritten to ``kiln`` — nothing
else changes, except where the scraped page glued lines together (seed 001: "import
tvmmyadd = ..."), which a per-example table of line-break repairs undoes. Examples split by
prose share one namespace. Where the seed shows what an example prints, the printed text is
compared with it: graph JSON structurally (kernel hashes aside), Relay text modulo spacing.

Seed 002 (microTVM) has no whole program: its target string, its Executor/Runtime expressions
and its two schedule lines (``pragma(n, "import_c", ...)``, ``tensorize(owi, gemm)``) are run
verbatim in a namespace that supplies the names they use.

Not run here: seed 000 has no Python example; seed 002's AOT executor and board flow
(``tvm.micro``) are not in kiln; seed 003's Myia example runs through ``kiln.jit`` in
``test_seed_003_myia_example`` at the end of this file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

# tests/ is on sys.path under pytest (it holds conftest.py).
from seed_documents import EXCERPTS_DIR, seed_text  # documents, or in-repository excerpts

import kiln as tvm
from kiln import te, tir
from kiln.contrib import cc
from kiln.runtime.module import load_module

REPO = Path(__file__).resolve().parents[1]


def cut(text: str, first: str, last: str, anchor: str | None = None) -> tuple[str, int]:
    """The lines from ``first`` to ``last`` (compared stripped) around ``anchor``, dedented.

    ``anchor`` (default: ``first``) is a string inside the example; the example starts at the
    nearest ``first`` line at or before it and ends at the next ``last`` line. Returns the code
    and the offset in ``text`` just past it, where the seed shows the example's output.
    """
    at = text.index(anchor or first)
    lines = text.splitlines(keepends=True)
    offsets = np.cumsum([0] + [len(line) for line in lines])
    here = int(np.searchsorted(offsets, at, side="right")) - 1
    start = max(i for i in range(here + 1) if lines[i].strip() == first)
    end = next(i for i in range(here, len(lines)) if lines[i].strip() == last)
    return textwrap.dedent("".join(lines[start:end + 1])), int(offsets[end + 1])


def to_kiln(code: str) -> str:
    """Rewrite ``import tvm`` -> ``import kiln as tvm``, ``from tvm…`` -> ``from kiln…``."""
    code = re.sub(r"^(\s*)import tvm$", r"\1import kiln as tvm", code, flags=re.M)
    return re.sub(r"^(\s*)from tvm(\.|\s)", r"\1from kiln\2", code, flags=re.M)


def run_example(code: str, namespace: dict | None = None) -> tuple[str, dict, list]:
    """Execute ``code`` as a script; its stdout, namespace and warnings."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        exec(compile(to_kiln(code), "<seed example>", "exec"), namespace)
    return out.getvalue(), namespace, caught


def json_in(text: str, start: int = 0) -> dict:
    """The first graph JSON object (``{ "nodes": …``) in ``text`` at or after ``start``."""
    brace = text.rindex("{", start, text.index('"nodes"', start))
    return json.JSONDecoder().raw_decode(text, brace)[0]


def without_hashes(graph: dict) -> dict:
    """``graph`` with each node's kernel hash removed (hashes are kiln's own)."""
    graph = json.loads(json.dumps(graph))
    for node in graph["nodes"]:
        node.get("attrs", {}).pop("hash", None)
    return graph


def relay_text(text: str) -> str:
    """Relay text with spacing collapsed and the ``#[version]`` header dropped."""
    text = re.sub(r"#\[version = \"[\d.]+\"\]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def ir_printed_before_graph(printed: str) -> str:
    """What an example printed before its graph JSON, as :func:`relay_text`."""
    return relay_text(printed[:printed.rindex("{", 0, printed.index('"nodes"'))])


# -- seed 004: the graph executor -----------------------------------------------------------

def test_seed_004_graph_json_matches_the_document():
    text = seed_text("004")
    code, after = cut(text, "import numpy as np", "# op_res = intrp.evaluate(func)(x, y, z)",
                      anchor='c = relay.var("c"')
    printed, _, caught = run_example(code)
    shown_ir = re.search(r"def @main\(.*\}", text[after:]).group(0)
    assert ir_printed_before_graph(printed) == relay_text(shown_ir)
    got, want = json_in(printed), json_in(text, after)
    assert without_hashes(got) == without_hashes(want)
    hashes = {n["attrs"]["func_name"]: n["attrs"]["hash"] for n in got["nodes"][3:]}
    assert len(hashes) == 1  # both adds share one kernel, as in the document
    assert any("legacy graph executor" in str(w.message) for w in caught
               if issubclass(w.category, DeprecationWarning))


def test_seed_004_create_executor_continues_the_first_example():
    text = seed_text("004")
    first, _ = cut(text, "import numpy as np", "# op_res = intrp.evaluate(func)(x, y, z)",
                   anchor='c = relay.var("c"')
    _, namespace, _ = run_example(first)
    second, _ = cut(text, "import numpy as np", "print(op_res)", anchor="print(op_res)")
    printed, namespace, _ = run_example(second, namespace)
    np.testing.assert_array_equal(namespace["op_res"].numpy(), np.full((1, 10), 3.0, "float32"))
    assert "[[3., 3., 3., 3., 3., 3., 3., 3., 3., 3.]]" in printed


def test_seed_004_storage_ids_reuse_the_first_add():
    text = seed_text("004")
    code, after = cut(text, "import numpy as np", "print(graph)",
                      anchor="out2 = relay.add(out1, a)")
    printed, _, _ = run_example(code)
    got, want = json_in(printed), json_in(text, after)
    assert got["attrs"]["storage_id"] == ["list_int", [0, 1, 2, 3, 2]]
    assert without_hashes(got) == without_hashes(want)


# kiln spells two things of seed 004's heterogeneous output (TVM 0.8) differently: on_device
# prints its virtual device, as TVM >= 0.9 does, where TVM 0.8 printed the device type; and
# heterogeneous graphs carry kiln's ``device_id`` list beside ``device_index`` (see
# kiln/relay/backend/graph_executor_codegen.py). Either spelling is accepted.
_TVM08_ON_DEVICE = ("on_device(%0, device_type=4)", 'on_device(%0, virtual_device="opencl(0)")')


def test_seed_004_on_device_builds_for_cpu_and_opencl():
    text = seed_text("004")
    code, after = cut(text, "#!/usr/bin/env python3", "test_on_device()",
                      anchor="def test_on_device():")
    printed, _, _ = run_example(code)
    shown_func = re.search(r"fn \(%x.*?log\(%1\) \}", text[after:]).group(0)
    assert _TVM08_ON_DEVICE[0] in shown_func
    assert ir_printed_before_graph(printed) in (
        relay_text(shown_func), relay_text(shown_func.replace(*_TVM08_ON_DEVICE)))
    got, want = json_in(printed), json_in(text, after)
    assert got["attrs"].pop("device_id", ["list_int", [0] * 5]) == ["list_int", [0] * 5]
    assert got["attrs"]["device_index"] == ["list_int", [4, 4, 4, 1, 1]]
    assert without_hashes(got) == without_hashes(want)


def test_seed_004_on_device_graph_runs_on_both_devices():
    """The run the seed leaves commented out, against NumPy."""
    from kiln import relay
    from kiln.contrib import graph_executor

    x, y = relay.var("x", shape=(1, 5)), relay.var("y", shape=(1, 5))
    rng = np.random.default_rng(4)
    x_data, y_data = rng.random((2, 1, 5), dtype="float32")
    add = relay.annotation.on_device(relay.add(x, y), tvm.device("opencl"))
    with tvm.transform.PassContext(opt_level=1):
        lib = relay.build(relay.Function([x, y], relay.log(add)),
                          {"cpu": "llvm", "opencl": "opencl"}, params={"x": x_data, "y": y_data})
    rt_mod = graph_executor.GraphModule(lib["default"](tvm.cpu(0), tvm.device("opencl")))
    rt_mod.run()
    np.testing.assert_allclose(rt_mod.get_output(0).numpy(), np.log(x_data + y_data),
                               rtol=1e-6)


# -- seed 001: PackedFunc and the Node system -----------------------------------------------

# The scraped page glued some lines together; these are the line breaks it lost.
_LINE_BREAKS_001 = [
    ("import tvmmyadd", "import tvm\nmyadd"),
    ("import tvmdef callback(msg):print(msg)# convert",
     "import tvm\n\ndef callback(msg):\n    print(msg)\n\n# convert"),
    ("import tvmx = ", "import tvm\nx = "),
]


def example_001(first: str, last: str) -> str:
    code, _ = cut(seed_text("001"), first, last)
    for glued, separated in _LINE_BREAKS_001:
        code = code.replace(glued, separated)
    return code


@pytest.fixture(scope="module")
def c_registered_globals():
    """``myadd`` and ``callhello`` registered from C, as the seed's TVM_REGISTER_GLOBAL does
    (the C port of the seed's C++ lives in tests/runtime/test_seed_001.py)."""
    path = REPO / "tests" / "runtime" / "test_seed_001.py"
    spec = importlib.util.spec_from_file_location("seed_001_c_side", path)
    c_side = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c_side)
    return load_module(cc.cached_shared_library({"seed001.c": c_side.SEED_C}))


def test_seed_001_myadd_prints_3(c_registered_globals):
    code = example_001('import tvmmyadd = tvm.get_global_func("myadd")', "print(myadd(1, 2))")
    assert run_example(code)[0] == "3\n"


def test_seed_001_callhello_calls_the_python_callback(c_registered_globals):
    code = example_001("import tvmdef callback(msg):print(msg)# convert to PackedFunc",
                       "callhello(f)")
    assert run_example(code)[0] == "hello world\n"


def test_seed_001_placeholder_op_name():
    code = example_001('import tvmx = tvm.placeholder((3,4), name="x")', "print(x.op.name)")
    printed, namespace, _ = run_example(code)
    assert printed == "x\n"
    assert [int(d) for d in namespace["x"].shape] == [3, 4]


# -- seed 002: microTVM ---------------------------------------------------------------------

def test_seed_002_target_string():
    line = next(s.strip() for s in seed_text("002").splitlines()
                if s.strip().startswith("c -keys=arm_cpu"))
    target = tvm.target.Target(line)
    assert target.kind.name == "c" and target.keys[0] == "arm_cpu"
    assert target.mcpu == "cortex-m7" and target.attrs["model"] == "stm32f746xx"


def test_seed_002_executor_and_runtime_expressions_build_and_run(tmp_path):
    from kiln import relay
    from kiln.micro.board import build_standalone
    from kiln.relay.backend import Executor, Runtime

    text = seed_text("002")
    found = re.findall(r"(?:Executor|Runtime)\((?:'[^']*'|\"[^\"]*\")(?:, \{[^}]*\})?\)", text)
    assert found == ["Runtime('crt')", 'Executor("aot")',
                     'Executor("graph", {"link-params": True})',
                     'Runtime("crt", {"system-lib": True})']
    made = {s: eval(s, {"Executor": Executor, "Runtime": Runtime})
            for s in found}
    assert made["Runtime('crt')"].name == "crt" and made['Executor("aot")'].name == "aot"
    executor = made['Executor("graph", {"link-params": True})']
    runtime = made['Runtime("crt", {"system-lib": True})']
    assert executor.attrs["link-params"] and runtime.attrs["system-lib"]
    a, b = relay.var("a", shape=(1, 10)), relay.var("b", shape=(1, 10))
    mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.add(a, b)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", runtime=runtime, executor=executor)
    # A C-runtime build is bare-metal C (as in TVM): it runs as a standalone CRT program,
    # here built for the host board from the Model Library Format archive.
    tvm.micro.export_model_library_format(lib, tmp_path / "seed002.tar")
    project = build_standalone(tmp_path / "seed002.tar", "host", tmp_path / "build")
    result = project.run({"a": np.ones((1, 10), "float32"),
                          "b": np.full((1, 10), 2.0, "float32")})
    np.testing.assert_array_equal(result.outputs[0], np.full((1, 10), 3.0, "float32"))


def _copy_intrinsic_calling_call_asm():
    """A tensor intrinsic for ``c[i] = a[i] + 1`` over 4 lanes whose body is ``call_asm``."""
    a = te.placeholder((4,), "int32", name="a")
    c = te.compute((4,), lambda i: a[i] + 1, name="c")
    binds = {t: tir.decl_buffer(t.shape, t.dtype, name=t.op.name + "_buf", offset_factor=1)
             for t in (a, c)}

    def body(ins, outs):
        return tir.call_extern("void", "call_asm", ins[0].access_ptr("r"),
                               outs[0].access_ptr("w"))

    return te.decl_tensor_intrin(c.op, body, binds=binds)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_seed_002_pragma_import_c_and_tensorize_lines(target):
    text = seed_text("002")
    lines = [s.strip() for s in text.splitlines()
             if s.strip().startswith(("sched[output].pragma", "sched[output].tensorize"))]
    assert len(lines) == 2
    data = te.placeholder((2, 4), "int32", name="A")
    output = te.compute((2, 4), lambda i, j: data[i, j] + 1, name="output")
    sched = te.create_schedule(output.op)
    n, owi = output.op.axis
    namespace = {"sched": sched, "output": output, "n": n, "owi": owi,
                 "gemm": _copy_intrinsic_calling_call_asm()}
    for line in lines:
        run_example(line, namespace)
    f = tvm.build(sched, [data, output], target=target, name="seed002")
    if target == "c":
        assert "void call_asm(int32_t* a, int32_t* b)" in f.get_source("c")
    result = tvm.nd.array(np.full((2, 4), -7, "int32"))
    f["seed002"](tvm.nd.array(np.zeros((2, 4), "int32")), result)
    # call_asm's body is empty ("/* ... */"): tensorize replaced the +1 loop with it
    np.testing.assert_array_equal(result.numpy(), np.full((2, 4), -7, "int32"))


# -- the harness itself ---------------------------------------------------------------------

def test_cut_finds_the_example_around_its_anchor_and_reports_a_missing_seed(tmp_path):
    text = "prose\nimport a\nx = 1\nend()\nout\nimport a\ny = 2\nend()\n"
    code, after = cut(text, "import a", "end()", anchor="y = 2")
    assert code == "import a\ny = 2\nend()\n" and after == len(text)
    assert to_kiln("import tvm\nfrom tvm import relay\nfrom tvm.contrib import x\n") == \
        "import kiln as tvm\nfrom kiln import relay\nfrom kiln.contrib import x\n"
    with pytest.raises(FileNotFoundError, match="seed 009"):
        seed_text("009")


def test_seed_003_myia_example():
    """Seed 003's Myia example (grad of array_map/array_reduce), verbatim but for imports."""
    text = seed_text("003")
    code, _ = cut(text, "def f1(x, y):", "return dfdx")
    import linecache
    source = ("import numpy as np\nfrom kiln.jit import myia, grad, array_map, array_reduce, "
              "scalar_add, asscalar\n" + code)
    name = "<seed 003>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    ns = {"__name__": "__main__"}
    exec(compile(source, name, "exec"), ns)  # kiln.jit reads the source back via linecache
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(ns["main"](x, x + 1), np.ones((2, 3)))


def test_every_seed_the_tests_read_has_an_excerpt_in_the_repository():
    """A plain clone has no ../shared: each seed_text("NNN") needs tests/seed_examples/NNN.txt."""
    used = {number for path in (REPO / "tests").rglob("*.py")
            for number in re.findall(r'seed_text\("(\d{3})"\)', path.read_text())}
    missing = sorted(n for n in used - {"009"} if not (EXCERPTS_DIR / f"{n}.txt").is_file())
    assert not missing, f"add excerpts of seeds {missing} to {EXCERPTS_DIR}"
