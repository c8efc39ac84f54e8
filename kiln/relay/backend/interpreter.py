"""The reference interpreter: Relay's semantics over NumPy, the oracle every executor is tested
against (``relay.create_executor("debug", ...)``).

Entry points: :class:`Interpreter` (``.evaluate(expr)`` returns a callable), :func:`evaluate`
(evaluate a closed expression), :func:`evaluate_constant` (FoldConstant's helper), and the
value classes :class:`ConstructorValue`, :class:`RefValue`, :class:`Closure`.

It is a tree-walking evaluator with one method per node kind (CPython ``ast`` style): an
environment maps variables to values; operator calls run the ``"FNumpyEval"`` attribute of the
op, registered beside it by its family module (see
:func:`~kiln.relay.backend.numpy_ops.numpy_eval`). Values are NumPy arrays inside; results are
returned as :class:`~kiln.runtime.ndarray.NDArray` (tensors),
:class:`~kiln.runtime.container.ADT` (tuples), or the value classes below.

A ``let`` chain, and a self tail call in a global function, are evaluated in a loop rather
than by recursion, so long let-lists and deep tail-recursive loops don't exhaust the stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.relay import adt
from kiln.relay import expr as rx
from kiln.relay.backend import numpy_ops
from kiln.relay.base import deep_recursion
from kiln.runtime.error import TVMError

__all__ = ["Interpreter", "evaluate", "evaluate_constant", "ConstructorValue", "RefValue",
           "Closure", "to_python_value", "from_python_value"]


@dataclass(eq=False)
class ConstructorValue:
    """An ADT value: constructor tag, fields and the constructor itself."""

    tag: int
    fields: list
    constructor: Constructor | None = None

    def __repr__(self) -> str:
        name = self.constructor.name_hint if self.constructor is not None else f"tag{self.tag}"
        return f"{name}({', '.join(map(repr, self.fields))})" if self.fields else name


@dataclass(eq=False)
class RefValue:
    """A mutable reference cell."""

    value: Any


@dataclass(eq=False)
class Closure:
    """A function value: the function and the environment it captured."""

    func: rx.Function
    env: dict = field(default_factory=dict)
    name: GlobalVar | None = None  # set for global functions (enables the tail-call loop)


class _Env(dict):
    """Variable bindings plus the memo of one function invocation: a node shared by several
    consumers (graph form) is evaluated once per invocation, not once per use."""

    __slots__ = ("memo",)

    def __init__(self, bindings: Any = (), memo: dict | None = None) -> None:
        super().__init__(bindings)
        self.memo = {} if memo is None else memo

    def extend(self, bindings: dict) -> _Env:
        """These bindings added, in the same invocation (same memo)."""
        return _Env({**self, **bindings}, self.memo)


# node kinds whose value is memoized within an invocation (pure, possibly shared)
_MEMOIZED = (rx.Call, rx.Tuple, rx.TupleGetItem)


class _TailCall(Exception):
    """Raised to restart the current global function with new arguments (self tail call)."""

    def __init__(self, args: list) -> None:
        self.args_ = args


def _typed_ops_loaded() -> None:
    import kiln.relay.op  # noqa: F401  (every op module registers itself)


class Interpreter:
    """Evaluates Relay expressions in ``mod`` (``create_executor("debug", mod, dev)``).

    Example
    -------
    >>> import numpy as np
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> f = Interpreter().evaluate(relay.Function([x], relay.add(x, x)))
    >>> f(np.array([1.0, 2.0], "float32")).numpy()
    array([2., 4.], dtype=float32)
    """

    def __init__(self, mod: IRModule | None = None, device: Any = None, target: Any = None):
        _typed_ops_loaded()
        self.mod = mod if mod is not None else IRModule()
        self.device = device
        self.target = target
        self._typed = False
        self._globals: dict[str, Closure] = {}

    # -- public API -------------------------------------------------------------------------
    def evaluate(self, expr: Any = None, binds: dict | None = None):
        """A Python callable running ``expr`` (default ``mod["main"]``), or its value."""
        if expr is None:
            expr = self.mod.get_global_var("main")
        if binds:
            expr = rx.bind(expr, binds)
        self._ensure_typed(expr)
        value = self._eval_top(expr)
        if isinstance(value, Closure):
            return lambda *args, **kwargs: self._call_from_python(value, args, kwargs)
        return to_python_value(value)

    # -- typing -----------------------------------------------------------------------------
    def _ensure_typed(self, expr: Any) -> None:
        from kiln.relay.type_infer import infer_expr, infer_module

        if not self._typed:
            self.mod = infer_module(self.mod)
            self._globals = {}
            self._typed = True
        if not isinstance(expr, GlobalVar):
            infer_expr(expr, self.mod)

    def _eval_top(self, expr: Any) -> Any:
        with deep_recursion():
            return self.eval(expr, _Env())

    def _call_from_python(self, closure: Closure, args: tuple, kwargs: dict) -> Any:
        params = closure.func.params
        if kwargs:
            names = [p.name_hint for p in params]
            full = list(args) + [None] * (len(params) - len(args))
            for key, value in kwargs.items():
                if key not in names:
                    raise TVMError(f"unknown argument {key!r}; the function takes {names}")
                full[names.index(key)] = value
            args = tuple(full)
        if len(args) != len(params):
            raise TVMError(f"the function takes {len(params)} arguments, got {len(args)}")
        values = []
        for param, arg in zip(params, args):
            value = from_python_value(arg)
            _check_arg(param, value)
            values.append(value)
        with deep_recursion():
            return to_python_value(self.apply(closure, values))

    # -- evaluation -------------------------------------------------------------------------
    def eval(self, node: Any, env: dict) -> Any:
        while isinstance(node, rx.Let):  # let chains loop instead of recursing
            env = self._bind_let(node, env)
            node = node.body
        memoized = isinstance(node, _MEMOIZED)
        if memoized and id(node) in env.memo:
            return env.memo[id(node)]
        method = getattr(self, "eval_" + type(node).__name__, None)
        if method is None:
            raise TVMError(f"the interpreter cannot evaluate {type(node).__name__}")
        value = method(node, env)
        if memoized:
            env.memo[id(node)] = value
        return value

    def _bind_let(self, node: rx.Let, env: dict) -> dict:
        """``env`` extended by the let's binding; a function value sees itself (let-rec)."""
        if isinstance(node.value, rx.Function):
            closure = Closure(node.value, {})
            env = env.extend({node.var: closure})
            closure.env = env
            return env
        return env.extend({node.var: self.eval(node.value, env)})

    def eval_Var(self, node: rx.Var, env: dict) -> Any:
        try:
            return env[node]
        except KeyError:
            raise TVMError(f"free variable %{node.name_hint} has no value; bind it or pass it "
                           "as a function parameter") from None

    def eval_GlobalVar(self, node: GlobalVar, env: dict) -> Any:
        closure = self._globals.get(node.name_hint)
        if closure is None:
            func = self.mod[node]
            if not isinstance(func, rx.Function):
                raise TVMError(f"@{node.name_hint} is not a Relay function")
            closure = self._globals[node.name_hint] = Closure(func, {}, node)
        return closure

    def eval_Constant(self, node: rx.Constant, env: dict) -> Any:
        return node.data.numpy()

    def eval_Tuple(self, node: rx.Tuple, env: dict) -> tuple:
        return tuple(self.eval(f, env) for f in node.fields)

    def eval_TupleGetItem(self, node: rx.TupleGetItem, env: dict) -> Any:
        value = self.eval(node.tuple_value, env)
        if isinstance(value, ConstructorValue):
            return value.fields[node.index]
        return value[node.index]

    def eval_Function(self, node: rx.Function, env: dict) -> Closure:
        return Closure(node, env)

    def eval_Op(self, node: Op, env: dict) -> Any:
        raise TVMError(f"operator {node.name} used as a value; wrap it in a function")

    def eval_Constructor(self, node: Constructor, env: dict) -> Any:
        if not node.inputs:
            return ConstructorValue(node.tag, [], node)
        return node  # applied in eval_Call

    def eval_If(self, node: rx.If, env: dict) -> Any:
        cond = self.eval(node.cond, env)
        return self.eval(node.true_branch if bool(np.asarray(cond).item()) else
                         node.false_branch, env)

    def eval_RefCreate(self, node: rx.RefCreate, env: dict) -> RefValue:
        return RefValue(self.eval(node.value, env))

    def eval_RefRead(self, node: rx.RefRead, env: dict) -> Any:
        return self.eval(node.ref, env).value

    def eval_RefWrite(self, node: rx.RefWrite, env: dict) -> tuple:
        ref = self.eval(node.ref, env)
        ref.value = self.eval(node.value, env)
        return ()

    def eval_Match(self, node: adt.Match, env: dict) -> Any:
        data = self.eval(node.data, env)
        for clause in node.clauses:
            bindings: dict = {}
            if _match(clause.lhs, data, bindings):
                return self.eval(clause.rhs, env.extend(bindings))
        raise TVMError("match failed: no clause matches the value "
                       f"{data!r} (an incomplete match?)")

    def eval_Call(self, node: rx.Call, env: dict) -> Any:
        callee = node.op
        if isinstance(callee, Op):
            args = [self.eval(a, env) for a in node.args]
            out_type = getattr(node, "checked_type_", None)
            try:
                return numpy_ops.numpy_eval(callee, node.attrs, args, out_type)
            except TVMError:
                raise
            except Exception as err:  # a NumPy error: name the op and the shapes
                shapes = [getattr(a, "shape", type(a).__name__) for a in args]
                raise TVMError(f"{callee.name} failed on arguments of shapes {shapes}: "
                               f"{err}") from err
        if isinstance(callee, Constructor):
            return ConstructorValue(callee.tag, [self.eval(a, env) for a in node.args], callee)
        func = self.eval(callee, env)
        args = [self.eval(a, env) for a in node.args]
        if isinstance(func, Constructor):
            return ConstructorValue(func.tag, args, func)
        if not isinstance(func, Closure):
            raise TVMError(f"cannot call a value of kind {type(func).__name__}")
        return self.apply(func, args)

    def apply(self, closure: Closure, args: list) -> Any:
        """Call a closure; a global function's self tail calls loop here."""
        while True:
            params = closure.func.params
            if len(args) != len(params):
                raise TVMError(f"function expects {len(params)} arguments, got {len(args)}")
            env = _Env({**closure.env, **dict(zip(params, args))})  # a new invocation
            body = closure.func.body
            if closure.name is None:
                return self.eval(body, env)
            try:
                return self._eval_tail(body, env, closure.name)
            except _TailCall as tail:
                args = tail.args_

    def _eval_tail(self, node: Any, env: dict, self_name: GlobalVar) -> Any:
        """Evaluate ``node`` in tail position of global ``self_name``."""
        while True:
            while isinstance(node, rx.Let):
                env = self._bind_let(node, env)
                node = node.body
            if isinstance(node, rx.If):
                cond = self.eval(node.cond, env)
                node = node.true_branch if bool(np.asarray(cond).item()) else node.false_branch
                continue
            if isinstance(node, adt.Match):
                data = self.eval(node.data, env)
                for clause in node.clauses:
                    bindings: dict = {}
                    if _match(clause.lhs, data, bindings):
                        env, node = env.extend(bindings), clause.rhs
                        break
                else:
                    raise TVMError(f"match failed: no clause matches the value {data!r}")
                continue
            if isinstance(node, rx.Call) and isinstance(node.op, GlobalVar) \
                    and node.op.name_hint == self_name.name_hint:
                raise _TailCall([self.eval(a, env) for a in node.args])
            return self.eval(node, env)


