"""Pixel rearrangements (TVM's ``topi.nn.depth_to_space``, ``space_to_depth``, ``upsampling``).

Entry points: :func:`depth_to_space` (``DCR``/``CRD``), :func:`space_to_depth`,
:func:`upsampling`.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi import tag
from kiln.topi.utils import get_const_tuple


def _layout_axes(layout: str):
    if layout not in ("NCHW", "NHWC"):
        raise TVMError(f"layout must be NCHW or NHWC, got {layout!r}")
    return [layout.index(a) for a in "NCHW"]


def depth_to_space(data: te.Tensor, block_size: int, layout: str = "NCHW",
                   mode: str = "DCR") -> te.Tensor:
    """Move ``block_size**2`` channel blocks into space."""
    n_ax, c_ax, h_ax, w_ax = _layout_axes(layout)
    shape = list(get_const_tuple(data.shape))
    b = block_size
    out_c = shape[c_ax] // (b * b)
    out = list(shape)
    out[c_ax], out[h_ax], out[w_ax] = out_c, shape[h_ax] * b, shape[w_ax] * b

    def body(*i):
        y, x, c = i[h_ax], i[w_ax], i[c_ax]
        by, bx = _op.floormod(y, b), _op.floormod(x, b)
        if mode == "DCR":
            src_c = (by * b + bx) * out_c + c
        else:
            src_c = c * b * b + by * b + bx
        src = list(i)
        src[c_ax], src[h_ax], src[w_ax] = src_c, _op.floordiv(y, b), _op.floordiv(x, b)
        return data(*src)

    return te.compute(out, body, name="T_depth_to_space", tag=tag.INJECTIVE)


def space_to_depth(data: te.Tensor, block_size: int, layout: str = "NCHW") -> te.Tensor:
    """Move ``block_size x block_size`` spatial blocks into channels."""
    n_ax, c_ax, h_ax, w_ax = _layout_axes(layout)
    shape = list(get_const_tuple(data.shape))
    b = block_size
    out = list(shape)
    out[c_ax], out[h_ax], out[w_ax] = shape[c_ax] * b * b, shape[h_ax] // b, shape[w_ax] // b
    in_c = shape[c_ax]

    def body(*i):
        c = i[c_ax]
        block = _op.floordiv(c, in_c)
        src = list(i)
        src[c_ax] = _op.floormod(c, in_c)
        src[h_ax] = i[h_ax] * b + _op.floordiv(block, b)
        src[w_ax] = i[w_ax] * b + _op.floormod(block, b)
        return data(*src)

    return te.compute(out, body, name="T_space_to_depth", tag=tag.INJECTIVE)


def upsampling(data: te.Tensor, scale_h: float, scale_w: float, layout: str = "NCHW",
               method: str = "nearest_neighbor", align_corners: bool = False,
               out_size: Any = None) -> te.Tensor:
    """Resize by ``scale_h``/``scale_w`` (nearest, bilinear or bicubic).

    ``out_size`` gives the output ``(H, W)`` instead when the scales are run-time values
    (``dyn.nn.upsampling``: its shape function rounds ``extent * scale`` the same way).
    """
    from kiln.topi.image.resize import resize2d

    n_ax, c_ax, h_ax, w_ax = _layout_axes(layout)
    if out_size is not None:
        size = tuple(out_size)
    else:
        shape = get_const_tuple(data.shape)
        size = (int(round(shape[h_ax] * scale_h)), int(round(shape[w_ax] * scale_w)))
    method = {"nearest_neighbor": "nearest_neighbor", "bilinear": "linear",
              "bicubic": "cubic"}.get(method)
    if method is None:
        raise TVMError("upsampling: method must be nearest_neighbor, bilinear or bicubic")
    mode = "align_corners" if align_corners else "asymmetric"
    if method != "nearest_neighbor" and not align_corners:
        mode = "half_pixel"
    return resize2d(data, [0.0] * 4, size, layout, method, mode,
                    "floor" if method == "nearest_neighbor" else "")
