"""Type inference for Relay (the engine behind ``relay.transform.InferType``).

Entry points: :func:`infer_module` (type every untyped function of an IRModule),
:func:`infer_expr` (``relay.transform.InferTypeLocal``) and :class:`TypeInferencer`.

The algorithm is Hindley–Milner-style unification plus operator type relations:

* every expression gets a type, possibly an :class:`~kiln.ir.type.IncompleteType` placeholder;
* ``unify`` merges types; placeholders live in a union-find (``solution``), so binding one
  placeholder to another or to a concrete type is O(1);
* an operator call becomes a *relation*: once all argument types are known (no placeholder
  left inside them) the op's ``FTVMTypeRelation`` computes the output type, which is unified
  with the call's placeholder. Calls whose arguments are already known (the common case in a
  data-flow graph) are solved immediately; the rest wait in ``pending`` and the solver loops
  over them until no relation makes progress;
* an argument whose type is still unknown (an unannotated weight) may be derived from the
  others by the op's ``FInferArgTypes`` rule (``nn.dense``'s weight from the data and
  ``units``, a conv weight from ``channels``/``kernel_size``, a bias from the data's axis),
  as TVM's relations assign unknown inputs; the op's relation then checks the call;
* polymorphic functions and ADT constructors are instantiated with fresh placeholders per use
  (solved, they become the call's ``type_args``); global functions start from their
  annotations (or a placeholder), so recursion works;
* a ``match`` marked complete must handle every value (:func:`unmatched_cases`);
* at the end every placeholder must be solved; each visited node's ``checked_type_`` is set.

Incremental: a function whose ``checked_type_`` is set (by an earlier run) is not re-inferred,
and inside a function a sub-expression that already carries a closed type (no placeholder, no
type variable) is reused without walking it again — passes that rebuild a few nodes pay only
for those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar, IntImm, RelayExpr
from kiln.ir.op import Op
from kiln.ir.structural import structural_equal
from kiln.ir.type import (
    Any as AnyDim,
)
from kiln.ir.type import (
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    PrimType,
    RelayRefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeRelation,
    TypeVar,
)
from kiln.relay.adt import Match, PatternConstructor, PatternTuple, PatternVar, PatternWildcard
from kiln.relay.analysis.match_check import type_data_of, unmatched_cases
from kiln.relay.base import deep_recursion, expr_to_text
from kiln.relay.expr import (
    Call,
    Constant,
    Function,
    If,
    Let,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.runtime.error import TVMError, TypeInferenceError

__all__ = ["TypeInferencer", "infer_module", "infer_expr"]

_BOOL_SCALAR = TensorType((), "bool")
_UNIT = TupleType([])


class _UnifyError(Exception):
    """Two types cannot be unified (turned into a TypeInferenceError with context)."""


def _is_closed(ty: Any, allow_type_vars: bool = False) -> bool:
    """Whether ``ty`` holds no IncompleteType (and no TypeVar unless allowed)."""
    stack = [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, IncompleteType):
            return False
        if isinstance(t, TypeVar):
            if not allow_type_vars:
                return False
        elif isinstance(t, TupleType):
            stack.extend(t.fields)
        elif isinstance(t, FuncType):
            if t.type_params and not allow_type_vars:
                return False
            stack.extend(t.arg_types)
            stack.append(t.ret_type)
        elif isinstance(t, TypeCall):
            stack.extend(t.args)
        elif isinstance(t, RelayRefType):
            stack.append(t.value)
        elif t is None:
            return False
    return True


def substitute(ty: Type, mapping: dict) -> Type:
    """``ty`` with type variables replaced by ``mapping[var]``."""
    if not mapping:
        return ty
    if isinstance(ty, TypeVar):
        return mapping.get(ty, ty)
    if isinstance(ty, TupleType):
        return TupleType([substitute(f, mapping) for f in ty.fields])
    if isinstance(ty, FuncType):
        inner = {k: v for k, v in mapping.items() if k not in ty.type_params}
        return FuncType([substitute(a, inner) for a in ty.arg_types],
                        substitute(ty.ret_type, inner), ty.type_params,
                        [substitute(c, inner) for c in ty.type_constraints])
    if isinstance(ty, TypeCall):
        return TypeCall(substitute(ty.func, mapping), [substitute(a, mapping) for a in ty.args])
    if isinstance(ty, RelayRefType):
        return RelayRefType(substitute(ty.value, mapping))
    if isinstance(ty, TypeRelation):
        return TypeRelation(ty.func, [substitute(a, mapping) for a in ty.args],
                            ty.num_inputs, ty.attrs)
    return ty


class _Solver:
    """Union-find over IncompleteTypes plus structural unification."""

    def __init__(self) -> None:
        self.solution: dict[IncompleteType, Type] = {}

    def find(self, ty: Type) -> Type:
        if not isinstance(ty, IncompleteType):
            return ty
        root = ty
        path = []
        while isinstance(root, IncompleteType) and root in self.solution:
            path.append(root)
            root = self.solution[root]
        for hole in path[:-1]:  # path compression
            self.solution[hole] = root
        return root

    def resolve(self, ty: Type) -> tuple[Type, bool]:
        """``ty`` with solved placeholders substituted, and whether none is left unsolved."""
        ty = self.find(ty)
        if isinstance(ty, TensorType | TypeVar | GlobalTypeVar | PrimType):
            return ty, True
        if isinstance(ty, IncompleteType):
            return ty, False
        if isinstance(ty, TupleType):
            fields, done = self._resolve_all(ty.fields)
            return (ty if fields is None else TupleType(fields)), done
        if isinstance(ty, FuncType):
            parts, done = self._resolve_all((*ty.arg_types, ty.ret_type))
            if parts is None:
                return ty, done
            return FuncType(parts[:-1], parts[-1], ty.type_params, ty.type_constraints), done
        if isinstance(ty, TypeCall):
            args, done = self._resolve_all(ty.args)
            return (ty if args is None else TypeCall(ty.func, args)), done
        if isinstance(ty, RelayRefType):
            value, done = self.resolve(ty.value)
            return (ty if value is ty.value else RelayRefType(value)), done
        return ty, True

    def _resolve_all(self, types) -> tuple[list | None, bool]:
        out, changed, done = [], False, True
        for t in types:
            r, ok = self.resolve(t)
            out.append(r)
            changed |= r is not t
            done &= ok
        return (out if changed else None), done

    def bind(self, hole: IncompleteType, ty: Type) -> None:
        if hole is not ty:
            self.solution[hole] = ty

    def unify(self, lhs: Type, rhs: Type) -> Type:
        lhs, rhs = self.find(lhs), self.find(rhs)
        if lhs is rhs:
            return lhs
        if isinstance(lhs, IncompleteType):
            self.bind(lhs, rhs)
            return rhs
        if isinstance(rhs, IncompleteType):
            self.bind(rhs, lhs)
            return lhs
        rule = _UNIFY_RULES.get(type(lhs)) if type(lhs) is type(rhs) else None
        if rule is None:
            if isinstance(lhs, TypeCall) and isinstance(rhs, GlobalTypeVar):
                return self.unify(lhs, TypeCall(rhs, []))
            if isinstance(rhs, TypeCall) and isinstance(lhs, GlobalTypeVar):
                return self.unify(TypeCall(lhs, []), rhs)
            raise _UnifyError(f"{lhs!r} and {rhs!r} do not match")
        return rule(self, lhs, rhs)

    def _unify_dim(self, lhs: Any, rhs: Any) -> Any:
        if lhs is rhs:
            return lhs
        if isinstance(lhs, IntImm) and isinstance(rhs, IntImm):
            if lhs.value != rhs.value:
                raise _UnifyError(f"dimension {lhs.value} does not match {rhs.value}")
            return lhs
        if isinstance(lhs, AnyDim):
            return lhs
        if isinstance(rhs, AnyDim):
            return rhs
        if structural_equal(lhs, rhs):
            return lhs
        raise _UnifyError(f"dimension {lhs!r} does not match {rhs!r}")

    def _unify_tensor(self, lhs: TensorType, rhs: TensorType) -> Type:
        if str(lhs.dtype) != str(rhs.dtype):
            raise _UnifyError(f"dtype {lhs.dtype} does not match {rhs.dtype} "
                              f"({lhs!r} vs {rhs!r})")
        if len(lhs.shape) != len(rhs.shape):
            raise _UnifyError(f"rank {len(lhs.shape)} does not match {len(rhs.shape)} "
                              f"({lhs!r} vs {rhs!r})")
        try:
            dims = [self._unify_dim(a, b) for a, b in zip(lhs.shape, rhs.shape)]
        except _UnifyError as err:
            raise _UnifyError(f"{lhs!r} and {rhs!r} do not match: {err}") from None
        if all(d is a for d, a in zip(dims, lhs.shape)):
            return lhs
        return TensorType(dims, lhs.dtype)

    def _unify_tuple(self, lhs: TupleType, rhs: TupleType) -> Type:
        if len(lhs.fields) != len(rhs.fields):
            raise _UnifyError(f"tuples of {len(lhs.fields)} and {len(rhs.fields)} fields: "
                              f"{lhs!r} vs {rhs!r}")
        return TupleType([self.unify(a, b) for a, b in zip(lhs.fields, rhs.fields)])

    def _unify_func(self, lhs: FuncType, rhs: FuncType) -> Type:
        if len(lhs.type_params) != len(rhs.type_params):
            raise _UnifyError(f"{lhs!r} and {rhs!r} have different numbers of type params")
        if rhs.type_params:
            rhs = substitute(FuncType(rhs.arg_types, rhs.ret_type),
                             dict(zip(rhs.type_params, lhs.type_params)))
        if len(lhs.arg_types) != len(rhs.arg_types):
            raise _UnifyError(f"functions of {len(lhs.arg_types)} and {len(rhs.arg_types)} "
                              f"arguments: {lhs!r} vs {rhs!r}")
        args = [self.unify(a, b) for a, b in zip(lhs.arg_types, rhs.arg_types)]
        return FuncType(args, self.unify(lhs.ret_type, rhs.ret_type), lhs.type_params,
                        lhs.type_constraints)

    def _unify_type_call(self, lhs: TypeCall, rhs: TypeCall) -> Type:
        func = self.unify(lhs.func, rhs.func)
        if len(lhs.args) != len(rhs.args):
            raise _UnifyError(f"{lhs!r} and {rhs!r} have different numbers of arguments")
        return TypeCall(func, [self.unify(a, b) for a, b in zip(lhs.args, rhs.args)])

    def _unify_global_type_var(self, lhs: GlobalTypeVar, rhs: GlobalTypeVar) -> Type:
        if lhs.name_hint != rhs.name_hint:
            raise _UnifyError(f"type {lhs.name_hint} does not match {rhs.name_hint}")
        return lhs

    def _unify_ref(self, lhs: RelayRefType, rhs: RelayRefType) -> Type:
        return RelayRefType(self.unify(lhs.value, rhs.value))

    def _unify_prim(self, lhs: PrimType, rhs: PrimType) -> Type:
        if str(lhs.dtype) != str(rhs.dtype):
            raise _UnifyError(f"{lhs!r} does not match {rhs!r}")
        return lhs

    def _unify_rigid(self, lhs: Type, rhs: Type) -> Type:
        raise _UnifyError(f"type variables {lhs!r} and {rhs!r} are different")


_UNIFY_RULES: dict[type, Callable] = {
    TensorType: _Solver._unify_tensor,
    TupleType: _Solver._unify_tuple,
    FuncType: _Solver._unify_func,
    TypeCall: _Solver._unify_type_call,
    GlobalTypeVar: _Solver._unify_global_type_var,
    RelayRefType: _Solver._unify_ref,
    PrimType: _Solver._unify_prim,
    TypeVar: _Solver._unify_rigid,
}


def _window(node: Any, max_lines: int = 12) -> str:
    """The last lines of ``node``'s text: the expression and what it directly uses."""
    try:
        lines = expr_to_text(node).splitlines()
    except Exception:  # printing must never hide the type error itself
        return f"<{type(node).__name__}>"
    if len(lines) > max_lines:
        lines = ["..."] + lines[-max_lines:]
    return "\n".join("    " + line for line in lines)


