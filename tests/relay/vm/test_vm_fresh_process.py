"""Every Relay VM "done-when" program survives save -> fresh process -> run, bit for bit.

One module fixture compiles each program of the VM's done-when list (if/else on tensors,
recursive sum, a closure returned and applied, prelude List map/fold/nth, tuples in and out,
an ``Any``-batch MLP at several batch sizes, ADT pattern matching, reshape with dynamic
shapes, ``KillRegister`` lowering peak memory, tail recursion to depth 100,000), runs it here
on fixed inputs, checks those results against NumPy / hand-computed values, and saves the
bytecode (``code``), the exported kernel library (``.so``), the inputs and the outputs. One
child process that imports only ``kiln.runtime`` loads every program, runs it on the saved
inputs and compares with the saved outputs: same dtypes, shapes, constructor tags and bits.

Values cross the process boundary as "plain" values: a tensor is a NumPy array, an ADT
(tuple, List cell, user constructor) is ``("adt", tag, [fields])``. The helpers that convert
and compare plain values and measure peak memory are written once here and sent to the child
as source, so both processes use the same rules.
"""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_control_flow import _shape_module, _sum_module

import kiln
from kiln import relay
from kiln.relay.prelude import Prelude
from kiln.runtime import ndarray as nd
from kiln.runtime.container import ADT
from kiln.runtime.ndarray import NDArray
from kiln.runtime.vm import Opcode, VirtualMachine

# compile + export of these ten programs, cold cache, 3 runs on this box: "c" 4.9-8.1 s,
# "llvm" 5.8-9.1 s
TARGET = "c"
ANY = relay.Any()
TAIL_DEPTH = 100_000
KILL_ROWS, KILL_WIDTH, KILL_LAYERS = 64, 32, 6


# -- helpers shared with the child process (sent as source: numpy and kiln.runtime only) ----

def to_plain(value):
    """A VM value as plain data: NumPy arrays and ``("adt", tag, [fields])``."""
    if isinstance(value, NDArray):
        return value.numpy()
    if isinstance(value, ADT):
        return ("adt", value.tag, [to_plain(field) for field in value.fields])
    raise TypeError(f"unexpected VM value {type(value).__name__}")


def from_plain(value):
    """Plain data as a VM argument: NDArrays, and ADTs for ``("adt", tag, fields)``."""
    if isinstance(value, tuple):
        _, tag, fields = value
        return ADT(tag, [from_plain(field) for field in fields])
    return nd.array(value)


def difference(actual, expected, where="result"):
    """Why two plain values differ (dtype, shape, tag, arity or bits), or None if identical."""
    if isinstance(expected, tuple) or isinstance(actual, tuple):
        if not (isinstance(expected, tuple) and isinstance(actual, tuple)):
            return f"{where}: {type(actual).__name__} vs {type(expected).__name__}"
        if actual[1] != expected[1] or len(actual[2]) != len(expected[2]):
            return (f"{where}: tag {actual[1]} with {len(actual[2])} fields vs tag "
                    f"{expected[1]} with {len(expected[2])} fields")
        for index, (a, e) in enumerate(zip(actual[2], expected[2])):
            reason = difference(a, e, f"{where}[{index}]")
            if reason:
                return reason
        return None
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return (f"{where}: {actual.dtype}{list(actual.shape)} vs "
                f"{expected.dtype}{list(expected.shape)}")
    if not np.array_equal(actual, expected) or actual.tobytes() != expected.tobytes():
        return f"{where}: values differ ({actual.ravel()[:4]} vs {expected.ravel()[:4]})"
    return None


def peak_bytes(exe, args, cpu):
    """Run ``exe`` once with the naive allocator; the most bytes held at any moment, and
    the plain result."""
    vm = VirtualMachine(exe, cpu, memory_cfg="naive")
    allocator = vm.allocators[0]
    acquire, peak = allocator._acquire, [0]

    def tracking(nbytes, alignment):
        block = acquire(nbytes, alignment)
        peak[0] = max(peak[0], vm.memory_in_use() + block.nbytes)
        return block

    allocator._acquire = tracking
    result = to_plain(vm.run(*args))
    return peak[0], result


