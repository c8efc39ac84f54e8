"""Structural and control primitives: tuples, indexing, shapes, switch, partial, grad's
environments, ``array_map``/``array_reduce``, ``raise_``.

Those with ``vm=`` are FinalVM instructions (the cut list of SplitGraph); the others are linear
when they compute a scalar or an array, and run as one Python call in FinalVM otherwise.
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.jit.abstract import (
    ANY,
    BOTTOM,
    Abstract,
    Array,
    Env,
    Func,
    NoneT,
    PartialFn,
    PrimFn,
    Scalar,
    Tuple,
    is_tensor,
    join,
)
from kiln.jit.errors import JitError
from kiln.jit.primitives import (
    Primitive,
    _axes,
    _const_value,
    _fail,
    _relay_sum_to,
    sum_to_shape,
    zeros_like,
)


def _infer_make_tuple(node, *xs: Abstract) -> Abstract:
    return Tuple(xs)


make_tuple = Primitive("make_tuple", _infer_make_tuple, lambda *xs: tuple(xs), vm="tuple")


def _index(t: Abstract, i: Abstract, prim: str, node) -> int:
    k = _const_value(i, prim, node, "a tuple index")
    n = len(t.elements)
    if not isinstance(k, (int, np.integer)) or not -n <= k < n:
        _fail(prim, node, f"tuple index {k!r} out of range for a tuple of {n} elements")
    return int(k) % n


def _infer_tuple_getitem(node, t: Abstract, i: Abstract) -> Abstract:
    if not isinstance(t, Tuple):
        _fail("tuple_getitem", node, f"expected a tuple, got {t}")
    return t.elements[_index(t, i, "tuple_getitem", node)]


tuple_getitem = Primitive("tuple_getitem", _infer_tuple_getitem, lambda t, i: t[i],
                          vm="tuple_getitem")


def _norm_index(idx, shape, node):
    """Check a static NumPy basic index against ``shape``; the result shape."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if len(idx) > len(shape):
        _fail("getitem", node, f"too many indices ({len(idx)}) for an array of shape {shape}")
    try:
        return np.empty(shape, dtype=np.bool_)[idx].shape if np.prod(shape) < 2 ** 22 else \
            np.broadcast_to(np.empty((), np.bool_), shape)[idx].shape
    except (IndexError, TypeError) as err:
        _fail("getitem", node, f"index {idx!r} on shape {shape}: {err}")


def _infer_array_getitem(node, x: Abstract, idx: Abstract) -> Abstract:
    if not isinstance(idx, Scalar) or idx.value is ANY:
        _fail("getitem", node, "array indices must be constants (ints and slices with constant "
              "bounds); dynamic indexing is not supported")
    return Array(x.dtype, _norm_index(idx.value, x.shape, node))


def _relay_array_getitem(args, ins, out):
    shape = ins[0].shape
    idx = ins[1].value if isinstance(ins[1].value, tuple) else (ins[1].value,)
    begin, end, strides = [], [], []
    for d, ix in zip(shape, idx + (slice(None),) * (len(shape) - len(idx))):
        if isinstance(ix, slice):
            b, e, s = ix.indices(d)
            if s < 0 and e < 0:
                e = -d - 1  # strided_slice reads a negative end as counted from the end
            begin, end, strides = begin + [b], end + [e], strides + [s]
        else:
            b = int(ix) % d
            begin, end, strides = begin + [b], end + [b + 1], strides + [1]
    r = relay.strided_slice(args[0], begin, end, strides)
    return relay.reshape(r, out.shape)


array_getitem = Primitive("array_getitem", _infer_array_getitem, lambda x, i: np.asarray(x)[i],
                          relay=_relay_array_getitem)


def _setitem_zeros(dout, like, idx):
    out = np.zeros(np.shape(like), np.asarray(dout).dtype)
    out[idx] = dout
    return out


def _infer_array_getitem_grad(node, dout: Abstract, like: Abstract, idx: Abstract) -> Abstract:
    return Array(dout.dtype, like.shape)