class _Relation:
    """An operator call waiting for its argument types."""

    __slots__ = ("node", "op", "rel", "arg_types", "out")

    def __init__(self, node, op, rel, arg_types, out) -> None:
        self.node, self.op, self.rel, self.arg_types, self.out = node, op, rel, arg_types, out

    def try_solve(self, inferencer: TypeInferencer) -> bool:
        ret = inferencer.solve_op_call(self.node, self.op, self.rel, self.arg_types)
        if ret is None:
            return False
        inferencer.unify(self.out, ret, self.node, "the result of")
        return True


class _FuncRelation:
    """A TypeRelation carried by a FuncType: ``func(inputs, attrs)`` gives the output."""

    __slots__ = ("node", "relation")

    def __init__(self, node, relation: TypeRelation) -> None:
        self.node, self.relation = node, relation

    def try_solve(self, inferencer: TypeInferencer) -> bool:
        rel = self.relation
        inputs = inferencer.resolved_or_none(rel.args[:rel.num_inputs])
        if inputs is None:
            return False
        name = getattr(rel.func, "__name__", "relation")
        ret = inferencer.run_relation(self.node, name, rel.func, inputs, rel.attrs)
        for out in rel.args[rel.num_inputs:]:
            inferencer.unify(out, ret, self.node, "the result of")
        return True


