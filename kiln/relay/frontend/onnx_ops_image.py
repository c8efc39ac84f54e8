"""ONNX converters: sampling images at given coordinates (GridSample) and small-matrix
determinants (Det), as compositions of Relay tensor ops.

GridSample follows ONNX's definition (PyTorch's ``grid_sample``) for any number of spatial
axes: each axis unnormalizes its grid coordinate, rounds it (``nearest``) or takes the 2
(``linear``) or 4 (``cubic``, Keys a = -0.75) neighbouring taps, applies the padding mode to
coordinates and taps, and the taps of all axes combine by product weights into one gather
from the flattened image.
"""

from __future__ import annotations

import itertools

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import register_function, unsupported

_F = "float32"
_CUBIC_A = -0.75


def _c(value, dtype=_F):
    return relay.const(np.asarray(value, dtype=dtype))


def _reflect(x, low: float, high: float):
    """``x`` folded into ``[low, high]`` by reflecting at the near border, repeatedly."""
    span = _c(high - low)

    def fold(distance, near, far):
        times = relay.trunc(relay.divide(distance, span))
        rest = relay.subtract(distance, relay.multiply(times, span))
        even = relay.equal(relay.floor_mod(times, _c(2.0)), _c(0.0))
        return relay.where(even, near(rest), far(rest))

    below = fold(relay.subtract(_c(low), x), lambda r: relay.add(_c(low), r),
                 lambda r: relay.subtract(_c(high), r))
    above = fold(relay.subtract(x, _c(high)), lambda r: relay.subtract(_c(high), r),
                 lambda r: relay.add(_c(low), r))
    folded = relay.where(relay.less(x, _c(low)), below,
                         relay.where(relay.greater(x, _c(high)), above, x))
    # a fused kernel prints its expression as a tree: without a materialized result each
    # nested reflection would multiply the code of the ones inside it
    return relay.annotation.stop_fusion(folded)


def _tap(index, size: int, low: float, high: float, padding: str):
    """(clamped int index, inside mask or None) of an integer-valued float tap position."""
    if padding == "reflection":
        index = relay.trunc(_reflect(index, low, high))
    inside = None
    if padding == "zeros":
        inside = relay.logical_and(relay.greater_equal(index, _c(0.0)),
                                   relay.less(index, _c(float(size))))
    clamped = relay.clip(index, 0.0, float(size - 1))
    return relay.cast(clamped, "int64"), inside


def _cubic_weights(t):
    a = _CUBIC_A

    def near(d):  # |d| <= 1
        return relay.add(relay.multiply(relay.multiply(
            relay.subtract(relay.multiply(_c(a + 2), d), _c(a + 3)), d), d), _c(1.0))

    def far(d):  # 1 < |d| < 2
        inner = relay.add(relay.multiply(relay.subtract(relay.multiply(_c(a), d), _c(5 * a)),
                                         d), _c(8 * a))
        return relay.subtract(relay.multiply(inner, d), _c(4 * a))

    one = _c(1.0)
    return [far(relay.add(t, one)), near(t), near(relay.subtract(one, t)),
            far(relay.subtract(_c(2.0), t))]


def _axis_taps(coord, size: int, mode: str, padding: str, align: bool):
    """[(int64 index, weight or None, inside mask or None)] along one spatial axis."""
    if align:
        x = relay.multiply(relay.divide(relay.add(coord, _c(1.0)), _c(2.0)), _c(size - 1.0))
        low, high = 0.0, size - 1.0
    else:
        x = relay.divide(relay.subtract(relay.multiply(relay.add(coord, _c(1.0)),
                                                       _c(float(size))), _c(1.0)), _c(2.0))
        low, high = -0.5, size - 0.5
    if mode == "nearest":
        x = relay.round(x)
    outside = relay.logical_or(relay.less(x, _c(low)), relay.greater(x, _c(high)))
    if padding == "border":
        x = relay.where(outside, relay.clip(x, 0.0, size - 1.0), x)
    elif padding == "reflection":
        x = _reflect(x, low, high)
    if mode == "nearest":
        index, inside = _tap(relay.trunc(x), size, low, high, padding)
        return [(index, None, inside)]
    base = relay.floor(x)
    frac = relay.subtract(x, base)
    if mode == "linear":
        offsets, weights = (0, 1), [relay.subtract(_c(1.0), frac), frac]
    else:
        offsets, weights = (-1, 0, 1, 2), _cubic_weights(frac)
    taps = []
    for offset, weight in zip(offsets, weights):
        index, inside = _tap(relay.add(base, _c(float(offset))), size, low, high, padding)
        taps.append((index, weight, inside))
    return taps