array_getitem_grad = Primitive("array_getitem_grad", _infer_array_getitem_grad, _setitem_zeros)


def _infer_array_take(node, x: Abstract, i: Abstract) -> Abstract:
    """``x[i]`` with an integer ``i`` known only at run time: a row of ``x``."""
    if not isinstance(x, Array) or not x.shape:
        _fail("getitem", node, f"cannot index {x} with a run-time integer")
    if not isinstance(i, Scalar) or not (i.dtype.startswith(("int", "uint"))):
        _fail("getitem", node, f"array indices must be integers, got {i}")
    return Array(x.dtype, x.shape[1:])


def _relay_array_take(args, ins, out):
    return relay.take(args[0], relay.cast(args[1], "int32"), axis=0, mode="wrap")


array_take = Primitive("array_take", _infer_array_take, lambda x, i: np.asarray(x)[i],
                       relay=_relay_array_take)


array_take_grad = Primitive("array_take_grad",
                            lambda node, d, x, i: Array(d.dtype, x.shape), _setitem_zeros)


def _infer_getitem_grad(node, x: Abstract, i: Abstract, dout: Abstract) -> Abstract:
    if isinstance(x, Tuple):
        k = _index(x, i, "getitem", node)
        zeros = zeros_like.infer(node, x)
        return Tuple(zeros.elements[:k] + (dout,) + zeros.elements[k + 1:])
    return Array(dout.dtype, x.shape)


def _getitem_grad(x, i, dout):
    if isinstance(x, tuple):
        z = zeros_like.impl(x)
        return z[:i] + (dout,) + z[i + 1:]
    return _setitem_zeros(dout, x, i)


getitem_grad = Primitive("getitem_grad", _infer_getitem_grad, _getitem_grad)


def _infer_getitem(node, x: Abstract, i: Abstract) -> Abstract:
    if isinstance(x, Tuple):
        return _infer_tuple_getitem(node, x, i)
    if isinstance(x, Array) and isinstance(i, Scalar) and i.value is ANY \
            and i.dtype not in ("index",):
        return _infer_array_take(node, x, i)
    if isinstance(x, Array):
        return _infer_array_getitem(node, x, i)
    _fail("getitem", node, f"{x} is not subscriptable")


getitem = Primitive("getitem", _infer_getitem, lambda x, i: x[i])


def _infer_shape(node, x: Abstract) -> Abstract:
    if isinstance(x, Array):
        return Tuple(Scalar("int64", d) for d in x.shape)
    if isinstance(x, Scalar):
        return Tuple(())
    _fail("shape", node, f"{x} has no shape")


shape = Primitive("shape", _infer_shape, np.shape)


def _infer_ndim(node, x: Abstract) -> Abstract:
    return Scalar("int64", len(x.shape) if isinstance(x, Array) else 0)


ndim = Primitive("ndim", _infer_ndim, np.ndim)


def _infer_len(node, x: Abstract) -> Abstract:
    if isinstance(x, Tuple):
        return Scalar("int64", len(x.elements))
    if isinstance(x, Array) and x.shape:
        return Scalar("int64", x.shape[0])
    _fail("len", node, f"object of type {x} has no len()")


len_ = Primitive("len", _infer_len, len)


def _infer_switch(node, c: Abstract, a: Abstract, b: Abstract) -> Abstract:
    if not isinstance(c, Scalar):
        _fail("switch", node, f"the condition must be a scalar, got {c}")
    if c.value is not ANY:
        return a if c.value else b
    return join(a, b, "the value of an if/else")


switch = Primitive("switch", _infer_switch, lambda c, a, b: a if c else b, vm="switch")


def _infer_partial(node, f: Abstract, *args: Abstract) -> Abstract:
    if not isinstance(f, Func):
        _fail("partial", node, f"{f} is not a function")
    return Func(PartialFn(o, args) for o in f.options)


partial = Primitive("partial", _infer_partial, vm="partial")


