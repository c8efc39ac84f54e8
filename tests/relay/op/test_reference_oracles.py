"""Issue 13 item 6: the reference (NumPy) rule of every op is checked against an independent
oracle, because FoldConstant, the ONNX importer and the interpreter all evaluate with it.

The oracle is PyTorch (its own kernels, not NumPy), or math written another way. Each case
builds a call with the op's TVM constructor, types it, and runs the op's ``FNumpyEval`` rule
exactly as the interpreter does. A walk over the registry keeps the list honest: an op with a
reference rule either has a case here or is listed in ``NO_ORACLE_YET`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln.relay.qnn.interp  # noqa: F401 - QNN ops evaluate through their canonical form
from kiln import relay
from kiln.ir.op import Op
from kiln.relay.op import op_attrs
from kiln.relay.op.op import call
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS
from kiln.relay.type_infer import infer_expr

RNG = np.random.default_rng(1234)


@dataclass
class Case:
    """``build(*vars)`` makes the call; ``oracle(*tensors)`` computes the expected value."""

    build: Callable
    inputs: list
    oracle: Callable
    rtol: float = 1e-5
    atol: float = 1e-6


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def reference(build: Callable, inputs: list):
    """What the interpreter computes for ``build(*inputs)``: the op's FNumpyEval rule."""
    params = [relay.var(f"a{k}", shape=a.shape, dtype=str(a.dtype)) for k, a in enumerate(inputs)]
    call = build(*params)
    out_type = infer_expr(call)
    value = {param: array for param, array in zip(params, inputs)}
    # a tuple argument (concatenate's) arrives as a tuple of arrays, as in the interpreter
    args = [tuple(value[f] for f in arg.fields) if isinstance(arg, relay.Tuple)
            else arg.data.numpy() if isinstance(arg, relay.Constant) else value[arg]
            for arg in call.args]
    return call.op.get_attr("FNumpyEval")(call.attrs, args, out_type)


def uniform(lo: float, hi: float, shape=(3, 4), dtype="float32") -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


def ints(lo: int, hi: int, shape=(3, 4), dtype="int32", nonzero=False) -> np.ndarray:
    a = RNG.integers(lo, hi, shape).astype(dtype)
    if nonzero:
        a[a == 0] = 1
    return a


CASES: dict[str, list[Case]] = {}


def case(op_name: str, build: Callable, inputs: list, oracle: Callable, **tol) -> None:
    CASES.setdefault(op_name, []).append(Case(build, inputs, oracle, **tol))


# ---- elementwise unary: torch's kernels -----------------------------------------------------
_UNARY_DOMAIN = {"acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9),
                 "acosh": (1.1, 4.0), "log": (0.1, 4.0), "log2": (0.1, 4.0),
                 "log10": (0.1, 4.0), "sqrt": (0.1, 4.0), "rsqrt": (0.1, 4.0)}
_UNARY_TORCH = {
    "abs": torch.abs, "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin,
    "asinh": torch.asinh, "atan": torch.atan, "atanh": torch.atanh, "ceil": torch.ceil,
    "cos": torch.cos, "cosh": torch.cosh, "erf": torch.erf, "exp": torch.exp,
    "floor": torch.floor, "log": torch.log, "log10": torch.log10, "log2": torch.log2,
    "negative": torch.neg, "round": torch.round, "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid, "sign": torch.sign, "sin": torch.sin, "sinh": torch.sinh,
    "sqrt": torch.sqrt, "tan": torch.tan, "tanh": torch.tanh, "trunc": torch.trunc,
    # the fast_* approximations against the exact functions, at their documented accuracy
    "fast_exp": torch.exp, "fast_erf": torch.erf, "fast_tanh": torch.tanh,
    "copy": torch.clone, "nn.relu": torch.relu,
}
for _name, _fn in _UNARY_TORCH.items():
    _lo, _hi = _UNARY_DOMAIN.get(_name, (-3.0, 3.0))
    _x = uniform(_lo, _hi)
    if _name in ("round", "ceil", "floor", "trunc", "sign"):
        _x[0, :] = [-2.5, -0.5, 0.5, 0.0]  # ties round to even, signed zero
    _ctor = relay.nn.relu if _name == "nn.relu" else getattr(relay, _name)
    case(_name, _ctor, [_x], _fn, rtol=1e-4 if _name.startswith("fast_") else 1e-5)
case("bitwise_not", relay.bitwise_not, [ints(-50, 50)], torch.bitwise_not)
case("logical_not", relay.logical_not, [ints(0, 2, dtype="bool")], torch.logical_not)
_special = np.array([[np.nan, np.inf, -np.inf, 1.0], [0.0, -0.0, 3.5, np.nan]], "float32")
for _name in ("isnan", "isinf", "isfinite"):
    case(_name, getattr(relay, _name), [_special], getattr(torch, _name))

# ---- elementwise binary: torch's kernels, integer division semantics included ---------------
_BINARY_TORCH = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul,
    "maximum": torch.maximum, "minimum": torch.minimum, "power": torch.pow,
    "equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le,
    "greater": torch.gt, "greater_equal": torch.ge,
}
for _name, _fn in _BINARY_TORCH.items():
    lo = 0.5 if _name == "power" else -3.0
    case(_name, getattr(relay, _name), [uniform(lo, 3.0), uniform(-2, 2, (4,))], _fn)
_a, _b = ints(-20, 20), ints(-6, 6, nonzero=True)
_INT_DIVISION = {
    "divide": lambda a, b: torch.div(a, b, rounding_mode="trunc"),  # TIR: toward zero
    "trunc_divide": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "mod": torch.fmod, "trunc_mod": torch.fmod, "floor_mod": torch.remainder,
}
for _name, _fn in _INT_DIVISION.items():
    case(_name, getattr(relay, _name), [_a, _b], _fn)
