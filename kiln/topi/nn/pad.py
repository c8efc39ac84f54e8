"""Padding computes (TVM's ``topi.nn.pad`` and ``mirror_pad``).

Entry points: :func:`pad` (``constant``, ``edge``, ``reflect``), :func:`mirror_pad`
(``SYMMETRIC``, ``REFLECT``), :func:`source_index` (the read position of a padded element,
shared with the run-time-width ``dyn.nn.pad``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi import tag


def _widths(x: te.Tensor, pad_before: Sequence[Any], pad_after: Sequence[Any] | None):
    before = list(pad_before) + [0] * (x.ndim - len(pad_before))
    after = list(pad_before if pad_after is None else pad_after)
    after += [0] * (x.ndim - len(after))
    if len(before) != x.ndim or len(after) != x.ndim:
        raise TVMError(f"pad: {len(before)} pad widths for a tensor of rank {x.ndim}")
    return before, after


def in_bounds(pos: Any, size: Any) -> Any:
    return _op.logical_and(pos >= 0, pos < size)


def clamp(pos: Any, size: Any) -> Any:
    """``pos`` kept inside ``[0, size)``: reads guarded by a condition stay in bounds."""
    return _op.min(_op.max(pos, 0), size - 1)


def pad(x: te.Tensor, pad_before: Sequence[Any], pad_after: Sequence[Any] | None = None,
        pad_value: Any = 0.0, name: str = "PadInput", pad_mode: str = "constant") -> te.Tensor:
    """``x`` padded by ``pad_before``/``pad_after`` elements per axis."""
    before, after = _widths(x, pad_before, pad_after)
    if all(isinstance(b, int) and b == 0 for b in before + after):
        return x
    shape = [d + b + a for d, b, a in zip(x.shape, before, after)]
    if pad_mode in ("edge", "reflect"):
        return _mirror(x, before, shape, "EDGE" if pad_mode == "edge" else "REFLECT", name)
    if pad_mode != "constant":
        raise TVMError(f"pad: pad_mode must be constant, edge or reflect, got {pad_mode!r}")
    value = pad_value if isinstance(pad_value, te.Tensor) else _op.const(pad_value, x.dtype)

    def body(*i):
        src = [v - b for v, b in zip(i, before)]
        conds = [in_bounds(s, d) for s, d, b, a in zip(src, x.shape, before, after)
                 if not (isinstance(b, int) and b == 0 and isinstance(a, int) and a == 0)]
        cond = conds[0]
        for c in conds[1:]:
            cond = _op.logical_and(cond, c)
        fill = value() if isinstance(value, te.Tensor) else value
        return _op.if_then_else(cond, x(*[clamp(s, d) for s, d in zip(src, x.shape)]), fill)

    return te.compute(shape, body, name=name, tag=tag.INJECTIVE + ",pad")


def source_index(pos: Any, size: Any, mode: str) -> Any:
    """The position of ``x`` that padded position ``pos`` (relative to the first element of
    ``x``, so negative in the leading pad) reads in mode ``EDGE``, ``REFLECT`` or ``SYMMETRIC``.
    """
    if mode == "EDGE":
        return clamp(pos, size)
    # REFLECT excludes the edge (numpy "reflect"), SYMMETRIC repeats it.
    low = -pos if mode == "REFLECT" else -pos - 1
    high = 2 * (size - 1) - pos if mode == "REFLECT" else 2 * size - 1 - pos
    return _op.if_then_else(pos < 0, low, _op.if_then_else(pos >= size, high, pos))


def _mirror(x: te.Tensor, before: list, shape: list, mode: str, name: str) -> te.Tensor:
    def body(*i):
        return x(*[source_index(v - b, d, mode) for v, b, d in zip(i, before, x.shape)])

    return te.compute(shape, body, name=name, tag=tag.INJECTIVE + ",pad")


def mirror_pad(x: te.Tensor, pad_before: Sequence[Any], pad_after: Sequence[Any] | None = None,
               mode: str = "SYMMETRIC", name: str = "MirrorPadInput") -> te.Tensor:
    """``x`` padded with its own mirrored edge (``SYMMETRIC`` or ``REFLECT``)."""
    if mode not in ("SYMMETRIC", "REFLECT"):
        raise TVMError(f"mirror_pad: mode must be SYMMETRIC or REFLECT, got {mode!r}")
    before, after = _widths(x, pad_before, pad_after)
    shape = [d + b + a for d, b, a in zip(x.shape, before, after)]
    return _mirror(x, before, shape, mode, name)
