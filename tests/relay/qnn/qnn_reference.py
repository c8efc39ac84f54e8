"""Independent NumPy references for the QNN ops (integer math on Python ints / int64, written
from the ops' definitions, never from kiln's lowering), and :func:`run` to evaluate one."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

import kiln
from kiln import relay


def run(expr, inputs, kind):
    """Evaluate ``expr`` (free vars bound from ``inputs`` by name) with executor ``kind``."""
    func = relay.Function(relay.analysis.free_vars(expr), expr)
    mod = kiln.IRModule.from_expr(func)
    names = [v.name_hint for v in func.params]
    out = relay.create_executor(kind, mod=mod, target="llvm").evaluate()(
        *[inputs[n] for n in names])
    return out.numpy()


def _along(v, ndim, axis):
    v = np.asarray(v)
    if v.ndim == 1 and v.size > 1:
        shape = [1] * ndim
        shape[axis] = v.size
        return v.reshape(shape)
    return v


def numpy_requantize(q, in_scale, in_zp, out_scale, out_zp, axis, rounding, out_dtype):
    """Requantize from the math: exact rational product, rounded by ``rounding``, written
    independently of the fixed-point lowering (Python ints, per element)."""

    ndim = q.ndim
    in_scale = np.broadcast_to(_along(np.float32(in_scale), ndim, axis), q.shape)
    out_scale = np.broadcast_to(_along(np.float32(out_scale), ndim, axis), q.shape)
    in_zp = np.broadcast_to(_along(in_zp, ndim, axis), q.shape)
    out_zp = np.broadcast_to(_along(out_zp, ndim, axis), q.shape)
    info = np.iinfo(out_dtype)
    out = np.empty(q.shape, out_dtype)
    for idx in np.ndindex(q.shape):
        ratio = Fraction(float(in_scale[idx])) / Fraction(float(out_scale[idx]))
        v = (int(q[idx]) - int(in_zp[idx])) * ratio
        if rounding == "TONEAREST":  # half away from zero
            r = int((abs(v) + Fraction(1, 2)).__floor__()) * (1 if v >= 0 else -1)
        else:  # UPWARD: half toward +inf
            r = int((v + Fraction(1, 2)).__floor__())
        out[idx] = min(max(r + int(out_zp[idx]), info.min), info.max)
    return out


def _per_out(param, n):
    """A scalar or per-channel parameter as an int64 vector of ``n`` values."""
    return np.broadcast_to(np.asarray(param, "int64").reshape(-1), (n,))


def conv2d_nchw(data, weight, zp_a, zp_w, strides=(1, 1), padding=(0, 0, 0, 0),
                dilation=(1, 1), groups=1):
    """sum (A - zp_a)(W - zp_w[o]) over each window in int64, NCHW data and OIHW weight;
    A is ``data`` padded with zp_a (so padding contributes zero)."""
    n, c, h, w = data.shape
    oc, icg, kh, kw = weight.shape
    a = data.astype("int64") - int(zp_a)
    a = np.pad(a, ((0, 0), (0, 0), (padding[0], padding[2]), (padding[1], padding[3])))
    wt = weight.astype("int64") - _per_out(zp_w, oc)[:, None, None, None]
    sh, sw = strides
    dh, dw = dilation
    oh = (a.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (a.shape[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow), "int64")
    ocg = oc // groups
    for o in range(oc):
        g = o // ocg
        for y in range(kh):
            for x in range(kw):
                patch = a[:, g * icg:(g + 1) * icg,
                          y * dh:y * dh + (oh - 1) * sh + 1:sh,
                          x * dw:x * dw + (ow - 1) * sw + 1:sw]
                out[:, o] += np.einsum("nchw,c->nhw", patch, wt[o, :, y, x])
    return out


def dense(data, weight, zp_a, zp_w):
    """(x - zp_a) @ (w - zp_w[u]).T in int64."""
    wt = weight.astype("int64") - _per_out(zp_w, weight.shape[0])[:, None]
    return (data.astype("int64") - int(zp_a)) @ wt.T


def batch_matmul(x, y, zp_x, zp_y):
    """(x[b] - zp_x) @ (y[b] - zp_y).T in int64."""
    return np.einsum("bmk,bnk->bmn", x.astype("int64") - int(zp_x),
                     y.astype("int64") - int(zp_y))
