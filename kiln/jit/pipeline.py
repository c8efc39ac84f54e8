"""The compile pipeline as an inspectable object, and the ``myia`` decorator built on it.

``standard_pipeline`` runs Myia's steps in order::

    parse -> resolve -> infer -> specialize -> opt -> cconv -> validate -> wrap_primitives
          -> compile (SplitGraph, CompileGraph, OptimizeInstrs) -> link -> export -> wrap

Each step is a function that takes, by keyword name, the results it needs from a dict that
accumulates them (``graph``, ``argspec``, ``uinstrs`` …) plus its own options, and returns the
results it adds. A :class:`Pipeline` can list its steps, be cut (``pipeline["parse":"infer"]``
runs up to and including ``infer``), be configured by dotted path
(``pipeline.configure({"compile.linear_impl": "debug"})``), and its run returns a
:class:`PipelineResult` whose ``show(step)`` prints what that step produced.

Entry points: :data:`standard_pipeline`, :class:`Pipeline`, :func:`myia`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.jit import compile as C
from kiln.jit.abstract import Array, Func, Scalar, Tuple, abstract_of
from kiln.jit.errors import JitError
from kiln.jit.infer import infer as run_infer
from kiln.jit.infer import specialize as run_specialize
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Parameter, print_graph
from kiln.jit.primitives import Primitive
from kiln.jit.pybackend import compile_python
from kiln.jit.resolve import parsed
from kiln.jit.segments import convert_segment
from kiln.jit.vm import FinalVM, disassemble

# -- steps ---------------------------------------------------------------------------------------

def step_parse(input: Callable) -> dict:
    """Python function -> graph (parsed once per function; globals resolved on demand)."""
    graph = input if isinstance(input, Graph) else None
    if graph is None:
        hook = getattr(input, "__kiln_jit__", None)
        graph = hook() if hook is not None else parsed(input)
    return {"graph": graph}


def step_resolve(graph: Graph) -> dict:
    """Check that every global, attribute and grad(...) was resolved."""
    from kiln.jit.parser import GETATTR, GlobalRef
    mng = GraphManager(graph)
    for g in mng.graphs:
        for n in mng.nodes(g):
            for i in n.inputs:
                if isinstance(i, Constant) and (isinstance(i.value, GlobalRef)
                                                or i.value is GETATTR):
                    raise JitError(f"unresolved {i.value!r}", n.loc)
    return {"graph": graph}


def step_infer(graph: Graph, argspec: tuple) -> dict:
    """Infer every node's type for this argument signature."""
    inferrer, context = run_infer(graph, argspec)
    return {"inferrer": inferrer, "context": context, "outspec": context.result}


def step_specialize(inferrer, context) -> dict:
    """One monomorphic, typed clone per inference context."""
    return {"graph": run_specialize(inferrer, context)}


def step_opt(graph: Graph, passes: tuple = ("inline", "fold", "cse")) -> dict:
    """Inline non-recursive calls, fold tuples/environments, merge repeated primitive
    applications (see kiln.jit.opt)."""
    from kiln.jit.opt import optimize
    return {"graph": optimize(graph, passes)}


def step_cconv(graph: Graph) -> dict:
    """Closure conversion: free variables become leading parameters."""
    return {"graph": C.closure_convert(graph)}


def step_validate(graph: Graph) -> dict:
    """No free variables left, every node typed, no unsupported value reaching the backend."""
    mng = GraphManager(graph)
    for g in mng.graphs:
        for n in mng.nodes(g):
            if isinstance(n, (Apply, Parameter)) and n.graph is not g:
                raise JitError(f"internal: free variable {n} left in {g} after cconv")
            if isinstance(n, Apply) and n.abstract is None:
                raise JitError(f"internal: untyped node {n} in {g}", n.loc)
    return {"graph": graph}


def step_wrap_primitives(graph: Graph) -> dict:
    """Primitives in value positions were wrapped into graphs by resolve; check none is left
    except the elementwise function operand of array_map/array_reduce (an attribute)."""
    from kiln.jit import structural as S
    mng = GraphManager(graph)
    for g in mng.graphs:
        for n in mng.nodes(g):
            if not isinstance(n, Apply):
                continue
            for k, i in enumerate(n.inputs[1:], 1):
                if isinstance(i, Constant) and isinstance(i.value, Primitive) and not (
                        n.inputs[0].value in (S.array_map, S.array_reduce) and k == 1):
                    raise JitError(f"primitive {i.value.name} used as a value", n.loc)
    return {"graph": graph}


