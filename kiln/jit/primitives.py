"""The primitives of kiln.jit programs: how each is typed, run, lowered to Relay and
differentiated.

A :class:`Primitive` carries, side by side: ``infer`` (abstract arguments -> abstract result,
raising :class:`JitError` on a bad dtype/shape), ``impl`` (the NumPy/Python evaluation),
``py`` (a Python expression template for scalar segments), ``relay`` (the Relay expression for
array segments) and ``vm`` (set for control-flow primitives FinalVM executes itself). Bprops
live in ``kiln/jit/bprops.py`` as plain Python functions that are parsed like user code.

The user-visible names (``scalar_add``, ``array_map``, ``array_reduce``, ``asscalar`` …) are
primitives too, and calling one outside ``myia`` evaluates ``impl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln import relay
from kiln.jit.abstract import (
    ANY,
    Abstract,
    Array,
    Env,
    Func,
    NoneT,
    Scalar,
    Tuple,
    is_tensor,
    shape_of,
)
from kiln.jit.errors import JitError

PRIMITIVES: dict[str, Primitive] = {}


class Primitive:
    """One primitive operation (see the module docstring for the fields)."""

    def __init__(self, name: str, infer: Callable, impl: Callable | None = None,
                 py: str | None = None, relay: Callable | None = None, vm: str | None = None,
                 nparams: int | None = None):
        self.name, self.infer, self.impl = name, infer, impl
        self.py, self.relay, self.vm, self.nparams = py, relay, vm, nparams
        PRIMITIVES[name] = self

    def __call__(self, *args: Any) -> Any:
        if self.impl is None:
            raise JitError(f"{self.name} can only be used inside a function compiled by "
                           "kiln.jit.myia")
        return self.impl(*args)

    def __repr__(self) -> str:
        return self.name

    def linear(self, abstract: Abstract) -> bool:
        """Whether an application producing ``abstract`` belongs to a linear segment."""
        return self.vm is None and (is_tensor(abstract) or
                                    (isinstance(abstract, Tuple) and self.name == "shape"))


def _fail(prim: str, node, msg: str):
    raise JitError(f"{prim}: {msg}", getattr(node, "loc", None))


# -- typing helpers ----------------------------------------------------------------------------

def _dummy(a: Abstract, prim: str, node):
    if isinstance(a, Array):
        return np.zeros((0,), a.dtype)
    if isinstance(a, Scalar) and a.dtype in ("int64", "float64", "bool"):
        return {"int64": 1, "float64": 1.0, "bool": True}[a.dtype]
    if isinstance(a, Scalar) and a.dtype not in ("str", "dtype"):
        return np.dtype(a.dtype).type(1)
    _fail(prim, node, f"expected a number or an array, got {a}")


def _broadcast(prim: str, node, *args: Abstract) -> tuple:
    shapes = [a.shape for a in args if isinstance(a, Array)]
    try:
        return np.broadcast_shapes(*shapes) if shapes else ()
    except ValueError:
        _fail(prim, node, "operands could not be broadcast together with shapes "
              + " ".join(str(s) for s in shapes))


def _result(dtype: str, shape: tuple, args) -> Abstract:
    if any(isinstance(a, Array) for a in args):
        return Array(dtype, shape)
    return Scalar(dtype)


def elementwise(npfn: Callable, name: str, force: str | None = None) -> Callable:
    """An infer rule for an elementwise NumPy ufunc (dtype by NumPy's promotion rules)."""

    def infer(node, *args: Abstract) -> Abstract:
        dummies = [_dummy(a, name, node) for a in args]
        with np.errstate(all="ignore"):
            out = npfn(*dummies)
        dtype = force or str(np.asarray(out).dtype)
        return _result(dtype, _broadcast(name, node, *args), args)

    return infer


def _promote_for_relay(args, ins, out_dtype):
    return [relay.cast(a, out_dtype) if t.dtype != out_dtype else a for a, t in zip(args, ins)]


def _relay_elementwise(opname: str, compare: bool = False) -> Callable:
    def convert(args, ins, out):
        if compare:
            common = str(np.result_type(*[_dummy(t, opname, None) for t in ins]))
            args = _promote_for_relay(args, ins, common)
        else:
            args = _promote_for_relay(args, ins, out.dtype)
        return getattr(relay, opname)(*args)
    return convert


def _binop(name: str, npfn: Callable, pyop: str, relay_op: str, compare: bool = False):
    return Primitive(name, elementwise(npfn, name, "bool" if compare else None), npfn,
                     py=f"({{0}} {pyop} {{1}})", relay=_relay_elementwise(relay_op, compare),
                     nparams=2)


scalar_add = _binop("scalar_add", np.add, "+", "add")
add = _binop("add", np.add, "+", "add")
sub = _binop("sub", np.subtract, "-", "subtract")
mul = _binop("mul", np.multiply, "*", "multiply")
truediv = _binop("truediv", np.true_divide, "/", "divide")
floordiv = _binop("floordiv", np.floor_divide, "//", "floor_divide")
mod = _binop("mod", np.mod, "%", "floor_mod")
pow_ = _binop("pow", np.power, "**", "power")
lt = _binop("lt", np.less, "<", "less", compare=True)
gt = _binop("gt", np.greater, ">", "greater", compare=True)
le = _binop("le", np.less_equal, "<=", "less_equal", compare=True)
ge = _binop("ge", np.greater_equal, ">=", "greater_equal", compare=True)
eq = _binop("eq", np.equal, "==", "equal", compare=True)
ne = _binop("ne", np.not_equal, "!=", "not_equal", compare=True)
maximum = Primitive("maximum", elementwise(np.maximum, "maximum"), np.maximum,
                    py="max({0}, {1})", relay=_relay_elementwise("maximum"), nparams=2)
minimum = Primitive("minimum", elementwise(np.minimum, "minimum"), np.minimum,
                    py="min({0}, {1})", relay=_relay_elementwise("minimum"), nparams=2)


def _float_unary(name: str, npfn: Callable, mathfn: str, relay_op: str):
    def infer(node, x: Abstract) -> Abstract:
        d = _dummy(x, name, node)
        dtype = str(np.asarray(npfn(np.asarray(d))).dtype)
        return _result(dtype, _broadcast(name, node, x), [x])

    def convert(args, ins, out):
        return getattr(relay, relay_op)(*_promote_for_relay(args, ins, out.dtype))

    return Primitive(name, infer, npfn, py=mathfn + "({0})", relay=convert, nparams=1)


exp = _float_unary("exp", np.exp, "math.exp", "exp")
log = _float_unary("log", np.log, "math.log", "log")
tanh = _float_unary("tanh", np.tanh, "math.tanh", "tanh")
sin = _float_unary("sin", np.sin, "math.sin", "sin")
cos = _float_unary("cos", np.cos, "math.cos", "cos")
sqrt = _float_unary("sqrt", np.sqrt, "math.sqrt", "sqrt")
neg = Primitive("neg", elementwise(np.negative, "neg"), np.negative, py="(-{0})",
                relay=_relay_elementwise("negative"), nparams=1)
abs_ = Primitive("abs", elementwise(np.abs, "abs"), np.abs, py="abs({0})",
                 relay=_relay_elementwise("abs"), nparams=1)
sign = Primitive("sign", elementwise(np.sign, "sign"), np.sign,
                 py="((0 < {0}) - ({0} < 0))", relay=_relay_elementwise("sign"))
not_ = Primitive("not", elementwise(np.logical_not, "not", "bool"), np.logical_not,
                 py="(not {0})", relay=lambda a, i, o: relay.logical_not(
                     relay.cast(a[0], "bool")))


def _infer_truth(node, x: Abstract) -> Abstract:
    if isinstance(x, Array) and int(np.prod(x.shape)) != 1:
        _fail("bool", node, f"the truth value of an array of shape {x.shape} is ambiguous "
              "(use .any() / .all() or compare a scalar)")
    if not is_tensor(x) and not isinstance(x, NoneT):
        _fail("bool", node, f"cannot test the truth of {x}")
    return Scalar("bool")


truth = Primitive("truth", _infer_truth, lambda x: bool(x), py="bool({0})",
                  relay=lambda a, i, o: relay.not_equal(
                      relay.reshape(a[0], ()),
                      relay.const(0, i[0].dtype)))


def _cast_infer(dtype: str):
    def infer(node, x: Abstract) -> Abstract:
        if not is_tensor(x):
            _fail(dtype, node, f"cannot convert {x}")
        if isinstance(x, Array) and x.shape != ():
            _fail(dtype, node, f"only size-1 arrays convert to Python scalars, got {x}")
        return Scalar(dtype)
    return infer


to_float = Primitive("float", _cast_infer("float64"), float, py="float({0})",
                     relay=lambda a, i, o: relay.cast(a[0], "float64"))
to_int = Primitive("int", _cast_infer("int64"), int, py="int({0})",
                   relay=lambda a, i, o: relay.cast(a[0], "int64"))


def _infer_asscalar(node, x: Abstract) -> Abstract:
    if isinstance(x, Scalar):
        return x
    if not isinstance(x, Array) or int(np.prod(x.shape)) != 1:
        _fail("asscalar", node, f"expected an array of one element, got {x}")
    return Scalar(x.dtype)


asscalar = Primitive("asscalar", _infer_asscalar, lambda x: np.asarray(x).reshape(()).item(),
                     py="{0}", relay=lambda a, i, o: relay.reshape(a[0], ()))


def _infer_scalar_to_array(node, x: Abstract) -> Abstract:
    if isinstance(x, Array):
        return x
    return Array(x.dtype, ())


scalar_to_array = Primitive("scalar_to_array", _infer_scalar_to_array, np.asarray,
                            relay=lambda a, i, o: a[0])


def _infer_astype(node, x: Abstract, dtype: Abstract) -> Abstract:
    if not isinstance(dtype, Scalar) or dtype.value is ANY:
        _fail("astype", node, "the dtype must be a constant")
    name = np.dtype(dtype.value).name
    return Array(name, x.shape) if isinstance(x, Array) else Scalar(name)


astype = Primitive("astype", _infer_astype, lambda x, d: np.asarray(x).astype(d),
                   relay=lambda a, i, o: relay.cast(a[0], o.dtype))


# -- linear algebra and shapes ------------------------------------------------------------------

def _infer_matmul(node, a: Abstract, b: Abstract) -> Abstract:
    if not (isinstance(a, Array) and isinstance(b, Array)):
        _fail("matmul", node, f"both operands must be arrays, got {a} and {b}")
    if a.dtype != b.dtype:
        _fail("matmul", node, f"dtypes differ: {a.dtype} and {b.dtype}")
    sa, sb = a.shape, b.shape
    if len(sa) not in (1, 2) or len(sb) not in (1, 2):
        _fail("matmul", node, f"only 1-D and 2-D operands are supported, got {sa} @ {sb}")
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if ka != kb:
        _fail("matmul", node, f"shapes {sa} and {sb} not aligned: {ka} (dim {len(sa) - 1}) "
              f"!= {kb}")
    out = sa[:-1] + sb[1:] if len(sb) == 2 else sa[:-1]
    return Array(a.dtype, out)


def _transposed(expr):
    """The operand of a 2-D ``transpose`` call, or None."""
    op = getattr(expr, "op", None)
    if getattr(op, "name", None) == "transpose":
        axes = getattr(expr.attrs, "axes", None)
        if axes is None or [int(a) for a in axes] == [1, 0]:
            return expr.args[0]
    return None


def _relay_matmul(args, ins, out):
    a, b = args
    sa, sb = ins[0].shape, ins[1].shape
    if len(sa) == 1:
        a = relay.reshape(a, (1, sa[0]))
    if len(sb) == 1:
        b = relay.reshape(b, (sb[0], 1))
    # a transposed 2-D operand (grad's ``x.T @ g``, ``g @ w.T``) becomes the matmul's flag:
    # the packed matmul reads it in place where a transpose kernel would copy it every run
    inner_a = _transposed(a) if len(sa) == 2 else None
    inner_b = _transposed(b) if len(sb) == 2 else None
    ta, tb = inner_a is not None, inner_b is not None
    a, b = (inner_a if ta else a), (inner_b if tb else b)
    r = relay.nn.dense(a, b) if tb and not ta else \
        relay.nn.matmul(a, b, transpose_a=ta, transpose_b=tb)
    return relay.reshape(r, out.shape) if len(sa) == 1 or len(sb) == 1 else r


matmul = Primitive("matmul", _infer_matmul, np.matmul, relay=_relay_matmul)


def _const_value(a: Abstract, prim: str, node, what: str) -> Any:
    if isinstance(a, NoneT):
        return None
    if isinstance(a, Scalar) and a.value is not ANY:
        return a.value
    if isinstance(a, Tuple):
        return tuple(_const_value(e, prim, node, what) for e in a.elements)
    _fail(prim, node, f"{what} must be a constant known at compile time, got {a}")


def _axes(axis: Any, ndim: int, prim: str, node) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for ax in axes:
        if not -ndim <= ax < max(ndim, 1):
            _fail(prim, node, f"axis {ax} is out of bounds for an array of dimension {ndim}")
        out.append(ax % max(ndim, 1))
    return tuple(sorted(out))


def _reduce(name: str, npfn: Callable, relay_op: str, mean: bool = False):
    def infer(node, x: Abstract, axis: Abstract, keepdims: Abstract) -> Abstract:
        if not is_tensor(x):
            _fail(name, node, f"expected an array, got {x}")
        shape = x.shape if isinstance(x, Array) else ()
        axes = _axes(_const_value(axis, name, node, "axis"), len(shape), name, node)
        keep = bool(_const_value(keepdims, name, node, "keepdims"))
        out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
            tuple(d for i, d in enumerate(shape) if i not in axes)
        d = np.asarray(npfn(np.zeros((1,), x.dtype))).dtype
        return Array(str(d), out)

    def convert(args, ins, out):
        shape = ins[0].shape if isinstance(ins[0], Array) else ()
        if not shape:
            return relay.cast(args[0], out.dtype)
        axes = _axes(_const_value(ins[1], name, None, "axis"), len(shape), name, None)
        keep = bool(_const_value(ins[2], name, None, "keepdims"))
        x = relay.cast(args[0], out.dtype) if ins[0].dtype != out.dtype else args[0]
        return getattr(relay, relay_op)(x, axis=list(axes), keepdims=keep)

    return Primitive(name, infer, lambda x, axis=None, keepdims=False:
                     np.asarray(npfn(x, axis=axis, keepdims=keepdims)), relay=convert)


sum_ = _reduce("sum", np.sum, "sum")
mean = _reduce("mean", np.mean, "mean")
amax = _reduce("max", np.max, "max")


def _infer_transpose(node, x: Abstract, axes: Abstract) -> Abstract:
    if not isinstance(x, Array):
        return x
    perm = _const_value(axes, "transpose", node, "axes")
    perm = tuple(reversed(range(len(x.shape)))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(len(x.shape))):
        _fail("transpose", node, f"axes {perm} are not a permutation of {len(x.shape)} dims")
    return Array(x.dtype, tuple(x.shape[p] for p in perm))


def _relay_transpose(args, ins, out):
    if not isinstance(ins[0], Array):
        return args[0]
    perm = _const_value(ins[1], "transpose", None, "axes")
    perm = list(reversed(range(len(ins[0].shape)))) if perm is None else list(perm)
    return relay.transpose(args[0], perm)


transpose = Primitive("transpose", _infer_transpose, lambda x, axes=None: np.transpose(x, axes),
                      relay=_relay_transpose)


def _infer_reshape(node, x: Abstract, shape: Abstract) -> Abstract:
    new = _const_value(shape, "reshape", node, "the new shape")
    new = new if isinstance(new, tuple) else (new,)
    old = x.shape if isinstance(x, Array) else ()
    try:
        out = np.empty(old, dtype=np.bool_).reshape(new).shape if np.prod(old) < 2 ** 20 else \
            np.broadcast_to(np.empty((), np.bool_), old).reshape(new).shape
    except ValueError:
        _fail("reshape", node, f"cannot reshape an array of shape {old} into shape {new}")
    if isinstance(x, Scalar) and out == ():
        return Scalar(x.dtype)
    return Array(x.dtype, out)


reshape = Primitive("reshape", _infer_reshape, lambda x, s: np.reshape(x, s), py="{0}",
                    relay=lambda a, i, o: relay.reshape(a[0], shape_of(o)))


def _infer_broadcast_to(node, x: Abstract, shape: Abstract) -> Abstract:
    new = tuple(_const_value(shape, "broadcast_to", node, "the shape"))
    old = x.shape if isinstance(x, Array) else ()
    try:
        np.broadcast_shapes(old, new)
        if np.broadcast_shapes(old, new) != new:
            raise ValueError
    except ValueError:
        _fail("broadcast_to", node, f"cannot broadcast shape {old} to {new}")
    if isinstance(x, Scalar) and new == ():
        return Scalar(x.dtype)  # a scalar stays a scalar (grad of grad seeds these)
    return Array(x.dtype, new)


broadcast_to = Primitive("broadcast_to", _infer_broadcast_to,
                         lambda x, s: np.broadcast_to(x, s).copy(), py="{0}",
                         relay=lambda a, i, o: relay.broadcast_to(
                             a[0], shape_of(o)))


def _infer_sum_to(node, x: Abstract, like: Abstract) -> Abstract:
    """``sum_to_like(x, like)``: sum the broadcast dimensions of x away to like's shape."""
    if not is_tensor(x):
        return x  # an environment or tuple of sensitivities: nothing was broadcast
    if isinstance(like, Array):
        return Array(x.dtype, like.shape)
    return Scalar(x.dtype) if isinstance(x, Scalar) else Array(x.dtype, ())


def sum_to_shape(x, shape):
    """Sum ``x`` over the axes broadcasting added, so it has ``shape`` (NumPy)."""
    x = np.asarray(x)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape)
                                      if d == 1 and x.shape[i + lead] != 1)
    return x.sum(axis=axes, keepdims=True).reshape(shape) if axes else x.reshape(shape)