_fa, _fb = uniform(-5, 5), uniform(0.5, 2.0) * np.where(RNG.random((3, 4)) < 0.5, -1, 1)
_fb = _fb.astype("float32")
case("divide", relay.divide, [_fa, _fb], torch.div)
case("trunc_divide", relay.trunc_divide, [_fa, _fb],
     lambda a, b: torch.div(a, b, rounding_mode="trunc"))
case("floor_divide", relay.floor_divide, [_fa, _fb],
     lambda a, b: torch.div(a, b, rounding_mode="floor"))
case("floor_mod", relay.floor_mod, [_fa, _fb], torch.remainder, atol=1e-5)
case("mod", relay.mod, [_fa, _fb], torch.fmod, atol=1e-5)
for _name, _fn in {"bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
                   "bitwise_xor": torch.bitwise_xor}.items():
    case(_name, getattr(relay, _name), [ints(-99, 99), ints(-99, 99)], _fn)
_shift = ints(0, 5)
case("left_shift", relay.left_shift, [ints(-99, 99), _shift], torch.bitwise_left_shift)
case("right_shift", relay.right_shift, [ints(-99, 99), _shift], torch.bitwise_right_shift)
_p, _q = ints(0, 2, dtype="bool"), ints(0, 2, dtype="bool")
for _name in ("logical_and", "logical_or", "logical_xor"):
    case(_name, getattr(relay, _name), [_p, _q], getattr(torch, _name))

# ---- a few elementwise ops with attributes --------------------------------------------------
case("clip", lambda x: relay.clip(x, -0.5, 1.25), [uniform(-2, 2)],
     lambda x: torch.clamp(x, -0.5, 1.25))
case("nn.leaky_relu", lambda x: relay.nn.leaky_relu(x, 0.2), [uniform(-2, 2)],
     lambda x: F.leaky_relu(x, 0.2))
case("nn.prelu", relay.nn.prelu, [uniform(-2, 2, (2, 3, 4)), uniform(0, 1, (3,))],
     lambda x, a: F.prelu(x, a))
case("nn.bias_add", relay.nn.bias_add, [uniform(-2, 2, (2, 3, 4)), uniform(-1, 1, (3,))],
     lambda x, b: x + b[None, :, None])
case("cast", lambda x: relay.cast(x, "int32"), [uniform(-9, 9)], lambda x: x.to(torch.int32))
case("where", relay.where, [ints(0, 2, dtype="bool"), uniform(-1, 1), uniform(-1, 1, (4,))],
     torch.where)


# ---- reductions -----------------------------------------------------------------------------
_r = uniform(-2, 2, (2, 3, 4))
def _prod(x, dim, keepdim=False):
    for d in sorted(dim if isinstance(dim, tuple) else (dim,), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


for _name, _fn in {"sum": torch.sum, "mean": torch.mean, "prod": _prod,
                   "max": torch.amax, "min": torch.amin}.items():
    _ctor = getattr(relay, _name)
    case(_name, lambda x, f=_ctor: f(x, axis=(0, 2)), [_r], lambda x, f=_fn: f(x, dim=(0, 2)))
    case(_name, lambda x, f=_ctor: f(x, axis=1, keepdims=True), [_r],
         lambda x, f=_fn: f(x, dim=1, keepdim=True))
case("sum", lambda x: relay.sum(x, axis=1, exclude=True), [_r],
     lambda x: torch.sum(x, dim=(0, 2)))
_r_mean = _r.mean(axis=2, keepdims=True)  # the op takes the mean as its second argument
case("variance", lambda x, m: relay.variance(x, axis=2, with_mean=m), [_r, _r_mean],
     lambda x, m: torch.var(x, dim=2, unbiased=False))
case("variance", lambda x, m: relay.variance(x, axis=2, unbiased=True, with_mean=m),
     [_r, _r_mean], lambda x, m: torch.var(x, dim=2, unbiased=True))
_bools = ints(0, 2, (3, 4), dtype="bool")
case("all", lambda x: relay.all(x, axis=1), [_bools], lambda x: torch.all(x, dim=1))
case("any", lambda x: relay.any(x, axis=0), [_bools], lambda x: torch.any(x, dim=0))
_ties = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0]], "float32")
case("argmax", lambda x: relay.argmax(x, axis=1), [_ties],
     lambda x: torch.argmax(x, dim=1).to(torch.int32))  # first of equal maxima, as torch
case("argmin", lambda x: relay.argmin(x, axis=1), [_ties],
     lambda x: torch.argmin(x, dim=1).to(torch.int32))
case("cumsum", lambda x: relay.cumsum(x, axis=1), [_r], lambda x: torch.cumsum(x, dim=1))
case("cumprod", lambda x: relay.cumprod(x, axis=2), [_r], lambda x: torch.cumprod(x, dim=2))

# ---- matrix products --------------------------------------------------------------------------
case("nn.dense", relay.nn.dense, [uniform(-1, 1, (3, 5)), uniform(-1, 1, (4, 5))], F.linear)
case("nn.dense", relay.nn.dense, [ints(-9, 9, (2, 5), "int8"), ints(-9, 9, (3, 5), "int8")],
     lambda x, w: (x.to(torch.int32) @ w.to(torch.int32).T).to(torch.int8))
case("nn.matmul", lambda a, b: relay.nn.matmul(a, b, transpose_a=True),
     [uniform(-1, 1, (5, 3)), uniform(-1, 1, (5, 4))], lambda a, b: a.T @ b)
case("nn.batch_matmul", relay.nn.batch_matmul,
     [uniform(-1, 1, (2, 3, 5)), uniform(-1, 1, (1, 4, 5))],
     lambda a, b: torch.matmul(a, b.transpose(1, 2)))
_packed = uniform(-1, 1, (2, 5, 3))  # (N/n, K, n): w[i * n + j, k] = packed[i, k, j]
case("nn.contrib_dense_pack", relay.nn.contrib_dense_pack, [uniform(-1, 1, (3, 5)), _packed],
     lambda x, p: F.linear(x, p.permute(0, 2, 1).reshape(6, 5)))

