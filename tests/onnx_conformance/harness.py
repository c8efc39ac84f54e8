"""ONNX backend node-test conformance tooling: materialize ONNX's node test cases and run them
through kiln (and onnxruntime) with ONNX's own tolerances.

Entry points: :func:`node_cases` (ONNX's node cases: model + inputs + expected outputs),
:func:`op_type_of`, :func:`run_kiln`, :func:`run_onnxruntime`, :class:`Outcome`,
:func:`summarize`.

The cases come from ``onnx.backend.test.case.node.collect_testcases`` (the Python definitions
ONNX ships; the installed wheel has no ``data/node`` directory). A case passes when every output
has the expected dtype and shape and matches within the case's ``rtol``/``atol``.

Example
-------
>>> cases = {c.name: c for c in node_cases()}
>>> run_kiln(cases["test_abs"]).status
'pass'
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

STATUSES = ("pass", "fail", "error")


@dataclass(frozen=True)
class Outcome:
    """The result of one case on one runtime: status "pass", "fail" (wrong values) or "error"
    (conversion or execution raised), with a one-line reason."""

    status: str
    reason: str = ""


@functools.lru_cache(maxsize=1)
def node_cases() -> tuple:
    """ONNX's backend node test cases, sorted by name."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    return tuple(sorted(cases, key=lambda c: c.name))


def op_type_of(case) -> str:
    """The op a case tests: the single node's type, or "<op>(expanded)" for function-expanded
    and multi-node cases (named after the first node's op when the name says nothing)."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    return f"{nodes[0].op_type}(multi-node)"


def case_data(case) -> tuple[list, list]:
    """The case's first data set as (inputs, expected outputs); NumPy scalars and TensorProtos
    become arrays, sequences and optionals stay Python lists/None."""
    from onnx import TensorProto, numpy_helper

    inputs, expected = case.data_sets[0]

    def as_array(value):
        if isinstance(value, TensorProto):
            return numpy_helper.to_array(value)
        return np.asarray(value) if isinstance(value, np.generic) else value

    return [as_array(x) for x in inputs], [as_array(y) for y in expected]


def _graph_inputs(case) -> list:
    initializers = {init.name for init in case.model.graph.initializer}
    return [i for i in case.model.graph.input if i.name not in initializers]


def _ml_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one of ml_dtypes' floats (NumPy sees most of them as kind "V")."""
    if dtype.kind not in "Vf" or dtype in (np.float16, np.float32, np.float64):
        return False
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def compare(actual: list, expected: list, rtol: float, atol: float) -> Outcome:
    """Compare outputs as ONNX's backend tests do: dtype, shape, then values within tolerance."""
    if len(actual) != len(expected):
        return Outcome("fail", f"{len(actual)} outputs, expected {len(expected)}")
    for index, (got, want) in enumerate(zip(actual, expected)):
        if not isinstance(want, np.ndarray):
            return Outcome("error", f"output {index} is a {type(want).__name__}, not a tensor")
        got = np.asarray(got)
        if got.dtype != want.dtype:
            return Outcome("fail", f"output {index} dtype {got.dtype}, expected {want.dtype}")
        if got.shape != want.shape:
            return Outcome("fail", f"output {index} shape {got.shape}, expected {want.shape}")
        if _ml_float(want.dtype):  # bfloat16, float8_*: compare their values as float32
            got, want = got.astype(np.float32), want.astype(np.float32)
        if want.dtype.kind in "fc":
            close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = got == want
        if not np.all(close):
            return Outcome("fail", f"output {index}: {int(np.sum(~close))} of {want.size} "
                           "values differ")
    return Outcome("pass")


def _as_list(result) -> list:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    if isinstance(result, (list, tuple)) or hasattr(result, "__len__") and \
            not isinstance(result, np.ndarray):
        return [r.numpy() if hasattr(r, "numpy") else np.asarray(r) for r in result]
    return [np.asarray(result)]


def run_kiln(case, executor: str = "interpreter") -> Outcome:
    """Convert the case's model with ``from_onnx`` (input shapes pinned from the data) and run
    it on kiln: ``"vm"`` (the compiled path for control-flow models: ``relay.vm.compile`` at
    opt_level 3 for llvm + the VM), ``"interpreter"`` (the reference interpreter) or
    ``"graph"`` (relay.build + graph executor)."""
    from kiln.relay.frontend import from_onnx

    inputs, expected = case_data(case)
    formal = _graph_inputs(case)
    if any(not isinstance(x, np.ndarray) for x in inputs):
        return Outcome("error", "a non-tensor input (sequence/optional)")
    try:
        shape = {f.name: x.shape for f, x in zip(formal, inputs)}
        mod, params = from_onnx(case.model, shape=shape)
        if executor == "interpreter":
            from kiln import relay
            from kiln.relay.backend.interpreter import Interpreter

            # A-normal form: the interpreter then computes a value shared by several
            # consumers once instead of once per use.
            mod = relay.transform.ToANormalForm()(mod)
            with np.errstate(all="ignore"):
                actual = _as_list(Interpreter(mod).evaluate()(*inputs))
        elif executor == "vm":
            actual = _run_vm(mod, params, formal, inputs)
        else:
            actual = _run_graph(mod, params, formal, inputs)
    except Exception as exc:  # noqa: BLE001  (the measure records every failure)
        return Outcome("error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:800]}"
                       if str(exc) else type(exc).__name__)
    return compare(actual, list(expected), case.rtol, case.atol)


def _run_graph(mod, params, formal, inputs) -> list:
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    for f, x in zip(formal, inputs):
        module.set_input(f.name, x)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


def _run_vm(mod, params, formal, inputs) -> list:
    import kiln
    from kiln import relay
    from kiln.runtime.vm import VirtualMachine

    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    return _flatten(vm.invoke("main", *inputs))


def _flatten(value) -> list:
    """A VM result (tensor or nested tuple ADT) as a flat list of arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list = []
    for field in value:
        out.extend(_flatten(field))
    return out


def run_onnxruntime(case) -> Outcome:
    """Run the case on onnxruntime (CPU) and compare with the same rules."""
    import onnxruntime as ort

    inputs, expected = case_data(case)
    formal = _graph_inputs(case)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(case.model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        actual = session.run(None, {f.name: x for f, x in zip(formal, inputs)})
    except Exception as exc:  # noqa: BLE001
        return Outcome("error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:800]}")
    return compare(actual, list(expected), case.rtol, case.atol)


def summarize(outcomes: list) -> tuple[dict, Counter]:
    """Per-op-type status counts and totals from ``[(case, Outcome), ...]``."""
    per_op: dict = defaultdict(Counter)
    totals: Counter = Counter()
    for case, outcome in outcomes:
        per_op[op_type_of(case)][outcome.status] += 1
        totals[outcome.status] += 1
    return dict(per_op), totals
