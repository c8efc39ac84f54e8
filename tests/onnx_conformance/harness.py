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


def compare(actual: list, expected: list, rtol: float, atol: float,
            where: str = "output") -> Outcome:
    """Compare outputs as ONNX's backend tests do: dtype, shape, then values within tolerance
    (bfloat16 within at least two of its ulps, as ONNX's runner); a sequence compares element
    by element, an empty optional (None) only with None."""
    if len(actual) != len(expected):
        return Outcome("fail", f"{len(actual)} {where}s, expected {len(expected)}")
    for index, (got, want) in enumerate(zip(actual, expected)):
        if want is None or got is None:
            if want is not got:
                return Outcome("fail", f"{where} {index} is {'not ' * (want is None)}empty, "
                               f"expected {'no ' * (want is None)}value")
            continue
        if isinstance(want, list):
            if not isinstance(got, list):
                return Outcome("fail", f"{where} {index} is not a sequence")
            inner = compare(got, want, rtol, atol, f"{where} {index} element")
            if inner.status != "pass":
                return inner
            continue
        if not isinstance(want, np.ndarray):
            return Outcome("error", f"output {index} is a {type(want).__name__}, not a tensor")
        got = np.asarray(got)
        if got.dtype != want.dtype:
            return Outcome("fail", f"output {index} dtype {got.dtype}, expected {want.dtype}")
        if got.shape != want.shape:
            return Outcome("fail", f"output {index} shape {got.shape}, expected {want.shape}")
        case_rtol = rtol
        if _ml_float(want.dtype):  # bfloat16, float8_*: compare their values as float32
            if want.dtype.name == "bfloat16":  # ONNX's runner: two bfloat16 ulps at least
                case_rtol = max(rtol, 2.0 ** -6)
            got, want = got.astype(np.float32), want.astype(np.float32)
        if want.dtype.kind in "fc":
            close = np.isclose(got, want, rtol=case_rtol, atol=atol, equal_nan=True)
        else:
            close = got == want
        if not np.all(close):
            return Outcome("fail", f"{where} {index}: {int(np.sum(~close))} of {want.size} "
                           "values differ")
    return Outcome("pass")


def run_kiln(case, executor: str = "interpreter") -> Outcome:
    """Convert the case's model with ``from_onnx`` (input shapes pinned from the data) and run
    it on kiln: ``"vm"`` (the compiled path for control-flow models: ``relay.vm.compile`` at
    opt_level 3 for llvm + the VM), ``"interpreter"`` (the reference interpreter) or
    ``"graph"`` (relay.build + graph executor)."""
    from kiln.relay.frontend import from_onnx
    from kiln.relay.frontend.onnx_ops_sequence import to_vm_value

    inputs, expected = case_data(case)
    formal = _graph_inputs(case)
    if executor == "graph" and any(not isinstance(x, np.ndarray) for x in inputs):
        return Outcome("error", "a non-tensor input (sequence/optional): the graph executor "
                       "takes tensors only")
    try:
        shape = {f.name: _spec(x) for f, x in zip(formal, inputs)}
        mod, params = from_onnx(case.model, shape=shape)
        if executor == "interpreter":
            from kiln import relay
            from kiln.relay.backend.interpreter import Interpreter

            # A-normal form: the interpreter then computes a value shared by several
            # consumers once instead of once per use.
            mod = relay.transform.ToANormalForm()(mod)
            with np.errstate(all="ignore"):
                args = [to_vm_value(mod, f.type, x) for f, x in zip(formal, inputs)]
                actual = _outputs(mod, case, Interpreter(mod).evaluate()(*args))
        elif executor == "vm":
            actual = _run_vm(mod, params, case, formal, inputs)
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


def _spec(value):
    """The ``shape`` entry from_onnx takes for an input value: a tensor's shape, a list of
    them for a sequence, None for an empty optional."""
    if isinstance(value, list):
        return [_spec(v) for v in value]
    return None if value is None else value.shape


def _run_vm(mod, params, case, formal, inputs) -> list:
    import kiln
    from kiln import relay
    from kiln.relay.frontend.onnx_ops_sequence import to_vm_value
    from kiln.runtime.vm import VirtualMachine

    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    args = [to_vm_value(mod, f.type, x) for f, x in zip(formal, inputs)]
    return _outputs(mod, case, vm.invoke("main", *args))


def _outputs(mod, case, result) -> list:
    """A VM or interpreter result as one value per graph output: arrays, lists of arrays for
    sequences, None or the value for optionals."""
    from kiln.relay.frontend.onnx_ops_sequence import from_vm_value

    outputs = case.model.graph.output
    values = [result] if len(outputs) == 1 else list(result)
    return [from_vm_value(mod, out.type, v) for out, v in zip(outputs, values)]


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