# ---- convolutions and pools -------------------------------------------------------------------
case("nn.conv2d", lambda x, w: relay.nn.conv2d(x, w, strides=2, padding=(1, 0, 2, 1),
                                              dilation=(1, 2)),
     [uniform(-1, 1, (1, 3, 9, 8)), uniform(-1, 1, (4, 3, 3, 2))],
     lambda x, w: F.conv2d(F.pad(x, (0, 1, 1, 2)), w, stride=2, dilation=(1, 2)), rtol=1e-4)
case("nn.conv2d", lambda x, w: relay.nn.conv2d(x, w, padding=1, groups=2),
     [uniform(-1, 1, (2, 4, 5, 5)), uniform(-1, 1, (6, 2, 3, 3))],
     lambda x, w: F.conv2d(x, w, padding=1, groups=2), rtol=1e-4)
case("nn.conv2d", lambda x, w: relay.nn.conv2d(x, w, data_layout="NHWC",
                                              kernel_layout="HWIO"),
     [uniform(-1, 1, (1, 5, 5, 3)), uniform(-1, 1, (3, 3, 3, 4))],
     lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)).permute(0, 2, 3, 1),
     rtol=1e-4)
def _unblock(x):
    """NCHW{c} -> NCHW (a torch tensor)."""
    n, cb, h, w, c = x.shape
    return x.permute(0, 1, 4, 2, 3).reshape(n, cb * c, h, w)


def _block(y, c):
    """NCHW -> NCHW{c}."""
    n, ch, h, w = y.shape
    return y.reshape(n, ch // c, c, h, w).permute(0, 1, 3, 4, 2)


def _unblock_kernel(w):
    """OIHW{i}i{o}o -> OIHW."""
    ob, ib, kh, kw, i, o = w.shape
    return w.permute(0, 5, 1, 4, 2, 3).reshape(ob * o, ib * i, kh, kw)


case("nn.contrib_conv2d_NCHWc",
     lambda x, w: relay.nn.contrib_conv2d_nchwc(x, w, strides=2, padding=1, channels=16,
                                                kernel_size=3, data_layout="NCHW8c",
                                                kernel_layout="OIHW8i8o",
                                                out_layout="NCHW8c"),
     [uniform(-1, 1, (1, 2, 7, 6, 8)), uniform(-1, 1, (2, 2, 3, 3, 8, 8))],
     lambda x, w: _block(F.conv2d(_unblock(x), _unblock_kernel(w), stride=2, padding=1), 8),
     rtol=1e-4, atol=1e-5)
case("nn.contrib_depthwise_conv2d_NCHWc",
     lambda x, w: relay.nn.contrib_depthwise_conv2d_nchwc(
         x, w, padding=(1, 0), dilation=(1, 2), groups=16, channels=16, kernel_size=3,
         data_layout="NCHW8c", kernel_layout="OIHW1i8o", out_layout="NCHW8c"),
     [uniform(-1, 1, (1, 2, 6, 7, 8)), uniform(-1, 1, (2, 1, 3, 3, 1, 8))],
     lambda x, w: _block(F.conv2d(_unblock(x), _unblock_kernel(w), padding=(1, 0),
                                  dilation=(1, 2), groups=16), 8),
     rtol=1e-4, atol=1e-5)

case("nn.conv1d", lambda x, w: relay.nn.conv1d(x, w, strides=2, padding=1),
     [uniform(-1, 1, (2, 3, 9)), uniform(-1, 1, (4, 3, 3))],
     lambda x, w: F.conv1d(x, w, stride=2, padding=1), rtol=1e-4)
case("nn.conv3d", lambda x, w: relay.nn.conv3d(x, w, padding=(1, 0, 1)),
     [uniform(-1, 1, (1, 2, 4, 4, 4)), uniform(-1, 1, (3, 2, 3, 2, 3))],
     lambda x, w: F.conv3d(x, w, padding=(1, 0, 1)), rtol=1e-4)
case("nn.conv2d_transpose",
     lambda x, w: relay.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1),
     [uniform(-1, 1, (1, 3, 4, 4)), uniform(-1, 1, (3, 2, 3, 3))],
     lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), rtol=1e-4)
case("nn.conv1d_transpose", lambda x, w: relay.nn.conv1d_transpose(x, w, strides=3),
     [uniform(-1, 1, (2, 3, 5)), uniform(-1, 1, (3, 4, 2))],
     lambda x, w: F.conv_transpose1d(x, w, stride=3), rtol=1e-4)
_img = uniform(-2, 2, (2, 3, 7, 6))
case("nn.max_pool2d", lambda x: relay.nn.max_pool2d(x, (3, 2), (2, 2), padding=(1, 1)),
     [_img], lambda x: F.max_pool2d(x, (3, 2), (2, 2), padding=1))
case("nn.max_pool2d", lambda x: relay.nn.max_pool2d(x, (3, 3), (2, 2), ceil_mode=True),
     [_img], lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True))
case("nn.avg_pool2d", lambda x: relay.nn.avg_pool2d(x, (3, 3), (2, 2), padding=(1, 1),
                                                    count_include_pad=True),
     [_img], lambda x: F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=True))
case("nn.avg_pool2d", lambda x: relay.nn.avg_pool2d(x, (3, 3), (2, 2), padding=(1, 1)),
     [_img], lambda x: F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False))
case("nn.max_pool1d", lambda x: relay.nn.max_pool1d(x, 3, 2), [uniform(-2, 2, (2, 3, 9))],
     lambda x: F.max_pool1d(x, 3, 2))
case("nn.avg_pool1d", lambda x: relay.nn.avg_pool1d(x, 2, 2), [uniform(-2, 2, (2, 3, 9))],
     lambda x: F.avg_pool1d(x, 2, 2))
_vol = uniform(-2, 2, (1, 2, 5, 4, 6))
case("nn.max_pool3d", lambda x: relay.nn.max_pool3d(x, (2, 2, 3), (1, 2, 3)), [_vol],
     lambda x: F.max_pool3d(x, (2, 2, 3), (1, 2, 3)))
