"""Tensor arrays of the prelude: lists of tensors as ADT values (TVM's tensor-array helpers).

A tensor array is a prelude ``List`` whose elements are a tensor ADT. Two kinds, as in TVM:

- :class:`TensorArrayOps` (``dtype``): the element ADT ``tensor_{dtype}_t`` has one constructor
  per rank, ``tensor0_{dtype}`` … ``tensor6_{dtype}`` over ``Tensor[(?, …), dtype]``, plus
  ``tensor_nil_{dtype}`` for an unwritten slot; :class:`~kiln.relay.prelude.Prelude` registers
  it for TVM's nine dtypes.
- :class:`StaticTensorArrayOps` (``dtype``, ``shape``): one constructor over a fixed-rank shape
  (``?`` dims allowed); names carry the shape, ``static_tensor_{dtype}_{d0}_{d1}_t``. Ops whose
  result has another shape (take, stack, split, concat) register the ADT of that shape too.

Functions (``get_global_var(name)``): ``tensor_array(n)``, ``tensor_array_read(ta, i)``,
``tensor_array_write(ta, i, v)``, ``tensor_array_scatter(ta, indices, values)``,
``tensor_array_split(ta, value, lengths)``, ``tensor_array_concat(ta)``,
``tensor_array_stack(ta)``, ``tensor_array_gather(ta, indices)``, ``tensor_take(t, lo, hi)``,
``tensor_concatenate(a, b)``, ``tensor_expand_dims(t)``, ``tensor_array_unstack_tensor{r}``
(dynamic) / ``tensor_array_unstack`` and ``tensor_get_data`` (static).
:func:`get_tensor_array_shape` reads a static array's element shape back from its type.
"""

from __future__ import annotations

from typing import Any as _AnyType

from kiln.ir.adt import Constructor, TypeData
from kiln.ir.expr import GlobalVar
from kiln.ir.type import Any, GlobalTypeVar, TensorType, TypeCall
from kiln.relay import op
from kiln.relay.adt import Clause, Match, PatternConstructor, PatternVar, PatternWildcard
from kiln.relay.expr import Function, If, Var, const
from kiln.relay.ty import scalar_type
from kiln.runtime.error import TVMError

__all__ = ["TensorArrayOps", "StaticTensorArrayOps", "get_tensor_array_shape", "MAX_RANK",
           "static_tensor_array_name"]

MAX_RANK = 6  # TVM's dynamic tensor ADT has constructors for ranks 0..6


def _int32(name: str) -> Var:
    return Var(name, scalar_type("int32"))


def _int32_vector(name: str, shape=None) -> Var:
    return Var(name, TensorType(list(shape) if shape is not None else [Any()], "int32"))


def _length(tensor: Var):
    """``shape_of(tensor)[0]`` as an int32 scalar (a run-time loop bound)."""
    return op.take(op.shape_of(tensor), const(0))


def _shape_str(shape) -> str:
    return "_".join("any" if isinstance(d, Any) else str(int(d)) for d in shape)


def static_tensor_array_name(canonical: str, dtype: str, shape, batch_dim=None,
                             extra_shapes=None) -> str:
    """TVM's naming of static tensor-array globals: the shape is part of every name."""
    shape_str = _shape_str(shape)
    for key, extra in (extra_shapes or {}).items():
        shape_str += f"_{key}_{_shape_str(extra)}"
    shape_str = shape_str or "scalar"
    if canonical == "tensor_t":
        return f"static_tensor_{dtype}_{shape_str}_t"
    if batch_dim == 1 and canonical not in ("tensor_constructor", "tensor_nil"):
        return f"{canonical}_{dtype}_batch1_{shape_str}"
    return f"{canonical}_{dtype}_{shape_str}"


