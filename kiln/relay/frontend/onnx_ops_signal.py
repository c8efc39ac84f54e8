"""ONNX converters: signal processing (DFT).

A float32 inverse DFT (not one-sided) whose length factors into 2, 3, 4 and 5 runs NumPy's
float32 FFT passes (:mod:`.onnx_fft`), so it rounds as ONNX's reference does (NumPy's forward
float32 FFT computes in double: its scale factor is a Python int). Otherwise a DFT of static
length is a product with constant cosine and sine matrices: the transform
axis moves last, two ``nn.matmul``\\ s in float64 give the real and imaginary parts (float64
so that outputs that are exactly zero in ONNX's reference, which uses ``np.fft``, stay within
its absolute tolerance), and the result is cast back.
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_fft import complex_fft, pocketfft_factors
from kiln.relay.frontend.onnx_ops_math import matmul
from kiln.relay.frontend.onnx_registry import OnnxOpConverter, register, unsupported

_WIDE = "float64"


def _move_last(x, axis: int, rank: int):
    order = [a for a in range(rank) if a != axis] + [axis]
    return relay.transpose(x, order), np.argsort(order).tolist()


def _fit(x, length: int, have: int, ctx):
    """``x`` (transform axis last) cut or zero-padded to ``length`` along that axis."""
    rank = ctx.rank(x)
    if length < have:
        return relay.strided_slice(x, [0], [length], axes=[rank - 1])
    if length > have:
        return relay.nn.pad(x, [(0, 0)] * (rank - 1) + [(0, length - have)])
    return x


def _matrices(rows: int, cols: int, period: int, inverse: bool, weights=None):
    """cos and sin of 2*pi*k*n/period for output index k (rows) and input index n (cols),
    transposed for ``x @ M``; inverse transforms carry 1/period and per-input ``weights``."""
    k = np.arange(rows)[:, None]
    n = np.arange(cols)[None, :]
    angle = 2.0 * np.pi * ((k * n) % period) / period
    cos, sin = np.cos(angle), np.sin(angle)
    if inverse:
        scale = (np.ones(cols) if weights is None else weights)[None, :] / period
        cos, sin = cos * scale, sin * scale
    return relay.const(cos.T.astype(_WIDE)), relay.const(sin.T.astype(_WIDE))


def _dft(x, axis: int, length: int | None, inverse: bool, onesided: bool, ctx):
    shape = ctx.shape(x)
    if not is_static(shape):
        raise unsupported("DFT", "an input with unknown dimensions")
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis
    if not 0 < axis < rank - 1 or shape[-1] not in (1, 2):
        raise unsupported("DFT", f"axis {axis} of a {list(shape)} input")
    dtype = ctx.dtype(x)
    length_now = length or shape[axis]
    if dtype == "float32" and inverse and not onesided and pocketfft_factors(length_now):
        return _numpy_fft(x, axis, length_now, inverse, ctx)
    wide = relay.cast(x, _WIDE)
    real = relay.squeeze(relay.strided_slice(wide, [0], [1], axes=[rank - 1]), [rank - 1])
    imag = relay.squeeze(relay.strided_slice(wide, [1], [2], axes=[rank - 1]), [rank - 1]) \
        if shape[-1] == 2 else None
    real, back = _move_last(real, axis, rank - 1)
    imag = _move_last(imag, axis, rank - 1)[0] if imag is not None else None
    have = shape[axis]
    if inverse and onesided:
        # numpy's irfft: the first n // 2 + 1 bins of a Hermitian spectrum give a real signal
        length = length or 2 * (have - 1)
        bins = length // 2 + 1
        real, imag = (_fit(p, bins, have, ctx) if p is not None else None for p in (real, imag))
        weights = np.full(bins, 2.0)
        weights[0] = 1.0
        if length % 2 == 0:
            weights[-1] = 1.0
        cos, sin = _matrices(length, bins, length, True, weights)
        out = matmul(real, cos, ctx)
        if imag is not None:
            out = relay.subtract(out, matmul(imag, sin, ctx))
        parts = [out]
    else:
        length = length or have
        real, imag = (_fit(p, length, have, ctx) if p is not None else None for p in (real, imag))
        rows = length // 2 + 1 if onesided else length
        cos, sin = _matrices(rows, length, length, inverse)
        sign = 1.0 if inverse else -1.0
        re = matmul(real, cos, ctx)
        im = relay.multiply(matmul(real, sin, ctx), relay.const(sign, _WIDE))
        if imag is not None:
            re = relay.subtract(re, relay.multiply(matmul(imag, sin, ctx),
                                                   relay.const(sign, _WIDE)))
            im = relay.add(im, matmul(imag, cos, ctx))
        parts = [re, im]
    parts = [relay.transpose(p, back) for p in parts]
    return relay.cast(relay.stack(parts, axis=rank - 1), dtype)


def _numpy_fft(x, axis: int, length: int, inverse: bool, ctx):
    """The transform as NumPy's float32 FFT rounds it (:mod:`.onnx_fft`)."""
    shape = ctx.shape(x)
    rank = len(shape)
    real = relay.squeeze(relay.strided_slice(x, [0], [1], axes=[rank - 1]), [rank - 1])
    imag = relay.squeeze(relay.strided_slice(x, [1], [2], axes=[rank - 1]), [rank - 1]) \
        if shape[-1] == 2 else relay.zeros_like(real)
    real, back = _move_last(real, axis, rank - 1)
    imag = _move_last(imag, axis, rank - 1)[0]
    real, imag = (_fit(p, length, shape[axis], ctx) for p in (real, imag))
    batch = tuple(ctx.shape(real)[:-1])
    parts = complex_fft(real, imag, batch, length, inverse, "float32")
    return relay.stack([relay.transpose(p, back) for p in parts], axis=rank - 1)


def _length(ctx, expr):
    if expr is None:
        return None
    value = ctx.value(expr)
    if value is None:
        raise unsupported("DFT", "a dft_length known only at run time")
    return int(np.asarray(value).reshape(-1)[0])


@register("DFT")
class DFT(OnnxOpConverter):
    """DFT: ``axis`` an attribute at opset 17, an input from 20 (then the default is -2)."""

    @classmethod
    def _impl_v17(cls, inputs, attrs, ctx):
        length = _length(ctx, inputs[1] if len(inputs) > 1 else None)
        return _dft(inputs[0], attrs.get("axis", 1), length, bool(attrs.get("inverse", 0)),
                    bool(attrs.get("onesided", 0)), ctx)

    @classmethod
    def _impl_v20(cls, inputs, attrs, ctx):
        length = _length(ctx, inputs[1] if len(inputs) > 1 else None)
        axis = -2
        if len(inputs) > 2 and inputs[2] is not None:
            value = ctx.value(inputs[2])
            if value is None:
                raise unsupported("DFT", "an axis known only at run time")
            axis = int(np.asarray(value).reshape(-1)[0])
        return _dft(inputs[0], axis, length, bool(attrs.get("inverse", 0)),
                    bool(attrs.get("onesided", 0)), ctx)