case("nn.avg_pool3d", lambda x: relay.nn.avg_pool3d(x, (2, 2, 2), (2, 2, 2)), [_vol],
     lambda x: F.avg_pool3d(x, 2, 2))
case("nn.global_max_pool2d", relay.nn.global_max_pool2d, [_img],
     lambda x: torch.amax(x, dim=(2, 3), keepdim=True))
case("nn.global_avg_pool2d", relay.nn.global_avg_pool2d, [_img],
     lambda x: torch.mean(x, dim=(2, 3), keepdim=True))
case("nn.adaptive_avg_pool2d", lambda x: relay.nn.adaptive_avg_pool2d(x, (3, 4)), [_img],
     lambda x: F.adaptive_avg_pool2d(x, (3, 4)))
case("nn.adaptive_max_pool2d", lambda x: relay.nn.adaptive_max_pool2d(x, (4, 5)), [_img],
     lambda x: F.adaptive_max_pool2d(x, (4, 5)))
case("nn.adaptive_avg_pool1d", lambda x: relay.nn.adaptive_avg_pool1d(x, 4),
     [uniform(-2, 2, (2, 3, 9))], lambda x: F.adaptive_avg_pool1d(x, 4))
case("nn.adaptive_max_pool1d", lambda x: relay.nn.adaptive_max_pool1d(x, 4),
     [uniform(-2, 2, (2, 3, 9))], lambda x: F.adaptive_max_pool1d(x, 4))

# ---- softmax and normalizations -----------------------------------------------------------
_act = uniform(-3, 3, (2, 3, 4, 5))
case("nn.softmax", lambda x: relay.nn.softmax(x, axis=1), [_act], lambda x: F.softmax(x, 1))
case("nn.fast_softmax", lambda x: relay.nn.fast_softmax(x, axis=-1), [_act],
     lambda x: F.softmax(x, -1), rtol=1e-4)
case("nn.log_softmax", lambda x: relay.nn.log_softmax(x, axis=2), [_act],
     lambda x: F.log_softmax(x, 2))
_g, _b = uniform(0.5, 1.5, (3,)), uniform(-1, 1, (3,))
_mean, _var = uniform(-1, 1, (3,)), uniform(0.5, 2, (3,))
case("nn.batch_norm",
     lambda x, g, b, m, v: relay.nn.batch_norm(x, g, b, m, v, epsilon=1e-3).astuple(),
     [_act, _g, _b, _mean, _var],
     lambda x, g, b, m, v: (F.batch_norm(x, m, v, g, b, eps=1e-3), m, v), rtol=1e-4)
case("nn.layer_norm", lambda x, g, b: relay.nn.layer_norm(x, g, b, axis=1),
     [_act, _g, _b], lambda x, g, b: F.layer_norm(x.transpose(1, 3), (3,), g, b).transpose(1, 3),
     rtol=1e-4, atol=1e-5)
case("nn.instance_norm", relay.nn.instance_norm, [_act, _g, _b],
     lambda x, g, b: F.instance_norm(x, weight=g, bias=b), rtol=1e-4, atol=1e-5)
_gn = uniform(-3, 3, (2, 4, 3, 3))
case("nn.group_norm", lambda x, g, b: relay.nn.group_norm(x, g, b, num_groups=2),
     [_gn, uniform(0.5, 1.5, (4,)), uniform(-1, 1, (4,))],
     lambda x, g, b: F.group_norm(x, 2, g, b), rtol=1e-4, atol=1e-5)
case("nn.l2_normalize", lambda x: relay.nn.l2_normalize(x, 1e-12, axis=[1]), [_act],
     lambda x: F.normalize(x, dim=1), rtol=1e-5)
case("nn.lrn", lambda x: relay.nn.lrn(x, size=3, axis=1, bias=2.0, alpha=1e-2, beta=0.75),
     [_act], lambda x: F.local_response_norm(x, 3, alpha=1e-2, beta=0.75, k=2.0), rtol=1e-5)
case("nn.dropout", lambda x: relay.nn.dropout_raw(x, 0.3), [_act],
     lambda x: (x, torch.ones_like(x)))  # inference: identity, an all-ones mask

# ---- shapes, slicing, gathering ------------------------------------------------------------
_x = uniform(-2, 2, (2, 3, 4))
case("reshape", lambda x: relay.reshape(x, (0, -1)), [_x], lambda x: x.reshape(2, 12))
case("reshape", lambda x: relay.reshape(x, (-4, 1, 2, -3)), [_x], lambda x: x.reshape(1, 2, 12))
case("contrib_reverse_reshape", lambda x: relay.reverse_reshape(x, (-1, 0)), [_x],
     lambda x: x.reshape(6, 4))
case("reshape_like", relay.reshape_like, [_x, uniform(0, 1, (4, 6))],
     lambda x, y: x.reshape(y.shape))
case("nn.batch_flatten", relay.nn.batch_flatten, [_x], lambda x: torch.flatten(x, 1))
case("transpose", lambda x: relay.transpose(x, (2, 0, 1)), [_x], lambda x: x.permute(2, 0, 1))
case("transpose", relay.transpose, [_x], lambda x: x.permute(2, 1, 0))
case("squeeze", lambda x: relay.squeeze(x, axis=[2]), [uniform(0, 1, (2, 3, 1, 1))],
     lambda x: x.squeeze(2))
case("expand_dims", lambda x: relay.expand_dims(x, 1, 2), [_x],
     lambda x: x.unsqueeze(1).unsqueeze(1))
case("concatenate", lambda a, b: relay.concatenate([a, b], axis=1),
     [_x, uniform(0, 1, (2, 2, 4))], lambda a, b: torch.cat([a, b], 1))
case("stack", lambda a, b: relay.stack([a, b], axis=-1), [_x, _x + 1],
     lambda a, b: torch.stack([a, b], -1))
case("split", lambda x: relay.split(x, (1, 3), axis=2).astuple(), [_x],
     lambda x: torch.tensor_split(x, (1, 3), dim=2))