def _infer_raise(node, msg: Abstract) -> Abstract:
    return BOTTOM


def _raise(msg):
    raise AssertionError(msg)


raise_ = Primitive("raise", _infer_raise, _raise, vm="raise")


def _infer_range_continue(node, i, stop, step) -> Abstract:
    for a in (i, stop, step):
        if not isinstance(a, Scalar) or a.dtype not in ("int64", "bool") and \
                not a.dtype.startswith(("int", "uint")):
            _fail("range", node, f"range() arguments must be integers, got {a}")
    return Scalar("bool")


range_continue = Primitive("range_continue", _infer_range_continue,
                           lambda i, stop, step: i < stop if step > 0 else i > stop,
                           py="(({0} < {1}) if {2} > 0 else ({0} > {1}))",
                           relay=lambda a, i, o: relay.where(
                               relay.greater(
                                   a[2], relay.const(0, "int64")),
                               relay.less(a[0], a[1]),
                               relay.greater(a[0], a[1])))


# -- grad's environments -----------------------------------------------------------------------

def _infer_env_getitem(node, env: Abstract, key: Abstract, default: Abstract) -> Abstract:
    return default


def _env_getitem(env, key, default):
    return env.get(key, default)


env_getitem = Primitive("env_getitem", _infer_env_getitem, _env_getitem, vm="env_getitem")


def _infer_env_setitem(node, env: Abstract, key: Abstract, value: Abstract) -> Abstract:
    return Env()


def _env_setitem(env, key, value):
    out = dict(env)
    out[key] = value
    return out


env_setitem = Primitive("env_setitem", _infer_env_setitem, _env_setitem, vm="env_setitem")


# -- array_map / array_reduce (Myia's array primitives) ---------------------------------------

def _scalar_prim(f: Abstract, name: str, node) -> Primitive:
    if isinstance(f, Func) and len(f.options) == 1:
        (opt,) = f.options
        if isinstance(opt, PrimFn) and opt.prim.relay is not None:
            return opt.prim
    _fail(name, node, f"the function must be an elementwise primitive (scalar_add, mul, …), "
          f"got {f}")


def _infer_array_map(node, f: Abstract, *xs: Abstract) -> Abstract:
    prim = _scalar_prim(f, "array_map", node)
    for x in xs:
        if not isinstance(x, Array):
            _fail("array_map", node, f"expected arrays, got {x}")
    if len({x.shape for x in xs}) != 1:
        _fail("array_map", node, "arrays must have the same shape, got "
              + ", ".join(str(x.shape) for x in xs))
    return prim.infer(node, *xs)


def _array_map(f, *xs):
    return f(*xs)


array_map = Primitive("array_map", _infer_array_map, _array_map,
                      relay=lambda a, i, o: i[0].options and
                      next(iter(i[0].options)).prim.relay(a[1:], i[1:], o))


def _infer_array_reduce(node, f: Abstract, x: Abstract, shp: Abstract) -> Abstract:
    prim = _scalar_prim(f, "array_reduce", node)
    if prim.name not in ("scalar_add", "add"):
        _fail("array_reduce", node, f"only scalar_add reductions are supported, got {prim}")
    target = tuple(_const_value(shp, "array_reduce", node, "the result shape"))
    if not isinstance(x, Array):
        _fail("array_reduce", node, f"expected an array, got {x}")
    lead = len(x.shape) - len(target)
    if lead < 0 or any(t not in (1, s) for t, s in zip(target, x.shape[lead:])):
        _fail("array_reduce", node, f"cannot reduce shape {x.shape} to {target}")
    return Array(x.dtype, target)


def _relay_array_reduce(args, ins, out):
    return _relay_sum_to(args[1:2], ins[1:2], out)


array_reduce = Primitive("array_reduce", _infer_array_reduce,
                         lambda f, x, s: sum_to_shape(x, s), relay=_relay_array_reduce)