def _relay_sum_to(args, ins, out):
    src = ins[0].shape if isinstance(ins[0], Array) else ()
    dst = out.shape if isinstance(out, Array) else ()
    if src == dst:
        return args[0]
    lead = len(src) - len(dst)
    axes = list(range(lead)) + [i + lead for i, d in enumerate(dst)
                                if d == 1 and src[i + lead] != 1]
    r = relay.sum(args[0], axis=axes, keepdims=True) if axes else args[0]
    return relay.reshape(r, dst)


sum_to_like = Primitive("sum_to_like", _infer_sum_to,
                        lambda x, like: x if isinstance(x, (dict, tuple)) else
                        sum_to_shape(x, np.shape(like)), relay=_relay_sum_to,
                        py="{0}")  # a scalar segment has nothing to sum


def _infer_broadcast_like(node, x: Abstract, like: Abstract) -> Abstract:
    """``broadcast_to_like(x, like)``: sum_to_like's transpose (x spread to like's shape)."""
    if not is_tensor(x):
        return x  # a tuple or environment of sensitivities passes through, as in sum_to_like
    if isinstance(like, Array):
        return Array(x.dtype, like.shape)
    return Scalar(x.dtype) if isinstance(x, Scalar) else Array(x.dtype, ())


broadcast_to_like = Primitive(
    "broadcast_to_like", _infer_broadcast_like,
    lambda x, like: x if isinstance(x, (dict, tuple)) else
    np.broadcast_to(x, np.shape(like)).copy(),
    relay=lambda a, i, o: a[0] if not isinstance(o, Array) or (
        isinstance(i[0], Array) and i[0].shape == o.shape) else relay.broadcast_to(
            a[0], shape_of(o)),
    py="{0}")