def _match(pattern: Any, value: Any, bindings: dict) -> bool:
    if isinstance(pattern, adt.PatternWildcard):
        return True
    if isinstance(pattern, adt.PatternVar):
        bindings[pattern.var] = value
        return True
    if isinstance(pattern, adt.PatternConstructor):
        if not isinstance(value, ConstructorValue) or value.tag != pattern.constructor.tag:
            return False
        return all(_match(p, v, bindings) for p, v in zip(pattern.patterns, value.fields))
    if isinstance(pattern, adt.PatternTuple):
        return all(_match(p, v, bindings) for p, v in zip(pattern.patterns, value))
    raise TVMError(f"unknown pattern kind {type(pattern).__name__}")


def _check_arg(param: rx.Var, value: Any) -> None:
    """Check a Python-supplied argument against the parameter's tensor type."""
    ty = param.type_annotation
    if ty is None or not hasattr(ty, "shape") or not isinstance(value, np.ndarray):
        return
    if len(ty.shape) != value.ndim or any(
            hasattr(d, "value") and d.value != n for d, n in zip(ty.shape, value.shape)):
        raise TVMError(f"argument %{param.name_hint}: expected shape "
                       f"{tuple(getattr(d, 'value', '?') for d in ty.shape)}, got {value.shape}")
    if str(ty.dtype) != str(value.dtype) and not (
            str(ty.dtype) == "bfloat16" and value.dtype.kind in "uV"):
        raise TVMError(f"argument %{param.name_hint}: expected dtype {ty.dtype}, "
                       f"got {value.dtype}")


