"""Device planning for heterogeneous execution (TVM's ``relay.transform.PlanDevices``).

Entry points: :func:`PlanDevices` (the pass), :func:`plan_devices` (the same on a module),
:func:`analyze_devices` (the device of every expression of a planned function, for the
executor backends) and :func:`as_device`.

A *virtual device* is a ``(device_type, device_id)`` pair, a :class:`~kiln.runtime.device.Device`
(``cpu(0)``, ``cpu(1)``, ``opencl(0)``). The algorithm is TVM's, by unification:

1. **collect** — every expression gets a *domain*: one virtual device for a tensor or tuple
   value, and for a function value one domain per parameter plus one for its result. Domains
   start free and are unified by the rules below; unifying two different fixed devices is a
   conflict (an error naming the expression).

   - a call of an operator or of a primitive function: all arguments and the result share one
     domain (a kernel reads and writes the memory of the device it runs on);
   - ``on_device(e, dev, constrain_body, constrain_result)``: ``constrain_body`` fixes ``e``'s
     domain to ``dev``, ``constrain_result`` fixes the annotation's own value to ``dev``; an
     unconstrained side stays free, so a copy may sit between the two;
   - ``device_copy(e, src, dst)``: ``e`` is on ``src``, the result on ``dst``;
   - a call of a Relay function (global, local or closure): arguments unify with the
     function's parameter domains, the call with its result domain;
   - let-bound variables take their value's domain, a let its body's; tuples, projections,
     ``if`` (condition and branches) and ``match`` (scrutinee, pattern variables, clauses)
     share one domain; a function's body unifies with its result domain;
   - a function carrying ``param_virtual_devices`` / ``result_virtual_device`` attributes
     (written by this pass) fixes those domains.

2. **default** — every domain still free becomes the default device.
3. **rewrite** — ``on_device`` disappears: where its body's device differs from its value's, a
   ``device_copy`` (per tensor of a tuple) takes its place; every Relay function records its
   devices in the ``param_virtual_devices`` and ``result_virtual_device`` attributes.

After planning, devices differ only across ``device_copy`` calls, which FuseOps never fuses,
so no fused kernel spans devices; the backends recover every expression's device with
:func:`analyze_devices` on the fused program (the same rules, fixed by the copies and the
function attributes).

Example
-------
>>> import kiln
>>> from kiln import relay
>>> x = relay.var("x", shape=(2,))
>>> body = relay.log(relay.annotation.on_device(relay.exp(x), kiln.cpu(1)))
>>> mod = PlanDevices(kiln.cpu(0))(kiln.IRModule.from_expr(relay.Function([x], body)))
>>> print(mod["main"].body.args[0].op.name, mod["main"].attrs["param_virtual_devices"])
device_copy (cpu(1),)
"""

from __future__ import annotations

from typing import Any

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.op import Op
from kiln.ir.type import FuncType, TupleType
from kiln.relay import expr as rx
from kiln.relay.adt import Match, PatternConstructor, PatternTuple, PatternVar
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.transform.pass_util import infer, relay_module_pass
from kiln.runtime.device import Device, cpu
from kiln.runtime.device import device as make_device
from kiln.runtime.error import TVMError

__all__ = ["PlanDevices", "plan_devices", "analyze_devices", "DeviceMap", "as_device",
           "PARAM_DEVICES_ATTR", "RESULT_DEVICE_ATTR"]

PARAM_DEVICES_ATTR = "param_virtual_devices"
RESULT_DEVICE_ATTR = "result_virtual_device"


def as_device(value: Any, what: str = "virtual device") -> Device:
    """A :class:`Device` from a Device, a device name or type code, or a Target.

    Example
    -------
    >>> as_device("opencl"), as_device(1), as_device(cpu(1))
    (opencl(0), cpu(0), cpu(1))
    """
    if isinstance(value, Device):
        return value
    if value is None:
        raise TVMError(f"{what} is missing (None); name a device such as kiln.cpu(1)")
    device_type = getattr(value, "device_type", None)
    if device_type is not None:  # a Target or a VirtualDevice-like object
        return Device(int(device_type), int(getattr(value, "virtual_device_id", 0) or 0))
    if isinstance(value, str | int) and not isinstance(value, bool):
        return make_device(value)
    raise TVMError(f"{what} must be a Device, a device name or a device type, got {value!r}")