CHILD_MAIN = """
import pickle
import sys
from pathlib import Path

import numpy as np

import kiln.runtime
from kiln.runtime import ndarray as nd
from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray
from kiln.runtime.vm import Executable, VirtualMachine

{helpers}

folder = Path(sys.argv[1])
saved = pickle.loads((folder / "programs.pkl").read_bytes())
cpu = kiln.runtime.cpu(0)
for name, program in saved.items():
    lib = kiln.runtime.load_module(str(folder / (name + ".so")))
    exe = Executable.load_exec((folder / (name + ".ro")).read_bytes(), lib)
    vm = VirtualMachine(exe, cpu)
    reasons = []
    for index, (args, expected) in enumerate(program["runs"]):
        actual = to_plain(vm.run(*[from_plain(arg) for arg in args]))
        reason = difference(actual, expected, f"run {{index}}")
        if reason:
            reasons.append(reason)
    if program["peak"] is not None:
        args, expected = program["runs"][0]
        peak, actual = peak_bytes(exe, [from_plain(arg) for arg in args], cpu)
        assert peak == program["peak"], f"{{name}}: peak {{peak}} here, {{program['peak']}} there"
        reason = difference(actual, expected, "naive-allocator run")
        if reason:
            reasons.append(reason)
    print(name, "same" if not reasons else "DIFFERENT: " + "; ".join(reasons), flush=True)


def rejection(load_code, lib_name):
    # the first line of the TVMError that loading and running if_else this way raises
    try:
        exe = Executable.load_exec(load_code, kiln.runtime.load_module(
            str(folder / (lib_name + ".so"))))
        VirtualMachine(exe, cpu).run(np.array(True), *np.ones((2, 2, 3), "float32"))
    except TVMError as err:
        return str(err).splitlines()[0]
    return "accepted"


code = (folder / "if_else.ro").read_bytes()
print("bad: another program's library:", rejection(code, "closure"))
print("bad: truncated bytecode:", rejection(code[: len(code) // 2], "if_else"))
others = sorted(m for m in sys.modules if m.startswith("kiln.")
                and not m.startswith("kiln.runtime") and m != "kiln._lazy")
assert "kiln.relay" not in sys.modules and not others, others
print("only kiln.runtime was imported")
"""


def child_script() -> str:
    helpers = "\n\n".join(inspect.getsource(f) for f in (to_plain, from_plain, difference,
                                                            peak_bytes))
    return CHILD_MAIN.format(helpers=helpers)


# -- the programs: each returns (module, [(args, oracle)]) -----------------------------------
# An oracle is the expected plain result (compared with a tolerance where kernels round).

def _if_else(rng):
    x, y = relay.var("x", shape=(2, 3)), relay.var("y", shape=(2, 3))
    cond = relay.var("c", shape=(), dtype="bool")
    chosen = relay.If(cond, relay.add(x, y), relay.multiply(relay.nn.relu(x), y))
    mod = kiln.IRModule.from_expr(relay.Function([cond, x, y], relay.add(chosen, x)))
    a, b = rng.standard_normal((2, 2, 3), dtype="float32")
    return mod, [([np.array(True), a, b], (a + b) + a),
                 ([np.array(False), a, b], np.maximum(a, 0) * b + a)]


