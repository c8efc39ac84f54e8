"""The whole-program backend (``backend="vm"``): the specialized program as one Relay module,
compiled by ``relay.vm.compile`` and run by the Relay VM, as Myia's later Relay backend did.

It runs on the closure-converted program: every graph becomes a global function (recursion
through its GlobalVar), ``partial(g, a…)`` becomes a Relay closure ``fn(x…) { g(a…, x…) }``,
``switch(c, f, g)(args)`` becomes ``if (c) { f(args) } else { g(args) }`` (calls in the
branches, so loops stay tail calls), tuples stay tuples, Python scalars are 0-d tensors.
Programs using grad's environments or ``assert`` are refused with a JitError (FinalVM runs them).

Entry point: :func:`compile_relay_vm`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import relay
from kiln.ir.module import IRModule
from kiln.jit import structural as S
from kiln.jit.abstract import Array, Env, Func, Scalar, Tuple
from kiln.jit.errors import JitError
from kiln.jit.ir import Apply, Constant, Graph, GraphManager, Node, Parameter, toposort
from kiln.jit.primitives import Primitive
from kiln.runtime.device import cpu
from kiln.runtime.vm import VirtualMachine


def relay_type(a) -> Any:
    """The Relay type of an abstract value (scalars are 0-d tensors)."""
    if isinstance(a, Array):
        return relay.TensorType(a.shape, a.dtype)
    if isinstance(a, Scalar) and a.dtype not in ("str", "index", "dtype"):
        return relay.TensorType((), a.dtype)
    if isinstance(a, Tuple):
        elems = [relay_type(e) for e in a.elements]
        return None if any(e is None for e in elems) else relay.TupleType(elems)
    if isinstance(a, Func):
        return None  # left to Relay's type inference
    raise JitError(f"backend='vm': values of type {a} have no Relay form")


class _Converter:
    def __init__(self, root: Graph):
        self.relay = relay
        self.mng = GraphManager(root)
        self.root = root
        self.globals: dict[Graph, Any] = {}
        self.vars: dict[Node, Any] = {}
        self.closures: dict[Graph, Any] = {}

    def gvar(self, g: Graph):
        if g not in self.globals:
            self.globals[g] = self.relay.GlobalVar("main" if g is self.root else
                                                   f"{g.name}_{g.id}")
        return self.globals[g]

    def function(self, g: Graph):
        relay = self.relay
        params = []
        for p in g.parameters:
            v = relay.var(f"{p.name or 'p'}{p.id}", type_annotation=relay_type(p.abstract))
            self.vars[p] = v
            params.append(v)
        body = self.body(g)
        return relay.Function(params, body, ret_type=relay_type(g.output.abstract))

    def body(self, g: Graph):
        relay = self.relay
        bindings = []
        for n in toposort(g, self.mng):
            if isinstance(n, Constant) and isinstance(n.value, Graph) \
                    and self.mng.parent(n.value) is not None and n.value not in self.closures:
                # a closure: a function literal bound where its captured values exist
                var = relay.var(f"{n.value.name}{n.value.id}")
                self.closures[n.value] = var
                bindings.append((var, None, n.value))
            elif isinstance(n, Apply) and n.graph is g and n is not g.output:
                var = relay.var(f"v{n.id}")
                bindings.append((var, n, None))
                self.vars[n] = var
        out = self.value(g.output) if not (isinstance(g.output, Apply) and
                                          g.output.graph is g) else self.expr(g.output)
        for var, node, closure in reversed(bindings):
            if closure is not None:
                out = relay.Let(var, self.function(closure), out)
            else:
                out = relay.Let(var, self.expr(node), out)
        return out

    def value(self, n: Node):
        relay = self.relay
        if isinstance(n, Constant):
            v = n.value
            if isinstance(v, Graph):
                return self.closures[v] if v in self.closures else self.gvar(v)
            a = n.abstract
            if isinstance(a, Tuple):
                return relay.Tuple([relay.const(np.asarray(x, dtype=e.dtype))
                                    for x, e in zip(v, a.elements)])
            if a is None or not hasattr(a, "dtype") or a.dtype in ("str", "index", "dtype"):
                return None  # an attribute operand, read from the abstract value
            return relay.const(np.asarray(v, dtype=a.dtype))
        return self.vars[n]

    def expr(self, n: Apply):
        relay = self.relay
        fn, *args = n.inputs
        if isinstance(fn, Constant) and isinstance(fn.value, Primitive):
            prim = fn.value
            vals = [self.value(a) for a in args]
            if prim is S.switch:
                return relay.If(vals[0], vals[1], vals[2])
            if prim is S.make_tuple:
                return relay.Tuple(vals)
            if prim is S.tuple_getitem:
                return relay.TupleGetItem(vals[0], int(args[1].value))
            if prim is S.partial:
                g = args[0].value
                rest = []
                for p in g.parameters[len(args) - 1:]:
                    rest.append(relay.var(f"a{p.id}", type_annotation=relay_type(p.abstract)))
                return relay.Function(rest, relay.Call(vals[0], vals[1:] + rest))
            if prim.relay is None or prim.vm is not None:
                raise JitError(f"backend='vm': primitive {prim.name} has no Relay form "
                               "(use the default backend)", n.loc)
            return prim.relay(vals, [a.abstract for a in args], n.abstract)
        if isinstance(fn, Apply) and isinstance(fn.inputs[0], Constant) \
                and fn.inputs[0].value is S.switch:
            # switch(c, f, g)(args): call inside the branches, so the VM gets tail calls
            c, a, b = fn.inputs[1:]
            vals = [self.value(x) for x in args]
            return relay.If(self.value(c), self.call(a, vals), self.call(b, vals))
        return self.call(fn, [self.value(a) for a in args])

    def call(self, fn: Node, vals: list):
        """A call; a call of ``partial(g, a…)`` calls ``g(a…, args…)`` directly."""
        relay = self.relay
        if isinstance(fn, Apply) and isinstance(fn.inputs[0], Constant) \
                and fn.inputs[0].value is S.partial:
            return relay.Call(self.value(fn.inputs[1]),
                              [self.value(a) for a in fn.inputs[2:]] + vals)
        return relay.Call(self.value(fn), vals)

    def module(self):
        mod = IRModule()
        todo = [self.root]
        done: set[Graph] = set()
        self.gvar(self.root)
        while todo:
            g = todo.pop()
            if g in done:
                continue
            done.add(g)
            mod[self.gvar(g)] = self.function(g)
            todo += [h for h in self.globals if h not in done]
        return mod


def _check(root: Graph) -> None:
    mng = GraphManager(root)
    for g in mng.graphs:
        for n in mng.nodes(g):
            a = n.abstract
            if isinstance(a, Env) or (isinstance(n, Constant) and isinstance(n.value, dict)):
                raise JitError("backend='vm': grad environments (gradients of closures) need "
                               "the default backend", getattr(n, "loc", None))
            if isinstance(n, Apply) and isinstance(n.inputs[0], Constant) \
                    and n.inputs[0].value is S.raise_:
                raise JitError("backend='vm': assert needs the default backend", n.loc)
            if isinstance(n, Parameter) and isinstance(a, Func):
                continue


class RelayVMProgram:
    """The compiled module on the Relay VM; calling it runs ``main``."""

    def __init__(self, mod, target: str, argspec):
        self.mod = mod
        self.source = mod.astext()  # before compiling: the VM compiler rewrites the module
        self.exe = relay.vm.compile(mod, target=target)
        self.vm = VirtualMachine(self.exe, cpu(0))
        self.argspec = argspec

    def run(self, args: tuple) -> Any:
        vals = [_to_relay(v, a) for v, a in zip(args, self.argspec)]
        return _from_relay(self.vm.run(*vals))

    def __call__(self, *args: Any) -> Any:
        return self.run(args)


def _to_relay(v, a):
    if isinstance(a, Tuple):
        return tuple(_to_relay(x, e) for x, e in zip(v, a.elements))
    return np.asarray(v, dtype=a.dtype)


def _from_relay(v):
    if hasattr(v, "numpy"):
        return v.numpy()
    if hasattr(v, "__len__") and not isinstance(v, np.ndarray):
        return tuple(_from_relay(x) for x in v)
    return v


def compile_relay_vm(root: Graph, argspec, target: str = "llvm") -> RelayVMProgram:
    """The program as one Relay module on the Relay VM."""
    _check(root)
    return RelayVMProgram(_Converter(root).module(), target, argspec)