# ---- domains --------------------------------------------------------------------------------


class _Domain:
    """A union-find node: a device (or None while free), or the domains of a function value."""

    __slots__ = ("parent", "device", "fields")

    def __init__(self, device: Device | None = None,
                 fields: tuple[_Domain, ...] | None = None) -> None:
        self.parent: _Domain | None = None
        self.device = device
        self.fields = fields  # parameters then result, for a function value

    def root(self) -> _Domain:
        node = self
        while node.parent is not None:
            node = node.parent
        if node is not self:  # path compression
            walk = self
            while walk.parent is not node and walk.parent is not None:
                walk.parent, walk = node, walk.parent
        return node


def _domain_for_type(ty: Any) -> _Domain:
    if isinstance(ty, FuncType):
        return _Domain(fields=tuple(_domain_for_type(t) for t in (*ty.arg_types, ty.ret_type)))
    return _Domain()


def _type_of(expr: Any) -> Any:
    """The checked type, else the annotation (an untyped module is analysed as far as it can
    be: a value of unknown type counts as a tensor)."""
    return getattr(expr, "checked_type_", None) or getattr(expr, "type_annotation", None)


def _function_domain(func: rx.Function) -> _Domain:
    ret = _type_of(func)
    ret = ret.ret_type if isinstance(ret, FuncType) else func.ret_type
    return _Domain(fields=tuple(_domain_for_type(_type_of(p)) for p in func.params)
                   + (_domain_for_type(ret),))


def _short(expr: Any) -> str:
    text = " ".join(repr(expr).split())
    return text if len(text) <= 160 else text[:160] + " ..."


def _unify(a: _Domain, b: _Domain, where: Any) -> None:
    a, b = a.root(), b.root()
    if a is b:
        return
    if (a.fields is None) != (b.fields is None):
        if a.fields is None and a.device is None:
            a.parent = b
        elif b.fields is None and b.device is None:
            b.parent = a
        else:
            raise TVMError(f"PlanDevices: a function value and a tensor value meet at "
                           f"{_short(where)}")
        return
    if a.fields is not None:
        if len(a.fields) != len(b.fields):
            raise TVMError(f"PlanDevices: functions of different arity meet at {_short(where)}")
        b.parent = a
        for x, y in zip(a.fields, b.fields):
            _unify(x, y, where)
        return
    if a.device is not None and b.device is not None and a.device != b.device:
        raise TVMError(
            f"PlanDevices: conflicting device constraints: {a.device} and {b.device} both "
            f"required for {_short(where)}; put an on_device annotation (or device_copy) "
            "where the value should move between devices")
    if a.device is None:
        a.parent = b
    else:
        b.parent = a


# ---- collect --------------------------------------------------------------------------------