def _grid_sample(inputs, attrs, ctx):
    x, grid = inputs
    shape, grid_shape = ctx.shape(x), ctx.shape(grid)
    if not is_static(shape) or not is_static(grid_shape):
        raise unsupported("GridSample", "inputs with unknown dimensions")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "linear"),
                                                           attrs.get("mode", "linear"))
    padding = attrs.get("padding_mode", "zeros")
    if mode not in ("nearest", "linear", "cubic") or \
            padding not in ("zeros", "border", "reflection"):
        raise unsupported("GridSample", f"mode {mode!r} with padding_mode {padding!r}")
    align = bool(attrs.get("align_corners", 0))
    dtype = ctx.dtype(x)
    n, c, spatial = shape[0], shape[1], list(shape[2:])
    rank = len(spatial)
    out_points = int(np.prod(grid_shape[1:-1]))
    coords = relay.cast(relay.reshape(grid, [n, out_points, rank]), _F)
    per_axis = []
    for axis, size in enumerate(spatial):
        # the grid lists coordinates innermost axis first (x, y, z)
        coord = relay.squeeze(relay.strided_slice(coords, [rank - 1 - axis], [rank - axis],
                                                  axes=[2]), [2])
        per_axis.append(_axis_taps(coord, size, mode, padding, align))
    strides = [int(np.prod(spatial[k + 1:])) for k in range(rank)]
    flat = relay.reshape(x, [n, c, -1])
    total = None
    for combo in itertools.product(*per_axis):
        index, weight, inside = None, None, None
        for (idx, w, mask), stride in zip(combo, strides):
            term = relay.multiply(idx, relay.const(stride, "int64")) if stride != 1 else idx
            index = term if index is None else relay.add(index, term)
            if w is not None:
                weight = w if weight is None else relay.multiply(weight, w)
            if mask is not None:
                inside = mask if inside is None else relay.logical_and(inside, mask)
        picks = relay.gather(flat, 2, relay.broadcast_to(
            relay.expand_dims(index, 1), [n, c, out_points]))
        value = relay.cast(picks, _F)
        if weight is not None:
            value = relay.multiply(value, relay.expand_dims(weight, 1))
        if inside is not None:
            value = relay.where(relay.expand_dims(inside, 1), value, relay.zeros_like(value))
        total = value if total is None else relay.add(total, value)
    return relay.cast(relay.reshape(total, [n, c, *grid_shape[1:-1]]), dtype)


register_function("GridSample", _grid_sample, since=16)


# ---- determinants ---------------------------------------------------------------------------
_MAX_DET_ORDER = 4


def _permutation_sign(perm) -> int:
    sign, seen = 1, list(perm)
    for i in range(len(seen)):
        while seen[i] != i:
            j = seen[i]
            seen[i], seen[j] = seen[j], seen[i]
            sign = -sign
    return sign


def _det(inputs, attrs, ctx):
    """Det of (..., n, n) matrices by the Leibniz expansion, for n up to 4 (at most 24
    products; larger matrices would need a pivoting LU kiln does not have)."""
    x = inputs[0]
    shape = ctx.shape(x)
    if len(shape) < 2 or not is_static(shape[-2:]) or shape[-1] != shape[-2]:
        raise unsupported("Det", f"an input of shape {list(shape)}")
    order = shape[-1]
    if order > _MAX_DET_ORDER:
        raise unsupported("Det", f"{order}x{order} matrices (kiln expands up to "
                          f"{_MAX_DET_ORDER}x{_MAX_DET_ORDER})")
    rank = len(shape)
    entries = [[relay.squeeze(relay.strided_slice(x, [i, j], [i + 1, j + 1],
                                                  axes=[rank - 2, rank - 1]),
                              [rank - 2, rank - 1]) for j in range(order)]
               for i in range(order)]
    total = None
    for perm in itertools.permutations(range(order)):
        term = entries[0][perm[0]]
        for row in range(1, order):
            term = relay.multiply(term, entries[row][perm[row]])
        if total is None:
            total = term if _permutation_sign(perm) > 0 else relay.negative(term)
        elif _permutation_sign(perm) > 0:
            total = relay.add(total, term)
        else:
            total = relay.subtract(total, term)
    return total


register_function("Det", _det, since=11)