def step_compile(graph: Graph, linear_impl: str = "relay", target: str = "llvm",
                 optimize: bool = True, backend: str = "auto") -> dict:
    """SplitGraph + CompileGraph + OptimizeInstrs over every graph, the root first.

    ``backend``: "finalvm"; "python" (scalar-only programs as one generated Python
    function, see kiln.jit.pybackend); "vm" (the whole program as one Relay module on the
    Relay VM, see kiln.jit.relay_backend); "auto" picks "python" when the program has no
    arrays and FinalVM otherwise.
    """
    if backend not in ("auto", "finalvm", "python", "vm"):
        raise JitError(f"unknown backend {backend!r} (use 'auto', 'finalvm', 'python' or "
                       "'vm')")
    if backend == "vm":
        from kiln.jit.relay_backend import compile_relay_vm
        program = compile_relay_vm(graph, [p.abstract for p in graph.parameters], target)
        return {"mapping": {}, "uinstrs": [], "pyprogram": program, "backend": "vm"}
    program = None
    if backend in ("auto", "python") and linear_impl == "relay":
        program = compile_python(graph)
        if program is None and backend == "python":
            raise JitError("backend='python' needs a program on Python scalars only (no "
                           "arrays, grad environments or calls through function values)")
    convert = functools.partial(convert_segment, linear_impl=linear_impl, target=target)
    mapping, uinstrs = C.compile_graphs(graph, convert, optimize)
    return {"mapping": mapping, "uinstrs": uinstrs, "pyprogram": program,
            "backend": "python" if program is not None else "finalvm"}


def step_link(mapping: dict, uinstrs: list) -> dict:
    """Graph constants become code addresses."""
    return {"instrs": C.link(mapping, uinstrs)}


def step_export(instrs: list, pyprogram=None) -> dict:
    """The FinalVM that runs the program (or the generated Python program, if chosen)."""
    return {"output": pyprogram if pyprogram is not None else FinalVM(instrs)}


def step_wrap(output, outspec) -> dict:
    """A callable taking user values and returning NumPy/Python values."""
    vm = output

    def run(*args):
        return from_vm(vm.run(args), outspec)

    run.vm = vm
    return {"output": run}


def from_vm(value: Any, spec) -> Any:
    """A VM result as the user expects it (0-d arrays as NumPy scalars, tuples kept)."""
    if isinstance(spec, Tuple):
        return tuple(from_vm(v, s) for v, s in zip(value, spec.elements))
    if isinstance(spec, Array):
        arr = np.asarray(value, dtype=spec.dtype)
        return arr[()] if arr.ndim == 0 else arr
    if isinstance(spec, Scalar) and spec.dtype in ("int64", "float64", "bool"):
        return {"int64": int, "float64": float, "bool": bool}[spec.dtype](value)
    if isinstance(spec, Func):
        raise JitError("a kiln.jit function cannot return a function")
    return value


STEPS: dict[str, Callable] = {
    "parse": step_parse, "resolve": step_resolve, "infer": step_infer,
    "specialize": step_specialize, "opt": step_opt, "cconv": step_cconv,
    "validate": step_validate, "wrap_primitives": step_wrap_primitives,
    "compile": step_compile, "link": step_link, "export": step_export, "wrap": step_wrap,
}


class PipelineResult:
    """What each step of one run produced; ``show(step)`` prints it readably."""

    def __init__(self):
        self.by_step: dict[str, dict] = {}
        self.values: dict[str, Any] = {}
        self.texts: dict[str, str] = {}  # graph listings taken right after each step

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def show(self, step: str) -> str:
        """The graph IR after a graph step, or the instruction listing after compile/link."""
        out = self.by_step[step]
        if step in self.texts:
            return self.texts[step]
        if "graph" in out:  # no snapshot: later steps (opt, cconv) may have edited it since
            return print_graph(out["graph"])
        if step == "compile" and out.get("pyprogram") is not None:
            return out["pyprogram"].source  # the generated Python, or the Relay module
        if "instrs" in out or "uinstrs" in out:
            code = out.get("instrs") or out.get("uinstrs")
            return disassemble(code, self.values.get("mapping"))
        if "outspec" in out:
            return f"{self.values['argspec']} -> {out['outspec']}"
        return repr(out)