class _Collector:
    """Builds and unifies the domains of every expression of a module's Relay functions."""

    def __init__(self, mod: Any) -> None:
        self.mod = mod
        self.domains: dict[int, _Domain] = {}
        self.keep: list[Any] = []  # keeps ids stable while the map lives
        self.globals: dict[str, _Domain] = {}

    def global_domain(self, gvar: GlobalVar) -> _Domain:
        name = gvar.name_hint
        if name not in self.globals:
            func = self.mod[name]
            self.globals[name] = _function_domain(func)
        return self.globals[name]

    def domain(self, expr: Any) -> _Domain:
        """The domain of ``expr``, collecting it on first sight."""
        found = self.domains.get(id(expr))
        if found is not None:
            return found
        if isinstance(expr, GlobalVar):
            result = self.global_domain(expr)
        elif isinstance(expr, rx.Var):
            # a free variable (a parameter not seen through its function): its own domain
            result = _domain_for_type(_type_of(expr))
        else:
            rule = _RULES.get(type(expr))
            result = rule(self, expr) if rule is not None else _domain_for_type(
                _type_of(expr))
        self.domains[id(expr)] = result
        self.keep.append(expr)
        return result

    def bind(self, var: rx.Var, domain: _Domain) -> None:
        existing = self.domains.get(id(var))
        if existing is None:
            self.domains[id(var)] = domain
            self.keep.append(var)
        else:
            _unify(existing, domain, var)

    # -- rules, one per node kind ---------------------------------------------------------

    def function(self, func: rx.Function) -> _Domain:
        if func.get_attr("Primitive"):
            return _function_domain(func)
        result = _function_domain(func)
        self.domains[id(func)] = result  # before the body: recursive closures refer to it
        for param, field in zip(func.params, result.fields):
            self.bind(param, field)
        _unify(self.domain(func.body), result.fields[-1], func.body)
        param_devices = func.get_attr(PARAM_DEVICES_ATTR)
        if param_devices is not None:
            for field, dev in zip(result.fields, param_devices):
                if dev is not None:
                    _unify(field, _Domain(as_device(dev)), func)
        result_device = func.get_attr(RESULT_DEVICE_ATTR)
        if result_device is not None:
            _unify(result.fields[-1], _Domain(as_device(result_device)), func)
        return result

    def call(self, call: rx.Call) -> _Domain:
        op = call.op
        if isinstance(op, Op):
            special = _OP_RULES.get(op.name)
            if special is not None:
                return special(self, call)
            return self._kernel_call(call)
        if isinstance(op, rx.Function) and op.get_attr("Primitive"):
            return self._kernel_call(call)
        if isinstance(op, Constructor):
            return self._kernel_call(call)
        callee = self.domain(op).root()
        result = self.new_for(call)
        if callee.fields is None:  # an opaque callee (an untyped closure): one domain
            for arg in call.args:
                _unify(self.domain(arg), result, call)
            return result
        if len(callee.fields) != len(call.args) + 1:
            raise TVMError(f"PlanDevices: call with {len(call.args)} arguments of a function "
                           f"of {len(callee.fields) - 1} parameters: {_short(call)}")
        for arg, field in zip(call.args, callee.fields):
            _unify(self.domain(arg), field, arg)
        _unify(result, callee.fields[-1], call)
        return result

    def new_for(self, expr: Any) -> _Domain:
        return _domain_for_type(_type_of(expr))

    def _kernel_call(self, call: rx.Call) -> _Domain:
        result = _Domain()
        for arg in call.args:
            _unify(self.domain(arg), result, call)
        return result

    def _on_device(self, call: rx.Call) -> _Domain:
        attrs = call.attrs
        dev = as_device(attrs.virtual_device, "on_device's virtual_device")
        body = self.domain(call.args[0])
        result = _Domain()
        if attrs.constrain_body:
            _unify(body, _Domain(dev), call.args[0])
        if attrs.constrain_result:
            _unify(result, _Domain(dev), call)
        return result

    def _device_copy(self, call: rx.Call) -> _Domain:
        attrs = call.attrs
        src = as_device(attrs.src_virtual_device, "device_copy's src_virtual_device")
        dst = as_device(attrs.dst_virtual_device, "device_copy's dst_virtual_device")
        _unify(self.domain(call.args[0]), _Domain(src), call.args[0])
        return _Domain(dst)

    def _free_call(self, call: rx.Call) -> _Domain:
        for arg in call.args:
            self.domain(arg)
        return _Domain()

    def let(self, let: rx.Let) -> _Domain:
        chain = []
        node = let
        while isinstance(node, rx.Let):  # iterate: ANF chains are long
            self.bind(node.var, self.domain(node.value))
            chain.append(node)
            node = node.body
        body = self.domain(node)
        for link in chain:
            self.domains[id(link)] = body
            self.keep.append(link)
        return body

    def same_domain(self, expr: Any, children: list[Any]) -> _Domain:
        result = _Domain()
        for child in children:
            child_domain = self.domain(child)
            if child_domain.root().fields is None:
                _unify(child_domain, result, expr)
        return result

    def tuple(self, tup: rx.Tuple) -> _Domain:
        return self.same_domain(tup, list(tup.fields))

    def tuple_get_item(self, item: rx.TupleGetItem) -> _Domain:
        return self.same_domain(item, [item.tuple_value])

    def if_(self, node: rx.If) -> _Domain:
        return self.same_domain(node, [node.cond, node.true_branch, node.false_branch])

    def match(self, node: Match) -> _Domain:
        data = self.domain(node.data)
        result = _Domain()
        for clause in node.clauses:
            self._bind_pattern(clause.lhs, data)
            _unify(self.domain(clause.rhs), result, clause.rhs)
        _unify(data, result, node)
        return result

    def _bind_pattern(self, pattern: Any, data: _Domain) -> None:
        if isinstance(pattern, PatternVar):
            var_domain = _domain_for_type(_type_of(pattern.var))
            if var_domain.fields is None:
                var_domain = data
            self.bind(pattern.var, var_domain)
        elif isinstance(pattern, PatternConstructor | PatternTuple):
            for sub in pattern.patterns:
                self._bind_pattern(sub, data)

    def refs(self, node: Any) -> _Domain:
        children = [getattr(node, name) for name in ("value", "ref") if hasattr(node, name)]
        return self.same_domain(node, children)