def from_python_value(value: Any) -> Any:
    """NDArray / NumPy / Python scalars / lists → the interpreter's value form."""
    from kiln.runtime.container import ADT
    from kiln.runtime.ndarray import NDArray

    if isinstance(value, NDArray):
        return value.numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, ADT):
        fields = [from_python_value(v) for v in value]
        # tag 0 is a tuple; a constructor's tag (e.g. the VM's Option values) matches by tag
        return tuple(fields) if value.tag == 0 else ConstructorValue(value.tag, fields)
    if isinstance(value, tuple | list):
        return tuple(from_python_value(v) for v in value)
    if isinstance(value, bool):
        return np.array(value)
    if isinstance(value, int):
        return np.array(value, dtype="int32")
    if isinstance(value, float):
        return np.array(value, dtype="float32")
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def to_python_value(value: Any) -> Any:
    """The interpreter's values → NDArray (tensors) / ADT (tuples) / value objects."""
    from kiln.runtime.container import tuple_object
    from kiln.runtime.ndarray import array

    if isinstance(value, np.ndarray):
        return array(value if value.flags.c_contiguous else value.copy())  # keeps 0-d
    if isinstance(value, np.generic):  # a scalar NumPy made of a 0-d result
        return array(np.asarray(value))
    if isinstance(value, tuple):
        return tuple_object([to_python_value(v) for v in value])
    if isinstance(value, ConstructorValue):
        return ConstructorValue(value.tag, [to_python_value(v) for v in value.fields],
                                value.constructor)
    return value


def evaluate(expr: Any, mod: IRModule | None = None) -> Any:
    """The value of a closed expression (NDArray, ADT, closure or ADT value)."""
    return Interpreter(mod).evaluate(expr)


def evaluate_constant(expr: Any, mod: IRModule | None = None) -> Any:
    """FoldConstant's evaluator: the value of an expression without free variables."""
    return evaluate(expr, mod)