def _recursive_sum(rng):
    """``total(i) = if i == 0 then 0 else i + total(i - 1)`` (not a tail call)."""
    mod = kiln.IRModule()
    total = relay.GlobalVar("total")
    i = relay.var("i", shape=(), dtype="int32")
    one, zero = relay.const(1, "int32"), relay.const(0, "int32")
    mod[total] = relay.Function([i], relay.If(relay.equal(i, zero), zero,
                                              relay.add(i, total(relay.subtract(i, one)))),
                                relay.TensorType((), "int32"))
    n = relay.var("n", shape=(), dtype="int32")
    mod["main"] = relay.Function([n], total(n))
    return mod, [([np.array(n, "int32")], np.array(n * (n + 1) // 2, "int32"))
                 for n in (0, 1, 37)]


def _closure(rng):
    """``let adder = make_adder(x) in adder(x * x)``: a closure is returned, then applied."""
    x, y = relay.var("x", shape=(3,)), relay.var("y", shape=(3,))
    make_adder = relay.Function([x], relay.Function([y], relay.add(x, y)))
    adder = relay.var("adder")
    body = relay.Let(adder, make_adder(x), adder(relay.multiply(x, x)))
    mod = kiln.IRModule.from_expr(relay.Function([x], body))
    a = rng.standard_normal(3, dtype="float32")
    return mod, [([a], a + a * a)]


def _list_of(prelude, arrays):
    """A prelude List of ``arrays`` as plain data (Cons cells ending in Nil)."""
    value = ("adt", prelude.Nil.tag, [])
    for array in reversed(arrays):
        value = ("adt", prelude.Cons.tag, [array, value])
    return value


def _prelude_list(rng):
    """``(nth(map(triple, xs), 2), foldl(add, 0, xs), map(triple, xs))`` on a List input."""
    p = Prelude()
    row = relay.TensorType((2,), "float32")
    xs = relay.var("xs", relay.TypeCall(p.List, [row]))
    x, a, b = relay.var("x", row), relay.var("a", row), relay.var("b", row)
    tripled = p.map(relay.Function([x], relay.multiply(x, relay.const(3.0))), xs)
    summed = p.foldl(relay.Function([a, b], relay.add(a, b)),
                     relay.const(np.zeros(2, "float32")), xs)
    mod = p.mod.copy()
    mod["main"] = relay.Function([xs], relay.Tuple([
        p.nth(tripled, relay.const(2, "int32")), summed, tripled]))
    rows = list(rng.standard_normal((4, 2), dtype="float32"))
    total = np.zeros(2, "float32")
    for r in rows:
        total = total + r
    oracle = ("adt", 0, [rows[2] * 3, total, _list_of(p, [r * 3 for r in rows])])
    return mod, [([_list_of(p, rows)], oracle)]


def _tuples(rng):
    """A tuple in, a nested tuple out: ``(b - a, (a, a + b))``."""
    vec = relay.TensorType((2,), "float32")
    pair = relay.var("pair", relay.TupleType([vec, vec]))
    a, b = relay.TupleGetItem(pair, 0), relay.TupleGetItem(pair, 1)
    out = relay.Tuple([relay.subtract(b, a), relay.Tuple([a, relay.add(a, b)])])
    mod = kiln.IRModule.from_expr(relay.Function([pair], out))
    u, v = rng.standard_normal((2, 2), dtype="float32")
    return mod, [([("adt", 0, [u, v])], ("adt", 0, [v - u, ("adt", 0, [u, u + v])]))]


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _any_batch_mlp(rng):
    """dense -> bias_add -> relu -> dense -> softmax with an ``Any`` batch, at 1, 3 and 17."""
    x = relay.var("x", shape=(ANY, 8))
    w1, b1 = relay.var("w1", shape=(16, 8)), relay.var("b1", shape=(16,))
    w2 = relay.var("w2", shape=(4, 16))
    hidden = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w1), b1))
    out = relay.nn.softmax(relay.nn.dense(hidden, w2))
    mod = kiln.IRModule.from_expr(relay.Function([x, w1, b1, w2], out))
    w1v = rng.standard_normal((16, 8), dtype="float32")
    b1v = rng.standard_normal(16, dtype="float32")
    w2v = rng.standard_normal((4, 16), dtype="float32")
    runs = []
    for batch in (1, 3, 17):
        xv = rng.standard_normal((batch, 8), dtype="float32")
        runs.append(([xv, w1v, b1v, w2v], _softmax(np.maximum(xv @ w1v.T + b1v, 0) @ w2v.T)))
    return mod, runs