case("split", lambda x: relay.split(x, 3, axis=1).astuple(), [_x],
     lambda x: torch.chunk(x, 3, dim=1))
case("take", lambda x, i: relay.take(x, i, axis=1), [_x, np.array([2, 0, 2], "int32")],
     lambda x, i: torch.index_select(x, 1, i))
case("take", lambda x, i: relay.take(x, i, axis=2, mode="clip"), [_x, np.array([[5, -2]], "int32")],
     lambda x, i: x[:, :, [[3, 0]]])
case("take", lambda x, i: relay.take(x, i, axis=2, mode="wrap"), [_x, np.array([5, -1], "int32")],
     lambda x, i: x[:, :, [1, 3]])
_gidx = ints(0, 3, (2, 3, 4), dtype="int64")
case("gather", lambda x, i: relay.gather(x, 1, i), [_x, _gidx],
     lambda x, i: torch.gather(x, 1, i))
case("gather_nd", relay.gather_nd, [_x, np.array([[1, 0], [2, 0]], "int64")],
     lambda x, i: x[[1, 0], [2, 0]])
case("strided_slice", lambda x: relay.strided_slice(x, (0, 2, 1), (2, 0, 4), (1, -1, 2)),
     [_x], lambda x: torch.flip(x[:, 1:3, :], (1,))[:, :, 1::2])
case("strided_slice", lambda x: relay.strided_slice(x, (1,), (3,), axes=(2,)),
     [_x], lambda x: x[:, :, 1:3])
case("slice_like", lambda x, y: relay.slice_like(x, y, axes=(1, 2)),
     [_x, uniform(0, 1, (1, 2, 3))], lambda x, y: x[:, :2, :3])
case("tile", lambda x: relay.tile(x, (2, 1, 3)), [_x], lambda x: torch.tile(x, (2, 1, 3)))
case("repeat", lambda x: relay.repeat(x, 2, 1), [_x],
     lambda x: torch.repeat_interleave(x, 2, dim=1))
case("reverse", lambda x: relay.reverse(x, 2), [_x], lambda x: torch.flip(x, (2,)))
case("broadcast_to", lambda x: relay.broadcast_to(x, (2, 3, 4)), [uniform(0, 1, (3, 1))],
     lambda x: torch.broadcast_to(x, (2, 3, 4)))
case("broadcast_to_like", relay.broadcast_to_like, [uniform(0, 1, (3, 1)), _x],
     lambda x, y: torch.broadcast_to(x, y.shape))
case("collapse_sum_like", relay.collapse_sum_like, [_x, uniform(0, 1, (3, 1))],
     lambda x, y: x.sum(0).sum(1, keepdim=True))
case("collapse_sum_to", lambda x: relay.collapse_sum_to(x, (3, 1)), [_x],
     lambda x: x.sum(0).sum(1, keepdim=True))
case("layout_transform", lambda x: relay.layout_transform(x, "NCHW", "NHWC"),
     [uniform(0, 1, (1, 4, 2, 3))], lambda x: x.permute(0, 2, 3, 1))
case("layout_transform", lambda x: relay.layout_transform(x, "NCHW", "NCHW2c"),
     [uniform(0, 1, (1, 4, 2, 3))], lambda x: x.reshape(1, 2, 2, 2, 3).permute(0, 1, 3, 4, 2))
case("cast_like", relay.cast_like, [uniform(-9, 9), ints(0, 2)], lambda x, y: x.to(torch.int32))
case("reinterpret", lambda x: relay.reinterpret(x, "int32"), [uniform(-9, 9)],
     lambda x: x.view(torch.int32))
case("sequence_mask", lambda x, n: relay.sequence_mask(x, n, -1.0, axis=0),
     [uniform(0, 1, (4, 2, 3)), np.array([1, 3], "int32")],
     lambda x, n: torch.where((torch.arange(4)[:, None] < n[None, :])[:, :, None], x,
                              torch.tensor(-1.0)))
case("one_hot", lambda i, on, off: relay.one_hot(i, on, off, 4, -1, "float32"),
     [np.array([[0, 3], [2, 1]], "int32"), np.array(2.0, "float32"),
      np.array(-1.0, "float32")],
     lambda i, on, off: F.one_hot(i.long(), 4).float() * 3 - 1)
case("shape_of", relay.shape_of, [_x], lambda x: torch.tensor(x.shape, dtype=torch.int32))
case("ndarray_size", relay.ndarray_size, [_x], lambda x: torch.tensor(x.numel(), dtype=torch.int32))

# ---- fills ---------------------------------------------------------------------------------
case("zeros", lambda: relay.zeros((2, 3), "float32"), [], lambda: torch.zeros(2, 3))
case("ones", lambda: relay.ones((2, 3), "int32"), [], lambda: torch.ones(2, 3, dtype=torch.int32))
case("full", lambda v: relay.full(v, (2, 3), "float32"), [np.array(2.5, "float32")],
     lambda v: torch.full((2, 3), float(v)))
case("zeros_like", relay.zeros_like, [_x], torch.zeros_like)
case("ones_like", relay.ones_like, [_x], torch.ones_like)
case("full_like", relay.full_like, [_x, np.array(-4.0, "float32")],
     lambda x, v: torch.full_like(x, float(v)))
case("arange", lambda a, b, c: relay.arange(a, b, c, "float32"),
     [np.array(1.0, "float32"), np.array(4.0, "float32"), np.array(0.5, "float32")],
     lambda a, b, c: torch.arange(1.0, 4.0, 0.5))

# ---- sorting and selection (ties keep the lower index first, as torch's stable sort) -------
_s = np.array([[3, 1, 2, 1, 5], [0, 0, -1, 7, 0]], "float32")
case("sort", lambda x: relay.sort(x, axis=1), [_s], lambda x: torch.sort(x, dim=1, stable=True)[0])
case("sort", lambda x: relay.sort(x, axis=1, is_ascend=False), [_s],
     lambda x: torch.sort(x, dim=1, descending=True, stable=True)[0])