def _infer_where(node, c: Abstract, a: Abstract, b: Abstract) -> Abstract:
    shape = _broadcast("where", node, c, a, b)
    dtype = str(np.result_type(_dummy(a, "where", node), _dummy(b, "where", node)))
    return _result(dtype, shape, [c, a, b])


def _relay_where(args, ins, out):
    c = relay.cast(args[0], "bool") if ins[0].dtype != "bool" else args[0]
    a, b = _promote_for_relay(args[1:], ins[1:], out.dtype)
    return relay.where(c, a, b)


where = Primitive("where", _infer_where, np.where, relay=_relay_where)


def _like(name: str, value: int):
    def impl(x):
        if isinstance(x, tuple):
            return tuple(impl(e) for e in x)
        if isinstance(x, dict):
            return {}
        if isinstance(x, np.ndarray):
            return np.full_like(x, value)
        if isinstance(x, (int, float, bool, np.generic)):
            return type(x)(value) if not isinstance(x, bool) else value
        return {}  # a function's sensitivity is an (empty) environment

    def infer(node, x: Abstract) -> Abstract:
        if isinstance(x, Func):
            return Env()  # a function's sensitivity is an environment
        if isinstance(x, Tuple):
            return Tuple(infer(node, e) for e in x.elements)
        if isinstance(x, Scalar) and x.dtype == "bool":
            return Scalar("int64")
        if isinstance(x, Scalar):
            return Scalar(x.dtype)
        return x

    def convert(args, ins, out):
        return relay.full(relay.const(value, out.dtype),
                          out.shape if isinstance(out, Array) else (), out.dtype)

    return Primitive(name, infer, impl, py=f"{value}", relay=convert)


zeros_like = _like("zeros_like", 0)
ones_like = _like("ones_like", 1)


def _gadd_impl(a, b):
    if isinstance(a, tuple):
        return tuple(_gadd_impl(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _gadd_impl(out[k], v) if k in out else v
        return out
    return a + b


def _infer_gadd(node, a: Abstract, b: Abstract) -> Abstract:
    if is_tensor(a) and is_tensor(b):
        return elementwise(np.add, "gadd")(node, a, b)
    if isinstance(a, Tuple) and isinstance(b, Tuple):
        return Tuple(_infer_gadd(node, x, y) for x, y in zip(a.elements, b.elements))
    if isinstance(a, (Env, Func)) or isinstance(b, (Env, Func)):
        return Env()
    return a


gadd = Primitive("gadd", _infer_gadd, _gadd_impl, py="({0} + {1})",
                 relay=_relay_elementwise("add"), nparams=2)