class _TensorArrayBuilder:
    """What both kinds share: the list-level functions, written once over hooks.

    Subclasses say how a name is spelled (:meth:`get_name`), which element ADT holds tensors of a
    given shape (:meth:`_ops_for`), and define the per-tensor functions (take, concatenate,
    expand_dims, unstack).
    """

    def __init__(self, prelude: _AnyType, dtype: str) -> None:
        self.prelude = prelude
        self.dtype = dtype
        self.list, self.cons, self.nil = prelude.mod.get_type("List")
        self.tensor_type_var: GlobalTypeVar | None = None
        self.batch_dim = None  # static arrays: 1 when a stack holds one item (TVM's batch_dim)

    # -- names and lookups ------------------------------------------------------------------
    def get_name(self, canonical: str) -> str:
        raise NotImplementedError

    def get_global_var(self, canonical: str) -> GlobalVar:
        """The GlobalVar of function ``canonical`` of this array kind."""
        return self.prelude.mod.get_global_var(self.get_name(canonical))

    def get_type(self, canonical: str) -> GlobalTypeVar:
        return self.prelude.mod.get_global_type_var(self.get_name(canonical))

    def get_ctor(self, canonical: str) -> Constructor:
        """The element ADT's constructor ``canonical`` (``tensor_nil``, ``tensor2``, …)."""
        name = self.get_name(canonical)
        for ctor in self.prelude.mod.get_type(self.get_name("tensor_t"))[1:]:
            if ctor.name_hint == name:
                return ctor
        raise TVMError(f"tensor array type {self.get_name('tensor_t')} has no constructor "
                       f"{name!r}")

    def is_cached(self, name: str) -> bool:
        """Whether the module already defines function ``name`` (TVM's ``is_cached``)."""
        return name in self.prelude.mod

    def _global(self, canonical: str, extra_shapes=None) -> GlobalVar:
        """The GlobalVar ``canonical`` names: the module's one if defined, else a new one."""
        name = (self.get_name(canonical) if extra_shapes is None
                else self._name_with(canonical, extra_shapes))
        if name in self.prelude.mod:
            return self.prelude.mod.get_global_var(name)
        return GlobalVar(name)

    def _name_with(self, canonical: str, extra_shapes) -> str:
        return self.get_name(canonical)

    def _define(self, gvar: GlobalVar, params, body, ret_type) -> GlobalVar:
        self.prelude.mod[gvar] = Function(list(params), body, ret_type, [])
        setattr(self.prelude, gvar.name_hint, gvar)
        return gvar

    def _ta_type(self, ops=None):
        return self.list((ops or self).tensor_type_var())

    # -- hooks ------------------------------------------------------------------------------
    def _ops_for(self, shape) -> _TensorArrayBuilder:
        """The builder whose element ADT holds tensors of ``shape`` (its ADT defined)."""
        raise NotImplementedError

    def _stacked_shape(self):
        raise NotImplementedError

    # -- list-level functions ---------------------------------------------------------------
    def define_tensor_array(self) -> None:
        """``tensor_array(n)``: a list of ``n`` unwritten slots (``tensor_nil``)."""
        gvar = self._global("tensor_array")
        n = _int32("x")
        body = If(op.equal(n, const(0)), self.nil(),
                  self.cons(self.get_ctor("tensor_nil")(),
                            gvar(op.subtract(n, const(1)))))
        self._define(gvar, [n], body, self._ta_type())

    def define_tensor_array_read(self) -> None:
        """``tensor_array_read(ta, i)``: the ``i``-th element (``nth``)."""
        if self.is_cached(self.get_name("tensor_array_read")):
            return
        ta, i = Var("tensor_array", self._ta_type()), _int32("x")
        self._define(self._global("tensor_array_read"), [ta, i], self.prelude.nth(ta, i),
                     self.tensor_type_var())

    def define_tensor_array_write(self) -> None:
        """``tensor_array_write(ta, i, v)``: ``ta`` with element ``i`` replaced by ``v``."""
        if self.is_cached(self.get_name("tensor_array_write")):
            return
        ta, i = Var("tensor_array", self._ta_type()), _int32("x")
        v = Var("v", self.tensor_type_var())
        self._define(self._global("tensor_array_write"), [ta, i, v],
                     self.prelude.update(ta, i, v), self._ta_type())

    def define_tensor_array_scatter(self, indices_shape=None, force_update=False) -> None:
        """``tensor_array_scatter(ta, indices, values)``: write ``values[k]`` at ``indices[k]``."""
        extra = {"indices": indices_shape} if indices_shape is not None else None
        gvar = self._global("tensor_array_scatter", extra)
        if hasattr(self.prelude, gvar.name_hint) and not force_update:
            return
        helper = self._global("tensor_array_scatter_helper", extra)
        write, read = (self.get_global_var("tensor_array_write"),
                       self.get_global_var("tensor_array_read"))
        ta, values = Var("ta", self._ta_type()), Var("values_", self._ta_type())
        k, limit = _int32("current"), _int32("limit")
        indices = _int32_vector("indices_", indices_shape)
        step = helper(write(ta, op.take(indices, k), read(values, k)),
                      op.add(k, const(1)), limit, indices, values)
        self._define(helper, [ta, k, limit, indices, values],
                     If(op.equal(k, limit), ta, step), self._ta_type())
        ta, values = Var("tensor_array", self._ta_type()), Var("values", self._ta_type())
        indices = _int32_vector("indices", indices_shape)
        limit = const(int(indices_shape[0])) if indices_shape is not None else _length(indices)
        self._define(gvar, [ta, indices, values], helper(ta, const(0), limit, indices, values),
                     self._ta_type())

    def define_tensor_array_split(self, value_shape=None, lengths_shape=None,
                                  force_update=False) -> None:
        """``tensor_array_split(ta, value, lengths)``: slot ``k`` gets the ``k``-th row range."""
        if self._rank() == 0:
            return
        if self.is_cached(self.get_name("tensor_array_split")) and not force_update:
            return
        out = self._ops_for(self._split_shape())
        out.define_tensor_array_write()
        value_ops = self if value_shape is None else self._ops_for(value_shape)
        value_ops.define_tensor_take()
        write, take = out.get_global_var("tensor_array_write"), \
            value_ops.get_global_var("tensor_take")
        helper = self._global("ta_split_helper")
        value_ty = value_ops.tensor_type_var()
        ta, value = Var("tensor_array", self._ta_type(out)), Var("value1", value_ty)
        offset, k, limit = _int32("offset1"), _int32("current1"), _int32("limit1")
        lengths = _int32_vector("lengths", lengths_shape)
        length_k = op.take(lengths, k)
        rest = helper(ta, value, op.add(offset, length_k), op.add(k, const(1)), limit, lengths)
        body = If(op.equal(k, limit), ta,
                  write(rest, k, take(value, offset, op.add(length_k, offset))))
        self._define(helper, [ta, value, offset, k, limit, lengths], body, self._ta_type(out))
        ta, value = Var("tensor_array", self._ta_type(out)), Var("value", value_ty)
        lengths = _int32_vector("lengths", lengths_shape)
        limit = const(int(lengths_shape[0])) if lengths_shape is not None else _length(lengths)
        self._define(self._global("tensor_array_split"), [ta, value, lengths],
                     helper(ta, value, const(0), const(0), limit, lengths), self._ta_type(out))

    def define_tensor_array_concat(self) -> None:
        """``tensor_array_concat(ta)``: the elements joined along axis 0."""
        if self._rank() == 0 or self.is_cached(self.get_name("tensor_array_concat")):
            return
        out = self._ops_for(self._split_shape())
        out.define_tensor_concatenate()
        join = out.get_global_var("tensor_concatenate")
        gvar = self._global("tensor_array_concat")
        ta, hd, tl = Var("tensor_array", self._ta_type(out)), Var("hd"), Var("tl")
        cons_case = Match(tl, [Clause(PatternConstructor(self.nil), hd),
                               Clause(PatternWildcard(), join(hd, gvar(tl)))], False)
        body = Match(ta, [Clause(PatternConstructor(self.nil), out.get_ctor("tensor_nil")()),
                          Clause(PatternConstructor(self.cons, [PatternVar(hd), PatternVar(tl)]),
                                 cons_case)], False)
        self._define(gvar, [ta], body, out.tensor_type_var())

    def define_tensor_array_stack(self) -> None:
        """``tensor_array_stack(ta)``: the elements stacked on a new leading axis."""
        out = self._ops_for(self._stacked_shape())
        out.define_tensor_concatenate()
        ta = Var("tensor_array", self._ta_type())
        grown = self.prelude.map(self.get_global_var("tensor_expand_dims"), ta)
        if self.batch_dim == 1:
            body = self.prelude.id(self.prelude.hd(grown))
        else:
            body = self.prelude.foldl(out.get_global_var("tensor_concatenate"),
                                      self.prelude.hd(grown), self.prelude.tl(grown))
        self._define(self._global("tensor_array_stack"), [ta], body, out.tensor_type_var())

    def define_tensor_array_gather(self) -> None:
        """``tensor_array_gather(ta, indices)``: the elements at ``indices``, stacked."""
        out = self._ops_for(self._stacked_shape())
        helper = self._global("tensor_array_gather_helper")
        stack, read = (self.get_global_var("tensor_array_stack"),
                       self.get_global_var("tensor_array_read"))
        ta, acc = Var("ta", self._ta_type()), Var("accu", self._ta_type())
        k, limit, indices = _int32("current"), _int32("limit"), _int32_vector("indices_")
        prev = op.subtract(k, const(1))
        body = If(op.equal(k, const(0)), stack(acc),
                  helper(ta, self.cons(read(ta, op.take(indices, prev)), acc), prev, limit,
                         indices))
        self._define(helper, [ta, acc, k, limit, indices], body, out.tensor_type_var())
        ta, indices = Var("tensor_array", self._ta_type()), _int32_vector("indices")
        limit = _length(indices)
        self._define(self._global("tensor_array_gather"), [ta, indices],
                     helper(ta, self.nil(), limit, limit, indices), out.tensor_type_var())

    # -- shared per-tensor builders ---------------------------------------------------------
    def _split_shape(self):
        return [Any()] + list(self._shape_of_rank()[1:])

    def _unstack_helper(self, helper: GlobalVar, tensor_ty: TensorType, element_ctor,
                        element_ta_type) -> GlobalVar:
        """``helper(i, up, t)``: ``[element_ctor(t[i]), …, element_ctor(t[up-1])]``."""
        i, up, t = _int32("i"), _int32("up"), Var("t", tensor_ty)
        body = If(op.equal(i, up), self.nil(),
                  self.cons(element_ctor(op.take(t, i, axis=0)),
                            helper(op.add(i, const(1)), up, t)))
        return self._define(helper, [i, up, t], body, element_ta_type)

    def _rank(self) -> int:
        return len(self._shape_of_rank())

    def _shape_of_rank(self):
        raise NotImplementedError