case("argsort", lambda x: relay.argsort(x, axis=1), [_s],
     lambda x: torch.sort(x, dim=1, stable=True)[1].to(torch.int32))
case("topk", lambda x: relay.topk(x, 2, axis=1, dtype="int64").astuple(), [uniform(0, 1, (3, 6))],
     lambda x: tuple(torch.topk(x, 2, dim=1)))
case("argwhere", relay.argwhere, [ints(0, 2, (3, 4), dtype="int32")],
     lambda x: torch.nonzero(x).to(torch.int32))
_upd = uniform(-1, 1, (2, 4))
case("scatter_elements", lambda x, i, u: relay.scatter_elements(x, i, u, axis=0),
     [uniform(0, 1, (3, 4)), np.array([[2, 0, 1, 2], [0, 1, 2, 1]], "int64"), _upd],
     lambda x, i, u: torch.scatter(x, 0, i, u))
case("scatter_elements", lambda x, i, u: relay.scatter_elements(x, i, u, 0, "add"),
     [uniform(0, 1, (3, 4)), np.array([[2, 0, 1, 2], [2, 0, 1, 2]], "int64"), _upd],
     lambda x, i, u: torch.scatter_add(x, 0, i, u))


def _scatter_nd_add(x, i, u):
    out = x.clone()
    for k in range(i.shape[1]):
        out[tuple(i[:, k].tolist())] += u[k]
    return out


case("scatter_nd", lambda x, i, u: relay.scatter_nd(x, i, u, "add"),
     [uniform(0, 1, (3, 4)), np.array([[0, 2, 0], [1, 3, 1]], "int64"), uniform(0, 1, (3,))],
     _scatter_nd_add)

# ---- nn shape ops ----------------------------------------------------------------------------
_pad_in = uniform(-1, 1, (1, 2, 3, 4))
case("nn.pad", lambda x, v: relay.nn.pad(x, ((0, 0), (0, 0), (1, 2), (2, 0)), v),
     [_pad_in, np.array(0.5, "float32")], lambda x, v: F.pad(x, (2, 0, 1, 2), value=0.5))
case("nn.pad", lambda x, v: relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (2, 1)), v, "reflect"),
     [_pad_in, np.array(0.0, "float32")], lambda x, v: F.pad(x, (2, 1, 1, 1), mode="reflect"))
case("nn.pad", lambda x, v: relay.nn.pad(x, ((0, 0), (0, 0), (2, 1), (0, 3)), v, "edge"),
     [_pad_in, np.array(0.0, "float32")], lambda x, v: F.pad(x, (0, 3, 2, 1), mode="replicate"))
case("nn.mirror_pad", lambda x: relay.nn.mirror_pad(x, ((0, 0), (0, 0), (1, 1), (2, 0)),
                                                    "REFLECT"),
     [_pad_in], lambda x: F.pad(x, (2, 0, 1, 1), mode="reflect"))
case("nn.depth_to_space", lambda x: relay.nn.depth_to_space(x, 2, mode="CRD"),
     [uniform(0, 1, (1, 8, 2, 3))], lambda x: F.pixel_shuffle(x, 2))
case("nn.depth_to_space", lambda x: relay.nn.depth_to_space(x, 2),  # DCR: depth-major blocks
     [uniform(0, 1, (1, 8, 2, 3))],
     lambda x: x.reshape(1, 2, 2, 2, 2, 3).permute(0, 3, 4, 1, 5, 2).reshape(1, 2, 4, 6))
case("nn.space_to_depth", lambda x: relay.nn.space_to_depth(x, 2),
     [uniform(0, 1, (1, 2, 4, 6))],
     lambda x: x.reshape(1, 2, 2, 2, 3, 2).permute(0, 3, 5, 1, 2, 4).reshape(1, 8, 2, 3))
case("nn.upsampling", lambda x: relay.nn.upsampling(x, 2, 3), [_pad_in],
     lambda x: F.interpolate(x, scale_factor=(2, 3), mode="nearest"))
case("nn.upsampling", lambda x: relay.nn.upsampling(x, 2, 2, method="bilinear",
                                                    align_corners=True),
     [_pad_in], lambda x: F.interpolate(x, scale_factor=2, mode="bilinear",
                                        align_corners=True), rtol=1e-5, atol=1e-6)
case("image.resize2d", lambda x: relay.image.resize2d(x, (5, 7), method="linear"),
     [_pad_in], lambda x: F.interpolate(x, (5, 7), mode="bilinear", align_corners=False),
     atol=1e-6)
case("image.resize2d", lambda x: relay.image.resize2d(
        x, (5, 7), method="linear", coordinate_transformation_mode="align_corners"),
     [_pad_in], lambda x: F.interpolate(x, (5, 7), mode="bilinear", align_corners=True),
     atol=1e-6)
case("image.resize1d", lambda x: relay.image.resize1d(x, (7,), method="linear"),
     [uniform(0, 1, (1, 2, 4))],
     lambda x: F.interpolate(x, 7, mode="linear", align_corners=False), atol=1e-6)

# ---- dyn.* (shapes and sizes as run-time tensors) ------------------------------------------
def _i64(*values):
    return np.array(values, "int64")


case("dyn.reshape", relay.reshape, [_x, _i64(4, -1)], lambda x, s: x.reshape(4, 6))
case("dyn.broadcast_to", relay.broadcast_to, [uniform(0, 1, (3, 1)), _i64(2, 3, 5)],
     lambda x, s: torch.broadcast_to(x, (2, 3, 5)))
case("dyn.zeros", lambda s: relay.zeros(s, "float32"), [_i64(2, 3)],
     lambda s: torch.zeros(2, 3))
case("dyn.ones", lambda s: relay.ones(s, "float32"), [_i64(3, 1)], lambda s: torch.ones(3, 1))
case("dyn.full", lambda v, s: relay.full(v, s, "float32"), [np.array(7.0, "float32"),
                                                           _i64(2, 2)],
     lambda v, s: torch.full((2, 2), 7.0))