def _adt_matching(rng):
    """``type Shape = Circle(r) | Rect(w, h) | Empty`` (test_control_flow's): main returns
    ``(area(s), turned(s))`` where turned makes a new Shape, so ADTs go in and come out."""
    mod, area, circle, rect, empty = _shape_module()
    scalar = relay.TensorType((), "float32")
    s = relay.var("s", relay.TypeCall(mod.get_global_type_var("Shape"), []))
    r, w, h = relay.var("r", scalar), relay.var("w", scalar), relay.var("h", scalar)
    turned = relay.Match(s, [
        relay.Clause(relay.PatternConstructor(circle, [relay.PatternVar(r)]), rect(r, r)),
        relay.Clause(relay.PatternConstructor(rect, [relay.PatternVar(w), relay.PatternVar(h)]),
                     circle(relay.add(w, h))),
        relay.Clause(relay.PatternWildcard(), empty()),
    ])
    mod["main"] = relay.Function([s], relay.Tuple([area(s), turned]))
    f32 = np.float32
    runs = [
        ([("adt", circle.tag, [np.array(2.0, f32)])],
         ("adt", 0, [np.array(12.0, f32),
                     ("adt", rect.tag, [np.array(2.0, f32), np.array(2.0, f32)])])),
        ([("adt", rect.tag, [np.array(2.5, f32), np.array(4.0, f32)])],
         ("adt", 0, [np.array(10.0, f32), ("adt", circle.tag, [np.array(6.5, f32)])])),
        ([("adt", empty.tag, [])], ("adt", 0, [np.array(0.0, f32), ("adt", empty.tag, [])])),
    ]
    return mod, runs


def _dynamic_reshape(rng):
    """``reshape(dense(x, w), (-1, 2))`` with an ``Any`` row count, at 2 and 6 rows."""
    x, w = relay.var("x", shape=(ANY, 3)), relay.var("w", shape=(4, 3))
    mod = kiln.IRModule.from_expr(relay.Function(
        [x, w], relay.reshape(relay.nn.dense(x, w), (-1, 2))))
    weight = rng.standard_normal((4, 3), dtype="float32")
    runs = []
    for rows in (2, 6):
        data = rng.standard_normal((rows, 3), dtype="float32")
        runs.append(([data, weight], (data @ weight.T).reshape(-1, 2)))
    return mod, runs


def _kill_register_chain(rng):
    """KILL_LAYERS dense layers on ``Any`` rows: each activation has its own storage, and
    KillRegister frees it once the next layer has read it."""
    x = relay.var("x", shape=(ANY, KILL_WIDTH))
    w = relay.var("w", shape=(KILL_WIDTH, KILL_WIDTH))
    h = x
    for _ in range(KILL_LAYERS):
        h = relay.nn.dense(h, w)
    mod = kiln.IRModule.from_expr(relay.Function([x, w], h))
    xv = rng.standard_normal((KILL_ROWS, KILL_WIDTH), dtype="float32")
    wv = (rng.standard_normal((KILL_WIDTH, KILL_WIDTH)) / 8).astype("float32")
    expected = xv
    for _ in range(KILL_LAYERS):
        expected = expected @ wv.T
    return mod, [([xv, wv], expected)]