class TensorArrayOps(_TensorArrayBuilder):
    """Tensor-array functions over the rank-polymorphic ADT ``tensor_{dtype}_t``."""

    def get_name(self, canonical: str) -> str:
        return f"tensor_{self.dtype}_t" if canonical == "tensor_t" else f"{canonical}_{self.dtype}"

    def _ctor(self, rank: int) -> Constructor:
        return self.get_ctor(f"tensor{rank}")

    def _ops_for(self, shape) -> TensorArrayOps:
        return self  # one ADT holds every rank

    def _stacked_shape(self):
        return []

    def _shape_of_rank(self):
        return [Any()]  # every list function applies; ranks are matched at run time

    def _rank_cases(self, ranks, body_of):
        """One clause per rank in ``ranks``: ``tensor{r}(t) => body_of(r, t)``."""
        clauses = []
        for rank in ranks:
            t = Var(f"t{rank}")
            clauses.append(Clause(PatternConstructor(self._ctor(rank), [PatternVar(t)]),
                                  body_of(rank, t)))
        return clauses

    def define_tensor_adt(self) -> None:
        """``tensor_{dtype}_t``: ``tensor_nil`` and one constructor per rank 0..6."""
        name = self.get_name("tensor_t")
        if name in self.prelude.mod:
            self.tensor_type_var = self.prelude.mod.get_global_type_var(name)
            return
        self.tensor_type_var = gtv = GlobalTypeVar(name)
        ctors = [Constructor(self.get_name("tensor_nil"), [], gtv)]
        ctors += [Constructor(self.get_name(f"tensor{r}"), [TensorType([Any()] * r, self.dtype)],
                              gtv) for r in range(MAX_RANK + 1)]
        self.prelude.mod[gtv] = TypeData(gtv, [], ctors)

    def define_tensor_take(self) -> None:
        """``tensor_take(t, lower, upper)``: rows ``lower:upper`` of a rank >= 1 tensor."""
        if self.is_cached(self.get_name("tensor_take")):
            return
        t, lower, upper = Var("tensor", self.tensor_type_var()), _int32("lower"), _int32("upper")
        rows = op.arange(lower, upper, dtype="int32")
        cases = self._rank_cases(range(1, MAX_RANK + 1),
                                 lambda r, v: self._ctor(r)(op.take(v, rows, axis=0)))
        self._define(self._global("tensor_take"), [t, lower, upper], Match(t, cases, False),
                     self.tensor_type_var())

    def define_tensor_expand_dims(self) -> None:
        """``tensor_expand_dims(t)``: a new leading axis of length 1 (rank r -> r + 1)."""
        x = Var("x", self.tensor_type_var())
        cases = self._rank_cases(range(MAX_RANK),
                                 lambda r, v: self._ctor(r + 1)(op.expand_dims(v, 0, 1)))
        self._define(self._global("tensor_expand_dims"), [x], Match(x, cases, False),
                     self.tensor_type_var())

    def define_tensor_concatenate(self) -> None:
        """``tensor_concatenate(a, b)``: two tensors of one rank joined along axis 0."""
        if self.is_cached(self.get_name("tensor_concatenate")):
            return
        x, y = Var("x", self.tensor_type_var()), Var("y", self.tensor_type_var())

        def join(rank, a):
            b = Var(f"t{rank}_b")
            return Match(y, [Clause(PatternConstructor(self._ctor(rank), [PatternVar(b)]),
                                    self._ctor(rank)(op.concatenate([a, b], axis=0)))], False)

        self._define(self._global("tensor_concatenate"), [x, y],
                     Match(x, self._rank_cases(range(1, MAX_RANK + 1), join), False),
                     self.tensor_type_var())

    define_tensor_concat = define_tensor_concatenate  # TVM's method name for the dynamic kind

    def define_tensor_array_unstack(self, rank: int) -> None:
        """``tensor_array_unstack_tensor{rank}(t)``: the rows of ``t`` as a tensor array."""
        tensor_ty = TensorType([Any()] * rank, self.dtype)
        helper = self._unstack_helper(
            self._global(f"tensor_array_unstack_tensor{rank}_helper"), tensor_ty,
            self._ctor(rank - 1), self._ta_type())
        t = Var("tensor", tensor_ty)
        self._define(self._global(f"tensor_array_unstack_tensor{rank}"), [t],
                     helper(const(0), _length(t), t), self._ta_type())

    def register(self) -> None:
        """Define the ADT and every function for this dtype."""
        self.define_tensor_adt()
        self.define_tensor_take()
        self.define_tensor_expand_dims()
        self.define_tensor_concatenate()
        self.define_tensor_array()
        self.define_tensor_array_read()
        self.define_tensor_array_write()
        for rank in range(1, MAX_RANK + 1):
            self.define_tensor_array_unstack(rank)
        self.define_tensor_array_scatter()
        self.define_tensor_array_split()
        self.define_tensor_array_concat()
        self.define_tensor_array_stack()
        self.define_tensor_array_gather()


