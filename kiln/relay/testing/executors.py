"""Run one Relay program on every executor and check that they agree (differential testing).

Entry points: :func:`run_on_executors` (every configuration's outputs) and
:func:`check_executors_agree` (each configuration against the reference interpreter).

A *configuration* is an executor (``"graph"`` or ``"vm"``), an ``opt_level`` and a binding:
``"inputs"`` passes every parameter of ``main`` at run time, ``"constants"`` binds the
chosen parameters as constants through ``params=`` (how models bind their weights), which
lets FoldConstant, SimplifyInference and the fusion of constants take part. The reference is
the Relay interpreter on the unoptimized program. Outputs are flattened to a list of NumPy
arrays (a tuple result gives one array per field, in order), so every executor compares the
same way.

Example
-------
>>> import numpy as np
>>> from kiln import relay
>>> import kiln
>>> x = relay.var("x", shape=(2,))
>>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(x)))
>>> [out] = check_executors_agree(mod, [np.zeros(2, "float32")],
...                               configs=[ExecutorConfig("vm", 0, "inputs")])
>>> out
array([1., 1.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["OPT_LEVELS", "BINDINGS", "EXECUTORS", "ExecutorConfig", "all_configs",
           "run_on_executors", "run_interpreter", "check_executors_agree"]

OPT_LEVELS = (0, 1, 2, 3)
BINDINGS = ("inputs", "constants")
EXECUTORS = ("graph", "vm")


@dataclass(frozen=True)
class ExecutorConfig:
    """One way of running a program: executor, opt_level and how parameters are bound."""

    executor: str
    opt_level: int
    binding: str

    def __str__(self) -> str:
        return f"{self.executor} at opt_level {self.opt_level}, parameters as {self.binding}"


def _flatten(value: Any) -> list[np.ndarray]:
    """Any executor's result as a flat list of arrays (tuples and ADTs field by field)."""
    from kiln.runtime.ndarray import NDArray

    if isinstance(value, NDArray):
        return [value.numpy()]
    if isinstance(value, np.ndarray | np.generic):
        return [np.asarray(value)]
    fields = getattr(value, "fields", value)
    if isinstance(fields, Iterable) and not isinstance(fields, str | bytes):
        return [a for f in fields for a in _flatten(f)]
    raise TVMError(f"cannot compare an executor result of type {type(value).__name__}")


def _values_by_name(mod: Any, args: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """``args`` by the names of main's parameters, which must be distinct (for ``params=``)."""
    names = [p.name_hint for p in mod["main"].params]
    if len(set(names)) != len(names):
        raise TVMError(f"the parameters of main must have distinct names to be bound by name, "
                       f"got {names}")
    if len(args) != len(names):
        raise TVMError(f"main takes {len(names)} parameters {names}, got {len(args)} values")
    return dict(zip(names, (np.asarray(a) for a in args)))


def _check_configs(configs: Sequence[ExecutorConfig]) -> None:
    for config in configs:
        if config.executor not in _RUNNERS or config.binding not in BINDINGS:
            raise TVMError(f"unknown configuration {config!r}: executors are "
                           f"{sorted(_RUNNERS)}, bindings {BINDINGS}")


def run_interpreter(mod: Any, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The reference: the Relay interpreter on ``mod`` as given, every parameter an input."""
    from kiln.relay.backend.interpreter import Interpreter

    return _flatten(Interpreter(mod).evaluate()(*args))


def _run_graph(mod: Any, inputs: dict[str, np.ndarray], params: dict[str, np.ndarray],
               target: str) -> list[np.ndarray]:
    import kiln
    from kiln.contrib import graph_executor
    from kiln.relay.build_module import build

    lib = build(mod, target=target, params=params or None)
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    module.set_input(**inputs)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


def _run_vm(mod: Any, inputs: dict[str, np.ndarray], params: dict[str, np.ndarray],
            target: str) -> list[np.ndarray]:
    import kiln
    from kiln.relay.vm.compiler import compile as vm_compile
    from kiln.runtime.vm import VirtualMachine

    vm = VirtualMachine(vm_compile(mod, target=target, params=params or None), kiln.cpu(0))
    first = _flatten(vm.invoke("main", **inputs))
    # A second run takes the VM's fast paths (a direct function reuses its result's block).
    second = _flatten(vm.invoke("main", **inputs))
    if any(a.tobytes() != b.tobytes() for a, b in zip(first, second)):  # NaN bits too
        raise TVMError("the VM gave a different result on a second run with the same inputs")
    return first


_RUNNERS = {"graph": _run_graph, "vm": _run_vm}


def all_configs(executors: Sequence[str] = EXECUTORS, opt_levels: Sequence[int] = OPT_LEVELS,
                bindings: Sequence[str] = BINDINGS) -> list[ExecutorConfig]:
    """Every combination of ``bindings`` x ``opt_levels`` x ``executors``."""
    return [ExecutorConfig(e, o, b) for b in bindings for o in opt_levels for e in executors]


def run_on_executors(mod: Any, args: Sequence[np.ndarray], *,
                     configs: Sequence[ExecutorConfig] | None = None,
                     bind: Sequence[str] | None = None,
                     target: str = "llvm") -> dict[ExecutorConfig, list[np.ndarray]]:
    """Every configuration's flattened outputs of ``main`` on ``args`` (in parameter order).

    ``configs`` defaults to :func:`all_configs` (16: graph and VM, opt_level 0-3, both
    bindings); ``bind`` names the parameters the ``"constants"`` binding binds (default all).
    """
    import kiln

    values = _values_by_name(mod, args)
    bound = set(values if bind is None else bind)
    configs = all_configs() if configs is None else configs
    _check_configs(configs)
    results = {}
    for config in configs:
        constants = config.binding == "constants"
        params = {k: v for k, v in values.items() if constants and k in bound}
        inputs = {k: v for k, v in values.items() if k not in params}
        with kiln.transform.PassContext(opt_level=config.opt_level):
            results[config] = _RUNNERS[config.executor](mod, inputs, params, target)
    return results


def _assert_close(got: list[np.ndarray], want: list[np.ndarray], what: str, rtol: float,
                  atol: float) -> None:
    # AssertionError raised explicitly: a test helper must check under python -O too
    if len(got) != len(want):
        raise AssertionError(f"{what}: {len(got)} outputs, the reference has {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise AssertionError(f"{what}: output {i} is {g.dtype}{list(g.shape)}, the "
                                 f"reference {w.dtype}{list(w.shape)}")
        # A half-precision result may differ by a rounding step: a fused kernel rounds once
        # where the reference rounds after each op (or sums in a different order).
        low = np.finfo(g.dtype).eps if g.dtype.kind == "f" and g.dtype.itemsize < 4 else 0.0
        np.testing.assert_allclose(g, w, rtol=max(rtol, 2 * low), atol=max(atol, low),
                                   err_msg=f"{what}: output {i} differs from the reference")


def check_executors_agree(mod: Any, args: Sequence[np.ndarray], *, rtol: float = 1e-5,
                          atol: float = 1e-5, **options: Any) -> list[np.ndarray]:
    """Run ``mod`` on every configuration (keywords as :func:`run_on_executors`) and assert
    that each matches the interpreter: same number of outputs, shapes, dtypes and values
    within ``rtol``/``atol``. Returns the interpreter's outputs, for the caller's own oracle.
    """
    _values_by_name(mod, args)  # bad requests fail before anything runs
    _check_configs(options.get("configs") or ())
    want = run_interpreter(mod, args)
    for config, got in run_on_executors(mod, args, **options).items():
        _assert_close(got, want, str(config), rtol, atol)
    return want