_OP_RULES = {
    "on_device": _Collector._on_device,
    "device_copy": _Collector._device_copy,
    "memory.kill": _Collector._free_call,
}

_RULES = {
    rx.Function: _Collector.function,
    rx.Call: _Collector.call,
    rx.Let: _Collector.let,
    rx.Tuple: _Collector.tuple,
    rx.TupleGetItem: _Collector.tuple_get_item,
    rx.If: _Collector.if_,
    Match: _Collector.match,
    rx.RefCreate: _Collector.refs,
    rx.RefRead: _Collector.refs,
    rx.RefWrite: _Collector.refs,
}


# ---- the result of the analysis -------------------------------------------------------------


class DeviceMap:
    """The planned device of every expression of one analysis (free domains defaulted).

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> main = relay.Function([x], relay.annotation.on_device(relay.exp(x), cpu(1)))
    >>> dm = analyze_devices(kiln.IRModule.from_expr(main), cpu(0))
    >>> dm.device_of(main.body.args[0]), dm.device_of(main.body), dm.devices
    (cpu(1), cpu(0), [cpu(0), cpu(1)])
    """

    def __init__(self, collector: _Collector, default_device: Device) -> None:
        self._collector = collector
        self.default_device = default_device

    def device_of(self, expr: Any) -> Device:
        """The device holding ``expr``'s value (the result device for a function value)."""
        domain = self._collector.domains.get(id(expr))
        if domain is None:
            domain = self._collector.domain(expr)
        return self._resolve(domain)

    def _resolve(self, domain: _Domain) -> Device:
        root = domain.root()
        while root.fields is not None:
            root = root.fields[-1].root()
        return root.device if root.device is not None else self.default_device

    def function_devices(self, func: rx.Function) -> tuple[list[Device | None], Device]:
        """(device of each parameter, None for a function-typed one; result device)."""
        params = []
        for param in func.params:
            root = self._collector.domain(param).root()
            params.append(None if root.fields is not None else self._resolve(root))
        return params, self.device_of(func.body)

    @property
    def devices(self) -> list[Device]:
        """Every device the analysed functions use, the default first."""
        found = [self.default_device]
        for domain in self._collector.domains.values():
            root = domain.root()
            if root.fields is None and root.device is not None and root.device not in found:
                found.append(root.device)
        return found