case("dyn.tile", relay.tile, [_x, _i64(1, 2, 1)], lambda x, r: torch.tile(x, (1, 2, 1)))
# the op itself (the constructor wraps the bounds in clamping arithmetic first)
case("dyn.strided_slice", lambda x, b, e, st: call("dyn.strided_slice", [x, b, e, st],
                                                   op_attrs.StridedSliceAttrs()),
     [_x, _i64(0, 1, 3), _i64(2, 3, 0), _i64(1, 1, -2)],
     lambda x, b, e, s: torch.flip(x[:, 1:3, 1:4], (2,))[:, :, ::2])
case("dyn.expand_dims", relay.expand_dims, [_x, np.array(1, "int64")],
     lambda x, a: x.unsqueeze(1))
case("dyn.squeeze", relay.squeeze, [uniform(0, 1, (2, 1, 3)), _i64(1)],
     lambda x, a: x.squeeze(1))
case("dyn.one_hot", lambda i, on, off, d: relay.one_hot(i, on, off, d, 1, "int32"),
     [np.array([1, 0, 2], "int32"), np.array(1, "int32"), np.array(0, "int32"),
      np.array(3, "int32")],
     lambda i, on, off, d: F.one_hot(i.long(), 3).T.to(torch.int32))
case("dyn.nn.pad", lambda x, w, v: relay.nn.pad(x, w, v),
     [_pad_in, _i64(0, 0, 0, 0, 1, 0, 2, 1).reshape(4, 2), np.array(9.0, "float32")],
     lambda x, w, v: F.pad(x, (2, 1, 1, 0), value=9.0))
case("dyn.topk", lambda x, k: relay.topk(x, k, axis=1, ret_type="values"),
     [uniform(0, 1, (3, 6)), np.array(2, "int32")], lambda x, k: torch.topk(x, 2, dim=1)[0])
case("dyn.image.resize2d", lambda x, s: relay.image.resize2d(x, s, method="linear"),
     [_pad_in, _i64(5, 7)],
     lambda x, s: F.interpolate(x, (5, 7), mode="bilinear", align_corners=False), atol=1e-6)
case("dyn.nn.upsampling", lambda x, h, w: relay.nn.upsampling(x, h, w),
     [_pad_in, np.array(2.0, "float32"), np.array(3.0, "float32")],
     lambda x, h, w: F.interpolate(x, scale_factor=(2, 3), mode="nearest"))

# ---- recurrent layers over a sequence, against torch's own LSTM/GRU/RNN cells step by step ---
def _pack(r: np.ndarray, gates: int, lanes: int) -> np.ndarray:
    """``R [G*H, H]`` packed ``[H/n, H, G, n]`` as ``pack_recurrent_weight`` documents."""
    hidden = r.shape[1]
    return r.reshape(gates, hidden // lanes, lanes, hidden).transpose(1, 3, 0, 2).copy()


def _blocks(t: torch.Tensor, order: list[int], hidden: int) -> torch.Tensor:
    return torch.cat([t[q * hidden:(q + 1) * hidden] for q in order])


_H, _B, _T = 4, 2, 3
_R4 = uniform(-0.5, 0.5, (4 * _H, _H))
_R3 = uniform(-0.5, 0.5, (3 * _H, _H))
_R1 = uniform(-0.5, 0.5, (_H, _H))


def _torch_steps(xproj, state, cell, reverse=False):
    """``(Y, final)`` of ``state = cell(xproj[t], state)`` over the steps; ``cell`` returns
    ``(hidden row, next state)``."""
    ys = [None] * len(xproj)
    for t in (reversed(range(len(xproj))) if reverse else range(len(xproj))):
        ys[t], state = cell(xproj[t], state)
    return torch.stack(ys), state


def _torch_lstm(xproj, state, weight):
    # ONNX gate blocks (i, o, f, c) in torch's order (i, f, g, o); xproj enters through an
    # identity input weight, R through the recurrent weight
    r = _blocks(torch.from_numpy(_R4), [0, 2, 3, 1], _H)
    eye = _blocks(torch.eye(4 * _H), [0, 2, 3, 1], _H)

    def cell(x, st):
        h, c = torch.lstm_cell(x, (st[0], st[1]), eye, r)
        return h, torch.stack([h, c])

    return _torch_steps(xproj, state, cell)


def _torch_gru(xproj, hidden, weight, hbias):
    # ONNX (z, r, h) in torch's order (r, z, n); torch's cell is linear_before_reset=1
    r = _blocks(torch.from_numpy(_R3), [1, 0, 2], _H)
    eye = _blocks(torch.eye(3 * _H), [1, 0, 2], _H)
    b_hh = torch.cat([torch.zeros(2 * _H), hbias])

    def cell(x, h):
        h = torch.gru_cell(x, h, eye, r, None, b_hh)
        return h, h

    return _torch_steps(xproj, hidden, cell, reverse=True)


def _torch_rnn(xproj, hidden, weight):
    # xproj enters through an identity input weight, R through the recurrent weight
    def cell(x, h):
        h = torch.rnn_relu_cell(x, h, torch.eye(_H), torch.from_numpy(_R1))
        return h, h

    return _torch_steps(xproj, hidden, cell)


case("nn.contrib_rnn_sequence",
     lambda x, h, w: relay.nn.contrib_rnn_sequence(x, h, w, "relu").astuple(),
     [uniform(-1, 1, (_T, _B, _H)), uniform(-1, 1, (_B, _H)), _pack(_R1, 1, 2)], _torch_rnn)
case("nn.contrib_lstm_sequence",
     lambda x, s, w: relay.nn.contrib_lstm_sequence(x, s, w).astuple(),
     [uniform(-1, 1, (_T, _B, 4 * _H)), uniform(-1, 1, (2, _B, _H)), _pack(_R4, 4, 2)],
     _torch_lstm)
case("nn.contrib_gru_sequence",
     lambda x, h, w, b: relay.nn.contrib_gru_sequence(x, h, w, b, linear_before_reset=True,
                                                      reverse=True).astuple(),
     [uniform(-1, 1, (_T, _B, 3 * _H)), uniform(-1, 1, (_B, _H)), _pack(_R3, 3, 2),
      uniform(-0.5, 0.5, (_H,))], _torch_gru)
case("nn.contrib_check_sequence_lens",  # lengths inside [0, T] pass through unchanged
     lambda lens, x: relay.nn.contrib_check_sequence_lens(lens, x, "lstm"),
     [np.array([_T, 0], "int32"), uniform(-1, 1, (_T, 2, 3))], lambda lens, x: lens.clone(),
     rtol=0, atol=0)

# ---- fixed-point multiplication: the definition in torch int64 tensors ----------------------
def _fixed_point(x, multiplier, left, right):
    """round_half_up((x << left) * multiplier / 2**(31 + right)), wrapped to int32."""
    total = 31 + right
    value = ((x.long() << left) * multiplier + (torch.ones_like(x.long()) << (total - 1))) \
        >> total
    return ((value + 2**31) % 2**32 - 2**31).int()


_FP_X = RNG.integers(-(2**20), 2**20, (3, 4)).astype("int32")  # no int64 overflow below
case("fixed_point_multiply", lambda x: relay.fixed_point_multiply(x, 1518500250, 2), [_FP_X],
     lambda x: _fixed_point(x, 1518500250, 2, 0), rtol=0, atol=0)
case("fixed_point_multiply", lambda x: relay.fixed_point_multiply(x, 1 << 30, -3), [_FP_X],
     lambda x: _fixed_point(x, 1 << 30, 0, 3), rtol=0, atol=0)
case("fixed_point_multiply_per_axis",
     lambda x, y, ls, rs: relay.fixed_point_multiply_per_axis(x, y, ls, rs, True, True, [1]),
     [_FP_X, np.array([1 << 30, 1518500250, 2**31 - 1, 1 << 20], "int32"),
      np.array([0, 2, 1, 0], "int32"), np.array([3, 0, 0, 1], "int32")],
     lambda x, y, ls, rs: _fixed_point(x, y.long(), ls.long(), rs.long()), rtol=0, atol=0)


# ---- the test -------------------------------------------------------------------------------
def _cases():
    return [pytest.param(name, k, id=f"{name}-{k}") for name in sorted(CASES)
            for k in range(len(CASES[name]))]


@pytest.mark.parametrize("op_name, index", _cases())
def test_reference_rule_matches_the_oracle(op_name, index):
    c = CASES[op_name][index]
    got = reference(c.build, c.inputs)
    expected = c.oracle(*[_t(a) for a in c.inputs])
    got_list = list(got) if isinstance(got, tuple) else [got]
    exp_list = list(expected) if isinstance(expected, tuple | list) else [expected]
    assert len(got_list) == len(exp_list)
    for g, e in zip(got_list, exp_list):
        e = e.numpy() if isinstance(e, torch.Tensor) else np.asarray(e)
        assert np.asarray(g).shape == e.shape, op_name
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), e.astype(np.float64),
                                   rtol=c.rtol, atol=c.atol, err_msg=op_name)


