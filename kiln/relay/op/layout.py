"""Data layouts such as ``NCHW``, ``NHWC``, ``OIHW`` and ``NCHW8c`` for shape relations and
reference rules.

Entry points: :func:`parse_layout`, :func:`convert_shape`, :func:`convert_array` (a NumPy
array between layouts), :func:`axis_index`.

A layout names each dimension by a letter: an upper-case letter is a *primal* axis (``C``),
a lower-case letter with a factor is a *sub*-axis split off it (``8c``: the channel axis split
in blocks of 8). Converting a shape between two layouts of the same primal axes first rebuilds
each primal extent (``C = C_outer * 8``) and then splits/permutes for the destination layout.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.relay.op.type_relations import dim_op, fail, is_static
from kiln.runtime.error import TVMError

__all__ = ["parse_layout", "convert_shape", "convert_array", "axis_index"]

_TOKEN = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str, op_name: str) -> list[tuple[str, int | None]]:
    """``"NCHW8c"`` -> ``[("N", None), ("C", None), ("H", None), ("W", None), ("c", 8)]``."""
    if not layout or "".join(m.group(0) for m in _TOKEN.finditer(layout)) != layout:
        fail(f"{op_name}: invalid layout {layout!r}")
    axes: list[tuple[str, int | None]] = []
    for factor, letter in _TOKEN.findall(layout):
        if letter.isupper() and factor:
            fail(f"{op_name}: layout {layout!r}: primal axis {letter} cannot have a factor")
        if letter.islower() and not factor:
            fail(f"{op_name}: layout {layout!r}: sub-axis {letter} needs a factor (e.g. 8{letter})")
        axes.append((letter, int(factor) if factor else None))
    letters = [a for a, _ in axes]
    if len(set(letters)) != len(letters):
        fail(f"{op_name}: layout {layout!r} repeats an axis")
    for letter, _ in axes:
        if letter.islower() and letter.upper() not in letters:
            fail(f"{op_name}: layout {layout!r}: sub-axis {letter} has no primal axis")
    return axes


def axis_index(layout: str, letter: str, op_name: str) -> int:
    """Position of axis ``letter`` in ``layout``; error when the layout lacks it."""
    letters = [a for a, _ in parse_layout(layout, op_name)]
    if letter not in letters:
        fail(f"{op_name}: layout {layout!r} has no {letter} axis")
    return letters.index(letter)


def convert_shape(shape: Sequence[Any], src: str, dst: str, op_name: str) -> list[Any]:
    """The shape of a ``src``-layout tensor once transformed to layout ``dst``."""
    src_axes = parse_layout(src, op_name)
    dst_axes = parse_layout(dst, op_name)
    if len(shape) != len(src_axes):
        fail(f"{op_name}: a tensor of rank {len(shape)} does not have layout {src!r}")
    src_primal = {a for a, _ in src_axes if a.isupper()}
    dst_primal = {a for a, _ in dst_axes if a.isupper()}
    if src_primal != dst_primal:
        fail(f"{op_name}: layouts {src!r} and {dst!r} do not have the same primal axes")
    primal: dict[str, Any] = {}
    for (letter, _), extent in zip(src_axes, shape):
        if letter.isupper():
            primal[letter] = extent
    for (letter, factor), extent in zip(src_axes, shape):
        if letter.islower():
            if is_static(extent) and extent != factor:
                fail(f"{op_name}: axis {factor}{letter} of layout {src!r} has extent {extent}")
            primal[letter.upper()] = dim_op(lambda a, f=factor: a * f, primal[letter.upper()])
    sub_factor = {letter.upper(): factor for letter, factor in dst_axes if letter.islower()}
    out = []
    for letter, factor in dst_axes:
        if letter.islower():
            out.append(factor)
            continue
        extent = primal[letter]
        split = sub_factor.get(letter)
        if split is not None:
            if is_static(extent) and extent % split:
                fail(f"{op_name}: axis {letter} of extent {extent} is not divisible by {split} "
                     f"for layout {dst!r}")
            extent = dim_op(lambda a, f=split: a // f, extent)
        out.append(extent)
    return out


def _to_primal(x: np.ndarray, layout: list[tuple[str, int | None]]) -> tuple[np.ndarray, str]:
    names = [n for n, _ in layout]
    primal = [n for n in names if n.isupper()]
    order = []
    for p in primal:
        order.append(names.index(p))
        if p.lower() in names:
            order.append(names.index(p.lower()))
    x = np.transpose(x, order)
    shape, i = [], 0
    for p in primal:
        if p.lower() in names:
            shape.append(x.shape[i] * x.shape[i + 1])
            i += 2
        else:
            shape.append(x.shape[i])
            i += 1
    return x.reshape(shape), "".join(primal)


def convert_array(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """``x`` (a NumPy array) transformed from layout ``src`` to ``dst`` (NCHW → NCHW8c): the
    reference semantics of ``layout_transform``, and how reference rules reach their
    canonical layouts."""
    src_axes = parse_layout(src, "layout_transform")
    dst_axes = parse_layout(dst, "layout_transform")
    if x.ndim != len(src_axes):
        raise TVMError(f"layout_transform: {src} has {len(src_axes)} axes, data has {x.ndim}")
    primal_x, primal = _to_primal(x, src_axes)
    dst_primal = "".join(n for n, _ in dst_axes if n.isupper())
    if sorted(primal) != sorted(dst_primal):
        raise TVMError(f"layout_transform: {src} and {dst} have different primal axes")
    factors = {n.upper(): f for n, f in dst_axes if n.islower()}
    # split each primal axis that dst subdivides, in primal order: P -> (P_outer, p)
    shape, names = [], []
    for i, p in enumerate(primal):
        n = primal_x.shape[i]
        if p in factors:
            f = factors[p]
            if n % f:
                raise TVMError(f"layout_transform: axis {p} of size {n} is not divisible by {f}")
            shape += [n // f, f]
            names += [p, p.lower()]
        else:
            shape.append(n)
            names.append(p)
    split = primal_x.reshape(shape)
    return np.ascontiguousarray(np.transpose(split, [names.index(n) for n, _ in dst_axes]))