def _tail_counter(rng):
    """test_control_flow's ``sum_up(i, acc) = if i == 0 then acc else sum_up(i - 1, acc + i)``
    to depth 100,000: every step is a tail call, so the VM loops in one frame."""
    return _sum_module(), [([np.array(TAIL_DEPTH, "int64")],
                            np.array(TAIL_DEPTH * (TAIL_DEPTH + 1) // 2, "int64"))]


PROGRAMS = {
    "if_else": _if_else,
    "recursive_sum": _recursive_sum,
    "closure": _closure,
    "prelude_list": _prelude_list,
    "tuples": _tuples,
    "any_batch_mlp": _any_batch_mlp,
    "adt_matching": _adt_matching,
    "dynamic_reshape": _dynamic_reshape,
    "kill_register": _kill_register_chain,
    "tail_recursion": _tail_counter,
}
EXACT = {"recursive_sum", "tail_recursion", "tuples", "adt_matching"}  # no rounding kernels


def _assert_close(actual, expected, exact):
    if isinstance(expected, tuple):
        assert actual[:2] == expected[:2] and len(actual[2]) == len(expected[2])
        for a, e in zip(actual[2], expected[2]):
            _assert_close(a, e, exact)
        return
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if exact:
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def saved_programs(tmp_path_factory):
    """Compile, run (against the oracles) and save every program; returns the folder, the
    executables and the KillRegister program's naive-allocator peak in bytes."""
    folder = tmp_path_factory.mktemp("vm_fresh_process")
    rng = np.random.default_rng(20)
    saved, executables = {}, {}
    for name, build in PROGRAMS.items():
        mod, cases = build(rng)
        exe = relay.vm.compile(mod, TARGET)
        vm = VirtualMachine(exe, kiln.cpu(0))
        runs = []
        for args, oracle in cases:
            result = to_plain(vm.run(*[from_plain(arg) for arg in args]))
            _assert_close(result, oracle, name in EXACT)
            runs.append((args, result))
        assert vm.frame_depth == 0
        code, lib = exe.save()
        (folder / f"{name}.ro").write_bytes(code)
        lib.export_library(str(folder / f"{name}.so"))
        saved[name] = {"runs": runs, "peak": None}
        executables[name] = exe
    kill_exe = executables["kill_register"]
    args, result = saved["kill_register"]["runs"][0]
    peak, naive_result = peak_bytes(kill_exe, [from_plain(arg) for arg in args], kiln.cpu(0))
    assert difference(naive_result, result) is None
    saved["kill_register"]["peak"] = peak
    (folder / "programs.pkl").write_bytes(pickle.dumps(saved))
    return folder, executables, peak


def test_every_program_runs_identically_in_a_fresh_process(saved_programs):
    """One test uses the fixture (so ``-n 2`` compiles the programs once)."""
    folder, executables, peak = saved_programs
    kill_main = executables["kill_register"].function("main").instructions
    assert [i.opcode for i in kill_main].count(Opcode.KillRegister) >= KILL_LAYERS - 1
    activation = KILL_ROWS * KILL_WIDTH * 4
    # without kills all KILL_LAYERS activations are alive at the end; with them at most the
    # input of a layer, its output and a shape-function scratch tensor
    assert activation <= peak <= 3 * activation < KILL_LAYERS * activation

    repo = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", child_script(), str(folder)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    *programs, wrong_lib, truncated, imports = proc.stdout.strip().splitlines()
    assert dict(line.split(" ", 1) for line in programs) == {name: "same" for name in PROGRAMS}, \
        proc.stdout
    # bad artifacts are clear kiln errors there too, not crashes or wrong answers
    assert "is not in the executable's kernel library" in wrong_lib, wrong_lib
    assert "truncated or corrupt" in truncated, truncated
    assert imports == "only kiln.runtime was imported"


@pytest.mark.parametrize("actual, expected, reason", [
    (np.zeros(2, "float32"), np.zeros(2, "float64"), "float32[2] vs float64[2]"),
    (np.zeros(2, "float32"), np.zeros((1, 2), "float32"), "float32[2] vs float32[1, 2]"),
    (np.array([0.0], "float32"), np.array([-0.0], "float32"), "values differ"),
    (np.array([1, 2], "int64"), np.array([1, 3], "int64"), "values differ"),
    (("adt", 1, []), ("adt", 2, []), "tag 1 with 0 fields vs tag 2 with 0 fields"),
    (("adt", 0, [np.ones(1)]), ("adt", 0, [np.ones(1), np.ones(1)]), "with 1 fields"),
    (("adt", 0, [np.ones(1)]), np.ones(1), "tuple vs ndarray"),
    (("adt", 3, [("adt", 0, [np.ones(1, "int32")])]),
     ("adt", 3, [("adt", 0, [np.ones(1, "int64")])]), "result[0][0]: int32[1] vs int64[1]"),
])
def test_the_comparison_sees_dtype_shape_tag_and_bit_differences(actual, expected, reason):
    found = difference(actual, expected)
    assert found is not None and reason in found
    assert difference(expected, expected) is None


def test_plain_values_round_trip_through_adts():
    value = ("adt", 5, [np.arange(3, dtype="int32"), ("adt", 0, [])])
    adt = from_plain(value)
    assert isinstance(adt, ADT) and adt.tag == 5 and adt.fields[1].tag == 0
    assert difference(to_plain(ADT(5, [kiln.nd.array(value[2][0]), ADT(0, [])])), value) is None
    with pytest.raises(TypeError, match="unexpected VM value"):
        to_plain(object())