class _GetItem:
    """A TupleGetItem whose tuple type is not known yet."""

    __slots__ = ("node", "tuple_type", "out")

    def __init__(self, node, tuple_type, out) -> None:
        self.node, self.tuple_type, self.out = node, tuple_type, out

    def try_solve(self, inferencer: TypeInferencer) -> bool:
        ty = inferencer.solver.find(self.tuple_type)
        if isinstance(ty, IncompleteType):
            return False
        inferencer.unify(self.out, inferencer.tuple_field(self.node, ty), self.node,
                         "the result of")
        return True


class TypeInferencer:
    """One inference run: the solver, each node's type, and the pending relations."""

    def __init__(self, mod: Any = None) -> None:
        self.mod = mod
        self.solver = _Solver()
        self.types: dict[int, Type] = {}
        self.nodes: list[RelayExpr] = []
        self.var_types: dict[Var, Type] = {}
        self.global_types: dict[str, Type] = {}
        self.global_vars: dict[str, GlobalVar] = {}
        self.pending: list = []
        self.type_args: list[tuple[Call, list[IncompleteType]]] = []  # polymorphic calls
        self.reuse_types = True  # reuse closed checked_type_ of sub-expressions (incremental)
        self._visitors = {
            Var: self.visit_var, Constant: self.visit_constant, Tuple: self.visit_tuple,
            TupleGetItem: self.visit_tuple_getitem, Call: self.visit_call, Let: self.visit_let,
            If: self.visit_if, Function: self.visit_function, GlobalVar: self.visit_global_var,
            RefCreate: self.visit_ref_create, RefRead: self.visit_ref_read,
            RefWrite: self.visit_ref_write, Match: self.visit_match,
            Constructor: self.visit_constructor, Op: self.visit_op,
        }

    # -- errors -----------------------------------------------------------------------------
    def error(self, node: Any, message: str) -> TypeInferenceError:
        span = getattr(node, "span", None)
        where = f" at {span!r}" if span is not None else ""
        return TypeInferenceError(f"{message}{where}\n  in expression:\n{_window(node)}")

    def unify(self, lhs: Type, rhs: Type, node: Any, role: str = "") -> Type:
        try:
            return self.solver.unify(lhs, rhs)
        except _UnifyError as err:
            raise self.error(node, f"type mismatch in {role or 'expression'} "
                                   f"{type(node).__name__}: {err}") from None

    def resolved_or_none(self, types) -> list | None:
        out = []
        for t in types:
            r, done = self.solver.resolve(t)
            if not done:
                return None
            out.append(r)
        return out

    def run_relation(self, node, op, rel, arg_types, attrs=None) -> Type:
        name = op.name if isinstance(op, Op) else str(op)
        if attrs is None and isinstance(node, Call):
            attrs = node.attrs
        try:
            ret = rel(arg_types, attrs)
        except Exception as err:  # relations report bad input with any exception type
            shown = ", ".join(repr(t) for t in arg_types)
            raise self.error(
                node, f"type inference of operator {name} failed: {err}\n"
                      f"  argument types: [{shown}]") from err
        if not isinstance(ret, Type):
            raise self.error(node, f"the type relation of {name} returned {ret!r}, not a Type")
        return ret

    # -- traversal --------------------------------------------------------------------------
    def visit(self, node: RelayExpr) -> Type:
        known = self.types.get(id(node))
        if known is not None:
            return known
        if self.reuse_types and not isinstance(node, Var | Function | GlobalVar):
            cached = getattr(node, "checked_type_", None)
            if cached is not None and _is_closed(cached) and _operands_typed(node):
                self.types[id(node)] = cached
                return cached
        visitor = self._visitors.get(type(node))
        if visitor is None:
            for cls, fn in self._visitors.items():
                if isinstance(node, cls):
                    visitor = fn
                    break
            else:
                raise self.error(node, f"type inference cannot handle {type(node).__name__}")
        ty = visitor(node)
        self.types[id(node)] = ty
        self.nodes.append(node)
        return ty

    def var_type(self, var: Var) -> Type:
        ty = self.var_types.get(var)
        if ty is None:
            ty = var.type_annotation
            if ty is None:
                cached = getattr(var, "checked_type_", None) if self.reuse_types else None
                ty = cached if cached is not None and _is_closed(cached) else IncompleteType()
            self.var_types[var] = ty
        return ty

    def visit_var(self, node: Var) -> Type:
        return self.var_type(node)

    def visit_constant(self, node: Constant) -> Type:
        data = node.data
        return TensorType(tuple(data.shape), str(data.dtype))

    def visit_tuple(self, node: Tuple) -> Type:
        return TupleType([self.visit(f) for f in node.fields])

    def tuple_field(self, node: TupleGetItem, ty: Type) -> Type:
        if not isinstance(ty, TupleType):
            raise self.error(node, f"TupleGetItem expects a tuple, got a value of type {ty!r}")
        if not 0 <= node.index < len(ty.fields):
            raise self.error(node, f"tuple index {node.index} is out of range for {ty!r}")
        return ty.fields[node.index]

    def visit_tuple_getitem(self, node: TupleGetItem) -> Type:
        tuple_type = self.solver.find(self.visit(node.tuple_value))
        if not isinstance(tuple_type, IncompleteType):
            return self.tuple_field(node, tuple_type)
        out = IncompleteType()
        self.pending.append(_GetItem(node, tuple_type, out))
        return out

    def visit_call(self, node: Call) -> Type:
        op = node.op
        if isinstance(op, Op):
            return self._call_op(node, op)
        arg_types = [self.visit(a) for a in node.args]
        fn_type = self.solver.find(self.visit(op))
        if isinstance(fn_type, IncompleteType):
            ret = IncompleteType()
            self.unify(fn_type, FuncType(arg_types, ret), node, "the callee of")
            return ret
        if not isinstance(fn_type, FuncType):
            raise self.error(node, f"cannot call a value of type {fn_type!r}")
        fn_type = self.instantiate(fn_type, node)
        if len(fn_type.arg_types) != len(arg_types):
            raise self.error(node, f"the callee expects {len(fn_type.arg_types)} arguments, "
                                   f"got {len(arg_types)}")
        for i, (want, got) in enumerate(zip(fn_type.arg_types, arg_types)):
            self.unify(want, got, node, f"argument {i} of")
        for constraint in fn_type.type_constraints:
            if isinstance(constraint, TypeRelation):
                self.pending.append(_FuncRelation(node, constraint))
        return fn_type.ret_type

    def _call_op(self, node: Call, op: Op) -> Type:
        rel = op.get_attr("FTVMTypeRelation")
        if rel is None:
            raise self.error(node, f"operator {op.name} has no type relation (FTVMTypeRelation)")
        num_inputs = getattr(op, "num_inputs", -1)
        if num_inputs is not None and num_inputs >= 0 and num_inputs != len(node.args):
            raise self.error(node, f"operator {op.name} expects {num_inputs} arguments, "
                                   f"got {len(node.args)}")
        arg_types = [self.visit(a) for a in node.args]
        ret = self.solve_op_call(node, op, rel, arg_types)
        if ret is not None:
            return ret
        out = IncompleteType()
        self.pending.append(_Relation(node, op, rel, arg_types, out))
        return out

    def solve_op_call(self, node: Call, op: Op, rel: Callable, arg_types: list) -> Type | None:
        """The result type of an operator call, or None while some argument type is unknown.

        Before giving up, the op's ``FInferArgTypes`` rule (if any) may determine unknown
        argument types from the known ones and the attrs — a weight's shape from the data's
        shape and ``units``/``channels``/``kernel_size``, as TVM's relations do. The forward
        relation then checks the whole call, so a rule never has to validate anything.
        """
        resolved = self.resolved_or_none(arg_types)
        if resolved is None and self.infer_arg_types(node, op, arg_types):
            resolved = self.resolved_or_none(arg_types)
        if resolved is None:
            return None
        return self.run_relation(node, op, rel, resolved)

    def infer_arg_types(self, node: Call, op: Op, arg_types: list) -> bool:
        """Unify unknown argument types with what ``FInferArgTypes`` derives; True on progress."""
        rule = op.get_attr("FInferArgTypes")
        if rule is None:
            return False
        known = []
        for t in arg_types:
            ty, done = self.solver.resolve(t)
            known.append(ty if done else None)
        try:
            found = rule(known, node.attrs)
        except Exception as err:  # rules report bad input with any exception type
            raise self.error(node, f"type inference of operator {op.name} failed: {err}") \
                from err
        progress = False
        for index, ty in found.items():
            if known[index] is None:
                self.unify(arg_types[index], ty, node, f"argument {index} of")
                progress = True
        return progress

    def instantiate(self, fn_type: FuncType, call: Call | None = None) -> FuncType:
        """``fn_type`` with its type params replaced by fresh placeholders; those of a ``call``
        become its ``type_args`` once solved (TVM's InferType fills them in the same way)."""
        if not fn_type.type_params:
            return fn_type
        fn_type = self.solver.resolve(fn_type)[0]  # type params may hide behind solved holes
        fresh = {tv: IncompleteType(tv.kind) for tv in fn_type.type_params}
        if call is not None and not call.type_args:
            self.type_args.append((call, list(fresh.values())))
        return FuncType([substitute(a, fresh) for a in fn_type.arg_types],
                        substitute(fn_type.ret_type, fresh), (),
                        [substitute(c, fresh) for c in fn_type.type_constraints])

    def visit_let(self, node: Let) -> Type:
        var_type = self.visit(node.var)  # bound first: the value may be a recursive closure
        self.unify(var_type, self.visit(node.value), node, "the binding of")
        return self.visit(node.body)

    def visit_if(self, node: If) -> Type:
        self.unify(self.visit(node.cond), _BOOL_SCALAR, node, "the condition (a bool scalar) of")
        then_type = self.visit(node.true_branch)
        return self.unify(then_type, self.visit(node.false_branch), node, "the branches of")

    def visit_function(self, node: Function) -> Type:
        params = [self.visit(p) for p in node.params]
        body = self.visit(node.body)
        if node.ret_type is not None:
            body = self.unify(node.ret_type, body, node, "the return type of")
        return FuncType(params, body, node.type_params)

    def global_type(self, gvar: GlobalVar) -> Type:
        name = gvar.name_hint
        ty = self.global_types.get(name)
        if ty is not None:
            return ty
        func = self.mod.functions.get(self.mod.get_global_var(name)) \
            if self.mod is not None and name in self.mod else None
        if func is None:
            ty = getattr(gvar, "checked_type_", None)
            if ty is None:
                raise self.error(gvar, f"global function @{name} is not in the module")
        elif isinstance(func, Function) and getattr(func, "checked_type_", None) is not None \
                and _is_closed(func.checked_type_, allow_type_vars=True):
            ty = func.checked_type_
        elif isinstance(func, Function) and func.ret_type is not None and all(
                p.type_annotation is not None for p in func.params):
            ty = FuncType([p.type_annotation for p in func.params], func.ret_type,
                          func.type_params)
        elif isinstance(func, Function):
            ty = IncompleteType()
        else:  # a PrimFunc or external function: its declared type, if any
            ty = getattr(func, "checked_type_", None) or IncompleteType()
        self.global_types[name] = ty
        self.global_vars.setdefault(name, gvar)
        return ty

    def visit_global_var(self, node: GlobalVar) -> Type:
        return self.global_type(node)

    def visit_ref_create(self, node: RefCreate) -> Type:
        return RelayRefType(self.visit(node.value))

    def visit_ref_read(self, node: RefRead) -> Type:
        value = IncompleteType()
        self.unify(self.visit(node.ref), RelayRefType(value), node, "the reference of")
        return value

    def visit_ref_write(self, node: RefWrite) -> Type:
        ref_type = RelayRefType(self.visit(node.value))
        self.unify(self.visit(node.ref), ref_type, node, "the reference of")
        return _UNIT

    def constructor_type(self, ctor: Constructor) -> FuncType:
        data = type_data_of(ctor, self.mod)
        if data is not None:
            type_vars = list(data.type_vars)
        else:  # no module: the type variables are those the fields mention, in order
            from kiln.relay.analysis.variables import free_type_vars

            type_vars = list(dict.fromkeys(v for t in ctor.inputs for v in free_type_vars(t)))
        return FuncType(ctor.inputs, TypeCall(ctor.belong_to, type_vars), type_vars)

    def visit_constructor(self, node: Constructor) -> Type:
        return self.constructor_type(node)

    def visit_op(self, node: Op) -> Type:
        raise self.error(node, f"operator {node.name} is used as a value; call it instead")

    def visit_match(self, node: Match) -> Type:
        data_type = self.visit(node.data)
        if not node.clauses:
            raise self.error(node, "a match needs at least one clause")
        result = None
        for clause in node.clauses:
            self.bind_pattern(clause.lhs, data_type, node)
            rhs = self.visit(clause.rhs)
            result = rhs if result is None else self.unify(result, rhs, node, "the clauses of")
        if node.complete:
            self.check_exhaustive(node)
        return result

    def check_exhaustive(self, node: Match) -> None:
        """A ``match`` (not ``match?``) must handle every value, as TVM's InferType demands."""
        try:
            cases = unmatched_cases(node, self.mod)
        except TVMError:  # constructors without a module defining their type: cannot tell
            return
        if cases:
            shown = "; ".join(f"case {i}: {case!r}" for i, case in enumerate(cases))
            raise self.error(node, f"match expression does not handle the following cases: "
                                   f"{shown} (write `match?` / Match(..., complete=False) "
                                   "for a partial match)")

    def bind_pattern(self, pattern: Any, expected: Type, node: Match) -> None:
        if isinstance(pattern, PatternWildcard):
            return
        if isinstance(pattern, PatternVar):
            self.unify(self.visit(pattern.var), expected, node, "a pattern variable of")
            return
        if isinstance(pattern, PatternTuple):
            fields = [IncompleteType() for _ in pattern.patterns]
            self.unify(expected, TupleType(fields), node, "a tuple pattern of")
            for sub, field in zip(pattern.patterns, fields):
                self.bind_pattern(sub, field, node)
            return
        if isinstance(pattern, PatternConstructor):
            ctor_type = self.instantiate(self.constructor_type(pattern.constructor))
            if len(ctor_type.arg_types) != len(pattern.patterns):
                raise self.error(node, f"constructor {pattern.constructor.name_hint} has "
                                       f"{len(ctor_type.arg_types)} fields, the pattern "
                                       f"gives {len(pattern.patterns)}")
            self.unify(expected, ctor_type.ret_type, node, "a constructor pattern of")
            for sub, field in zip(pattern.patterns, ctor_type.arg_types):
                self.bind_pattern(sub, field, node)
            return
        raise self.error(node, f"unknown pattern {pattern!r}")

    # -- solving and results ----------------------------------------------------------------
    def solve(self) -> None:
        progress = True
        while self.pending and progress:
            progress = False
            waiting = []
            for relation in self.pending:
                if relation.try_solve(self):
                    progress = True
                else:
                    waiting.append(relation)
            self.pending = waiting

    def finish(self) -> None:
        """Solve what is pending, then write every node's resolved type to checked_type_."""
        with deep_recursion():  # resolving recurses once per level of a nested (tuple) type
            self._finish()

    def _finish(self) -> None:
        self.solve()
        results = []
        unsolved = None
        for node in self.nodes:
            ty, done = self.solver.resolve(self.types[id(node)])
            if not done and (unsolved is None or
                             (isinstance(node, Var) and not isinstance(unsolved, Var))):
                unsolved = node
            results.append((node, ty))
        if unsolved is not None:
            if isinstance(unsolved, Var):
                raise self.error(unsolved, f"cannot infer the type of %{unsolved.name_hint}; "
                                           "annotate it (relay.var(name, shape=..., dtype=...))")
            if self.pending:
                relation = self.pending[0]
                raise self.error(relation.node, "cannot solve the type of this call: the types "
                                                "of its arguments are never determined")
            raise self.error(unsolved, "cannot infer the type of this expression")
        for node, ty in results:
            node.checked_type_ = ty
        for call, holes in self.type_args:
            solved = self.resolved_or_none(holes)
            if solved is not None:
                call._set("type_args", tuple(solved))
        for name, gvar in self.global_vars.items():
            ty, done = self.solver.resolve(self.global_types[name])
            if done:
                gvar.checked_type_ = ty

    def infer(self, expr: RelayExpr, reuse_types: bool = True) -> Type:
        self.reuse_types = reuse_types
        try:
            with deep_recursion():
                return self.visit(expr)
        finally:
            self.reuse_types = True