def _infer_tuple_setitem(node, t: Abstract, i: Abstract, v: Abstract) -> Abstract:
    if not isinstance(t, Tuple):
        _fail("tuple_setitem", node, f"expected a tuple, got {t}")
    k = _index(t, i, "tuple_setitem", node)
    return Tuple(t.elements[:k] + (v,) + t.elements[k + 1:])


tuple_setitem = Primitive("tuple_setitem", _infer_tuple_setitem,
                          lambda t, i, v: t[:i] + (v,) + t[i + 1:])


def _infer_size(node, x: Abstract) -> Abstract:
    return Scalar("int64", int(np.prod(x.shape)) if isinstance(x, Array) else 1)


size = Primitive("size", _infer_size, np.size)


def _infer_axes_inverse(node, axes: Abstract) -> Abstract:
    perm = _const_value(axes, "transpose", node, "axes")
    if perm is None:
        return NoneT()
    inv = tuple(int(i) for i in np.argsort(perm))
    return Tuple(Scalar("int64", v) for v in inv)


axes_inverse = Primitive("axes_inverse", _infer_axes_inverse,
                         lambda a: None if a is None else tuple(np.argsort(a).tolist()))


def _reduced_shape(x: Abstract, axis: Abstract, keepdims: Abstract, node) -> tuple:
    shape = x.shape if isinstance(x, Array) else ()
    axes = _axes(_const_value(axis, "sum", node, "axis"), len(shape), "sum", node)
    return tuple(1 if i in axes else d for i, d in enumerate(shape)), shape


def _infer_reduce_grad(node, dout: Abstract, x: Abstract, axis: Abstract,
                       keepdims: Abstract) -> Abstract:
    """``reduce_grad(dout, x, axis, keepdims)``: a reduction's result spread back to x's shape."""
    _, shape = _reduced_shape(x, axis, keepdims, node)
    return Array(dout.dtype, shape) if isinstance(x, Array) else Scalar(dout.dtype)


def _reduce_grad(dout, x, axis, keepdims):
    shape = np.shape(x)
    axes = tuple(range(len(shape))) if axis is None else \
        tuple(a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,)))
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return np.broadcast_to(np.reshape(dout, kept), shape).copy()


def _relay_reduce_grad(args, ins, out):
    kept, shape = _reduced_shape(ins[1], ins[2], ins[3], None)
    if not shape:
        return relay.reshape(args[0], ())
    return relay.broadcast_to(relay.reshape(args[0], kept), shape)


reduce_grad = Primitive("reduce_grad", _infer_reduce_grad, _reduce_grad,
                        relay=_relay_reduce_grad)


def is_vm_prim(prim: Primitive) -> bool:
    """Whether FinalVM runs ``prim`` as its own instruction."""
    return prim.vm is not None


def check_callable(f: Abstract, node) -> None:
    """Raise a JitError naming the call when ``f`` is not a function."""
    if not isinstance(f, Func):
        raise JitError(f"calling a value of type {f}, which is not a function",
                       getattr(node, "loc", None))


def _infer_grad_seed(node, value: Abstract, name: Abstract) -> Abstract:
    """``1`` of the output's type; grad is defined for scalar outputs only (as in JAX)."""
    ok = (isinstance(value, Scalar) and is_tensor(value)) or (
        isinstance(value, Array) and int(np.prod(value.shape)) == 1)
    if not ok:
        _fail("grad", node, f"{name.value}() must return a scalar to be differentiated, it "
              f"returns {value} (use has_aux=True to return more)")
    if value.dtype in ("bool", "int64") or value.dtype.startswith(("int", "uint")):
        _fail("grad", node, f"{name.value}() returns an integer ({value}); grad needs a "
              "floating-point output")
    return value


def _relay_grad_seed(args, ins, out):
    return relay.full(relay.const(1, out.dtype), out.shape if isinstance(out, Array) else (),
                      out.dtype)


grad_seed = Primitive("grad_seed", _infer_grad_seed,
                      lambda v, name: np.ones_like(v) if isinstance(v, np.ndarray) else 1.0,
                      py="1.0", relay=_relay_grad_seed)