class Pipeline:
    """An ordered list of named steps with per-step options."""

    def __init__(self, steps: list[str], config: dict[str, dict] | None = None):
        unknown = [s for s in steps if s not in STEPS]
        if unknown:
            raise JitError(f"unknown pipeline steps {unknown}; known: {list(STEPS)}")
        self.steps = list(steps)
        self.config = {k: dict(v) for k, v in (config or {}).items()}

    def __repr__(self) -> str:
        return "Pipeline(" + " -> ".join(self.steps) + ")"

    def __getitem__(self, sl: slice) -> Pipeline:
        if not isinstance(sl, slice):
            raise TypeError("cut a pipeline with step names: pipeline['parse':'infer']")
        start = self.steps.index(sl.start) if sl.start is not None else 0
        stop = self.steps.index(sl.stop) + 1 if sl.stop is not None else len(self.steps)
        return Pipeline(self.steps[start:stop], self.config)

    def configure(self, options: dict[str, Any]) -> Pipeline:
        """A copy with ``{"step.option": value}`` set."""
        config = {k: dict(v) for k, v in self.config.items()}
        for path, value in options.items():
            step, _, opt = path.partition(".")
            if step not in self.steps or not opt:
                raise JitError(f"cannot configure {path!r}: steps are {self.steps}")
            params = inspect.signature(STEPS[step]).parameters
            if opt not in params:
                raise JitError(f"step {step!r} has no option {opt!r} (options: "
                               f"{[p for p in params]})")
            config.setdefault(step, {})[opt] = value
        return Pipeline(self.steps, config)

    def run(self, snapshots: bool = True, **inputs: Any) -> PipelineResult:
        """Run the steps on ``inputs`` (``input`` = the function, ``argspec`` = types).

        With ``snapshots``, the graph listing after each graph step is kept for
        :meth:`PipelineResult.show` (opt and cconv edit graphs in place).
        """
        result = PipelineResult()
        values = dict(inputs)
        for name in self.steps:
            fn = STEPS[name]
            params = inspect.signature(fn).parameters
            opts = self.config.get(name, {})
            kwargs = {k: values[k] for k in params if k in values and k not in opts}
            kwargs.update(opts)
            out = fn(**kwargs)
            result.by_step[name] = out
            if snapshots and "graph" in out:
                result.texts[name] = print_graph(out["graph"])
            values.update(out)
        result.values = values
        return result


standard_pipeline = Pipeline(list(STEPS))


class MyiaFunction:
    """A Python function compiled by kiln.jit: one compiled version per argument signature."""

    def __init__(self, fn: Callable, pipeline: Pipeline = standard_pipeline):
        functools.update_wrapper(self, fn, updated=())
        self.fn = fn
        self.pipeline = pipeline
        self.cache: dict[tuple, Callable] = {}
        self.results: dict[tuple, PipelineResult] = {}

    def __kiln_jit__(self) -> Graph:
        hook = getattr(self.fn, "__kiln_jit__", None)
        return hook() if hook is not None else parsed(self.fn)

    def signature(self, *args: Any) -> tuple:
        """The abstract argument signature ``args`` compile under."""
        return tuple(abstract_of(a, f"argument {i} of {self.__name__}")
                     for i, a in enumerate(args))

    def compile(self, *args: Any) -> PipelineResult:
        """Run the pipeline for ``args``' signature (cached) and return its results."""
        sig = self.signature(*args)
        if sig not in self.results:
            res = self.pipeline.run(input=self.fn, argspec=sig, snapshots=False)
            self.results[sig] = res
            self.cache[sig] = res.values.get("output")
        return self.results[sig]

    def inspect(self, *args: Any) -> PipelineResult:
        """A fresh pipeline run for ``args`` keeping every step's listing (``show(step)``)."""
        return self.pipeline.run(input=self.fn, argspec=self.signature(*args))

    def backend(self, *args: Any) -> str:
        """Which backend runs this signature ("python" or "finalvm")."""
        return self.compile(*args).values["backend"]

    def __call__(self, *args: Any) -> Any:
        sig = self.signature(*args)
        fn = self.cache.get(sig)
        if fn is None:
            self.compile(*args)
            fn = self.cache[sig]
        return fn(*args)


def myia(fn: Callable | None = None, *, pipeline: Pipeline = standard_pipeline,
         linear_impl: str | None = None, backend: str | None = None) -> Any:
    """Compile ``fn`` with kiln.jit (usable as ``@myia`` or ``@myia(linear_impl="debug")``).

    Example
    -------
    >>> @myia
    ... def f(x, y):
    ...     return x * y + 1.0
    >>> f(2.0, 3.0)
    7.0
    """
    if linear_impl is not None:
        pipeline = pipeline.configure({"compile.linear_impl": linear_impl})
    if backend is not None:
        pipeline = pipeline.configure({"compile.backend": backend})
    if fn is None:
        return lambda f: MyiaFunction(f, pipeline)
    return MyiaFunction(fn, pipeline)