def test_the_cases_call_the_op_they_are_filed_under():
    for name, cases in CASES.items():
        for c in cases:
            params = [relay.var(f"a{k}", shape=a.shape, dtype=str(a.dtype))
                      for k, a in enumerate(c.inputs)]
            assert c.build(*params).op.name == name


def test_every_reference_rule_has_an_oracle_case_or_a_reason():
    with_rule = {name for name in Op.list_op_names() if Op.get(name).has_attr("FNumpyEval")
                 and not name.startswith("test.")}
    missing = sorted(with_rule - set(CASES) - set(NO_ORACLE_YET))
    assert not missing, f"reference rules without an oracle case: {missing}"
    stale = sorted(set(NO_ORACLE_YET) & set(CASES))
    assert not stale, f"listed as without an oracle but have one: {stale}"


_IDENTITY = "an annotation for passes: evaluation passes its value through unchanged"
_QNN = ("evaluated by canonicalizing to core ops (relay/qnn/interp.py), whose rules are checked "
        "here; QNN results are compared with onnxruntime in tests/relay/qnn")
_QNN_NUMPY = ("evaluated by canonicalizing to core ops (relay/qnn/interp.py), whose rules are "
              "checked here; the QNN results are compared with NumPy integer math and float "
              "math in tests/relay/qnn/test_qnn_conv_dense.py and test_qnn_unary_pool.py")
_PACKED = ("a kiln-internal packed weight layout that no other framework computes; the "
           "transform + conv pair is checked against nn.conv2d in tests/relay/op/test_op_nn.py")
NO_ORACLE_YET: dict[str, str] = {
    **{name: _IDENTITY for name in (
        "annotation.bitpack_end", "annotation.bitpack_start", "annotation.cast_hint",
        "annotation.checkpoint", "annotation.compiler_begin", "annotation.compiler_end",
        "annotation.stop_fusion", "on_device", "device_copy")},
    "debug": "runs the user's Python callback and returns its input",
    # every QNN lowering (ops added later included); the named ones have dedicated tests
    **{name: _QNN for name in QNN_LOWERINGS},
    **{name: _QNN_NUMPY for name in (
        "qnn.abs", "qnn.avg_pool2d", "qnn.batch_matmul", "qnn.concatenate", "qnn.conv2d",
        "qnn.conv2d_transpose", "qnn.dense", "qnn.erf", "qnn.exp", "qnn.hardswish",
        "qnn.leaky_relu", "qnn.log", "qnn.rsqrt", "qnn.sigmoid", "qnn.sqrt", "qnn.tanh")},
    **{name: _PACKED for name in (
        "nn.contrib_conv2d_gemm_weight_transform",
        "nn.contrib_conv2d_gemm_without_weight_transform",
        "nn.contrib_conv2d_winograd_weight_transform",
        "nn.contrib_conv2d_winograd_without_weight_transform")},
}