class StaticTensorArrayOps(_TensorArrayBuilder):
    """Tensor-array functions over the fixed-shape ADT ``static_tensor_{dtype}_{shape}_t``."""

    def __init__(self, prelude: _AnyType, dtype: str, shape, batch_dim=None) -> None:
        super().__init__(prelude, dtype)
        self.shape = list(shape)
        self.batch_dim = batch_dim

    def get_name(self, canonical: str, extra_shapes=None) -> str:
        return static_tensor_array_name(canonical, self.dtype, self.shape, self.batch_dim,
                                        extra_shapes)

    def _name_with(self, canonical: str, extra_shapes) -> str:
        return self.get_name(canonical, extra_shapes)

    def get_global_var(self, canonical: str) -> GlobalVar:
        return self.prelude.get_global_var_static(canonical, self.dtype, self.shape,
                                                  self.batch_dim)

    def get_type(self, canonical: str) -> GlobalTypeVar:
        return self.prelude.get_type_static(canonical, self.dtype, self.shape)

    def get_ctor(self, canonical: str) -> Constructor:
        return self.prelude.get_ctor_static("tensor_t", canonical, self.dtype, self.shape)

    def _shape_of_rank(self):
        return self.shape

    def _new_axis(self):
        return self.batch_dim if self.batch_dim == 1 else Any()

    def _stacked_shape(self):
        return [self._new_axis()] + self.shape

    def _ops_for(self, shape) -> StaticTensorArrayOps:
        ops = StaticTensorArrayOps(self.prelude, self.dtype, shape, self.batch_dim)
        ops.define_tensor_adt()
        return ops

    def define_tensor_adt(self) -> None:
        """The element ADT: ``tensor_nil`` and ``tensor_constructor(Tensor[shape, dtype])``."""
        name = self.get_name("tensor_t")
        if name in self.prelude.mod:
            self.tensor_type_var = self.prelude.mod.get_global_type_var(name)
            return
        self.tensor_type_var = gtv = GlobalTypeVar(name)
        self.prelude.mod[gtv] = TypeData(gtv, [], [
            Constructor(self.get_name("tensor_nil"), [], gtv),
            Constructor(self.get_name("tensor_constructor"),
                        [TensorType(self.shape, self.dtype)], gtv)])

    def _unwrap(self, x: Var, body_of):
        """``match x { tensor_constructor(t) => body_of(t) }``."""
        t = Var("t")
        return Match(x, [Clause(PatternConstructor(self.get_ctor("tensor_constructor"),
                                                   [PatternVar(t)]), body_of(t))], False)

    def define_tensor_take(self) -> None:
        """``tensor_take(t, lower, upper)``: rows ``lower:upper`` (first dim becomes ``?``)."""
        if self._rank() == 0 or self.is_cached(self.get_name("tensor_take")):
            return
        out = self._ops_for(self._split_shape())
        t, lower, upper = Var("tensor", self.tensor_type_var()), _int32("lower"), _int32("upper")
        rows = op.arange(lower, upper, dtype="int32")
        body = self._unwrap(t, lambda v: out.get_ctor("tensor_constructor")(
            op.take(v, rows, axis=0)))
        self._define(self._global("tensor_take"), [t, lower, upper], body,
                     out.tensor_type_var())

    def define_tensor_concatenate(self) -> None:
        """``tensor_concatenate(a, b)``: joined along axis 0 (first dim becomes ``?``)."""
        if self._rank() == 0 or self.is_cached(self.get_name("tensor_concatenate")):
            return
        out = self._ops_for(self._split_shape())
        x, y = Var("x", self.tensor_type_var()), Var("y", self.tensor_type_var())
        body = self._unwrap(x, lambda a: self._unwrap(y, lambda b: out.get_ctor(
            "tensor_constructor")(op.concatenate([a, b], axis=0))))
        self._define(self._global("tensor_concatenate"), [x, y], body, out.tensor_type_var())

    def define_tensor_expand_dims(self) -> None:
        """``tensor_expand_dims(t)``: a new leading axis (``?``, or 1 when ``batch_dim == 1``)."""
        out = self._ops_for(self._stacked_shape())
        x = Var("x", self.tensor_type_var())
        body = self._unwrap(x, lambda v: out.get_ctor("tensor_constructor")(
            op.expand_dims(v, 0, 1)))
        self._define(self._global("tensor_expand_dims"), [x], body, out.tensor_type_var())

    def define_tensor_array_unstack(self) -> None:
        """``tensor_array_unstack(t)``: the rows of a ``Tensor[shape]`` as a tensor array."""
        if self._rank() == 0:
            return
        out = self._ops_for(self.shape[1:])
        tensor_ty = TensorType(self.shape, self.dtype)
        helper = self._unstack_helper(self._global("tensor_array_unstack_helper"), tensor_ty,
                                      out.get_ctor("tensor_constructor"), self._ta_type(out))
        t = Var("tensor", tensor_ty)
        self._define(self._global("tensor_array_unstack"), [t],
                     helper(const(0), _length(t), t), self._ta_type(out))

    def define_tensor_get_data(self) -> None:
        """``tensor_get_data(t)``: the ``Tensor[shape, dtype]`` inside an element."""
        t = Var("tensor", self.tensor_type_var())
        self._define(self._global("tensor_get_data"), [t], self._unwrap(t, lambda v: v),
                     TensorType(self.shape, self.dtype))

    def register(self) -> None:
        """Define the ADT and every function for this dtype and shape."""
        self.define_tensor_adt()
        self.define_tensor_take()
        self.define_tensor_concatenate()
        self.define_tensor_expand_dims()
        self.define_tensor_array()
        self.define_tensor_array_read()
        self.define_tensor_array_write()
        self.define_tensor_array_unstack()
        self.define_tensor_array_scatter()
        self.define_tensor_array_split()
        self.define_tensor_array_concat()
        self.define_tensor_array_stack()
        self.define_tensor_array_gather()
        self.define_tensor_get_data()


def get_tensor_array_shape(expr, dtype: str, prelude: _AnyType):
    """The element shape of a static tensor array ``expr`` (``?`` dims as ``Any()``).

    ``None`` when ``expr`` is a dynamic (rank-polymorphic) tensor array.
    """
    from kiln.relay.analysis import free_vars
    from kiln.relay.transform import InferType

    mod = prelude.mod
    mod["main"] = Function(free_vars(expr), expr)
    mod = InferType()(mod)
    ty = mod["main"].body.checked_type
    if not (isinstance(ty, TypeCall) and ty.args and isinstance(ty.args[0], TypeCall)):
        raise TVMError(f"get_tensor_array_shape expects a tensor array (List of a tensor ADT), "
                       f"got an expression of type {ty}")
    name = ty.args[0].func.name_hint
    prefix = f"static_tensor_{dtype}_"
    if not name.startswith(prefix):
        return None
    dims = name[len(prefix):-len("_t")]
    if dims == "scalar":
        return ()
    return tuple(Any() if d in ("any", "?") else int(d) for d in dims.split("_"))