def analyze_devices(mod: Any, default_device: Any = None,
                    functions: list[str] | None = None) -> DeviceMap:
    """The device of every expression in ``mod``'s Relay functions (typed, planned or not).

    ``functions`` limits the analysis to those global functions (default: all non-primitive).
    """
    from kiln.relay.base import deep_recursion

    default = cpu(0) if default_device is None else as_device(default_device, "default device")
    collector = _Collector(mod)
    with deep_recursion():  # one Python frame per nested call: deep graphs need the room
        for gvar, func in mod.functions.items():
            if not isinstance(func, rx.Function) or func.get_attr("Primitive"):
                continue
            if functions is not None and gvar.name_hint not in functions:
                continue
            _unify(collector.global_domain(gvar), collector.domain(func), func)
    return DeviceMap(collector, default)


# ---- rewrite --------------------------------------------------------------------------------


def _copy(expr: Any, ty: Any, src: Device, dst: Device) -> Any:
    """``device_copy`` of ``expr`` from ``src`` to ``dst``, per tensor for a tuple value."""
    from kiln.relay.op.annotation.annotation import device_copy

    if isinstance(ty, TupleType):
        if isinstance(expr, rx.Tuple):
            parts = expr.fields
        else:
            parts = [rx.TupleGetItem(expr, i) for i in range(len(ty.fields))]
        return rx.Tuple([_copy(p, t, src, dst) for p, t in zip(parts, ty.fields)])
    return device_copy(expr, src, dst)


class _Rewriter(ExprMutator):
    """Replaces on_device by copies where needed and records function devices."""

    def __init__(self, device_map: DeviceMap) -> None:
        super().__init__()
        self.device_map = device_map

    def visit_call(self, call: rx.Call) -> Any:
        op = call.op
        if not isinstance(op, Op) or op.name not in _DEVICE_OPS:
            return super().visit_call(call)
        body = self.visit(call.args[0])
        src = self.device_map.device_of(call.args[0])
        dst = self.device_map.device_of(call)
        if src == dst:
            return body
        return _copy(body, call.args[0].checked_type, src, dst)

    def visit_function(self, func: rx.Function) -> Any:
        new = super().visit_function(func)
        if func.get_attr("Primitive"):
            return new
        params, result = self.device_map.function_devices(func)
        return new.with_attr(PARAM_DEVICES_ATTR, tuple(params)).with_attr(
            RESULT_DEVICE_ATTR, result)


def _has_device_annotations(mod: Any) -> bool:
    from kiln.relay.expr_functor import post_order_visit

    found = []
    for func in mod.functions.values():
        if isinstance(func, rx.Function) and not found:
            post_order_visit(func, lambda n: found.append(n) if isinstance(n, rx.Call) and
                             isinstance(n.op, Op) and n.op.name in _DEVICE_OPS else None)
    return bool(found)


_DEVICE_OPS = ("on_device", "device_copy")


def plan_devices(mod: Any, default_device: Any = None) -> Any:
    """``mod`` with devices planned (see the module docstring); typed on return.

    A module without ``on_device``/``device_copy`` is returned unchanged: everything in it
    runs on the default device, which is what :func:`analyze_devices` finds anyway.
    """
    if not _has_device_annotations(mod):
        return mod
    mod = infer(mod)
    device_map = analyze_devices(mod, default_device)
    rewriter = _Rewriter(device_map)
    updated = mod.copy()
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, rx.Function) and not func.get_attr("Primitive"):
            updated.update_func(gvar, rewriter.visit(func))
    return infer(updated)


def PlanDevices(default_device: Any = None):  # noqa: N802 (TVM's name)
    """The device planning pass: on_device annotations become device_copy calls.

    Parameters
    ----------
    default_device : Device, str or int, optional
        Where unconstrained expressions run (default ``cpu(0)``).

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> f = relay.Function([x], relay.annotation.on_device(relay.exp(x), kiln.cpu(1)))
    >>> planned = PlanDevices()(kiln.IRModule.from_expr(f))["main"]
    >>> planned.attrs["result_virtual_device"]
    cpu(0)
    """
    default = cpu(0) if default_device is None else as_device(default_device, "default device")
    return relay_module_pass("PlanDevices", 0, lambda mod, ctx: plan_devices(mod, default))