def _operands_typed(node: RelayExpr) -> bool:
    """Whether a typed node's direct operands are typed too: a pass that gave a rebuilt node
    its old type over new, untyped operands must not stop the incremental walk there."""
    if isinstance(node, Call):
        operands = node.args
    elif isinstance(node, Tuple):
        operands = node.fields
    elif isinstance(node, TupleGetItem):
        operands = [node.tuple_value]
    else:
        return True
    return all(getattr(a, "checked_type_", None) is not None or isinstance(a, Var | GlobalVar)
               for a in operands)


def _already_typed(func: Any) -> bool:
    ty = getattr(func, "checked_type_", None)
    return ty is not None and _is_closed(ty, allow_type_vars=True)


def _global_names_used(func: Function) -> set[str]:
    from kiln.relay.expr_functor import post_order_visit

    names: set[str] = set()
    post_order_visit(func, lambda n: names.add(n.name_hint) if isinstance(n, GlobalVar) else None)
    return names


def infer_module(mod: Any) -> Any:
    """Type every Relay function of ``mod`` not typed yet; returns a shallow copy of ``mod``.

    A typed function that calls an untyped (new or replaced) one is typed again from scratch,
    since the callee's type may have changed.
    """
    relay_funcs = [(g, f) for g, f in mod.functions.items() if isinstance(f, Function)]
    todo = [(gvar, func, True) for gvar, func in relay_funcs if not _already_typed(func)]
    # Polymorphic functions first: their callers then instantiate the solved generic type.
    todo.sort(key=lambda item: not item[1].type_params)
    if todo:
        changed = {gvar.name_hint for gvar, _, _ in todo}
        todo += [(gvar, func, False) for gvar, func in relay_funcs
                 if _already_typed(func) and _global_names_used(func) & changed]
        inferencer = TypeInferencer(mod)
        for gvar, func, reuse in todo:
            if not reuse:
                inferencer.global_types.pop(gvar.name_hint, None)
                func.checked_type_ = None
        for gvar, func, reuse in todo:
            global_type = inferencer.global_type(gvar)
            inferencer.global_vars[gvar.name_hint] = gvar
            func_type = inferencer.infer(func, reuse_types=reuse)
            inferencer.unify(global_type, func_type, func, "the definition of")
        inferencer.finish()
    for gvar, func in mod.functions.items():
        if isinstance(func, Function) and func.checked_type_ is not None:
            gvar.checked_type_ = func.checked_type_
    return mod.copy()


def infer_expr(expr: RelayExpr, mod: Any = None) -> Type:
    """Type ``expr`` on its own (global functions and ADTs come from ``mod``); returns its type.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2, 3))
    >>> infer_expr(relay.Tuple([x, x]))
    (Tensor[(2, 3), float32], Tensor[(2, 3), float32])
    """
    inferencer = TypeInferencer(mod)
    inferencer.infer(expr)
    inferencer.finish()
    return expr.checked_type_
