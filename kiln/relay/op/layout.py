"""Data layouts such as ``NCHW``, ``NHWC``, ``OIHW`` and ``NCHW8c`` for shape relations and
reference rules.

Entry points: :func:`parse_layout`, :func:`convert_shape`, :func:`convert_array` (a NumPy
array between layouts), :func:`axis_index`; for ``FInferCorrectLayout`` rules (how an op
follows its inputs into another layout, asked by AlterOpLayout):
:class:`InferCorrectLayoutOutput`, :func:`primal_layout`, :func:`attrs_with` and the shared
rules :func:`elemwise_arbitrary_layout` and :func:`binary_broadcast_layout`.

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

__all__ = ["parse_layout", "convert_shape", "convert_array", "axis_index",
           "InferCorrectLayoutOutput", "primal_layout", "attrs_with",
           "elemwise_arbitrary_layout", "binary_broadcast_layout"]

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
        if letter.islower() and int(factor) == 0:
            fail(f"{op_name}: layout {layout!r}: sub-axis {letter} has factor 0; a block "
                 f"factor must be positive")
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


# ---- FInferCorrectLayout ------------------------------------------------------------------------
# A rule ``(attrs, new_in_layouts, old_in_layouts, old_in_types) -> InferCorrectLayoutOutput``
# (TVM's signature; kiln's layouts are strings, "" for unknown). ``old_in_layouts`` are the
# inputs' layouts in the original program, ``new_in_layouts`` where AlterOpLayout has them now;
# the rule answers the layouts it needs its inputs in ("" = the original one), its outputs'
# layouts and, when following a new layout changes the op, its new attrs. A tuple argument
# (concatenate) contributes one entry per field to each list.


class InferCorrectLayoutOutput:
    """What an ``FInferCorrectLayout`` rule answers (TVM's
    ``relay.transform.InferCorrectLayoutOutput``)."""

    __slots__ = ("input_layouts", "output_layouts", "new_attrs")

    def __init__(self, input_layouts: Sequence[str], output_layouts: Sequence[str],
                 new_attrs: Any = None) -> None:
        self.input_layouts = [str(x) for x in input_layouts]
        self.output_layouts = [str(x) for x in output_layouts]
        self.new_attrs = new_attrs

    def __repr__(self) -> str:
        return (f"InferCorrectLayoutOutput({self.input_layouts}, {self.output_layouts}, "
                f"{self.new_attrs!r})")


def primal_layout(layout: str) -> str:
    """The primal axes of ``layout`` in its order: ``NCHW16c`` -> ``NCHW``."""
    return "".join(letter for letter in layout if letter.isupper())


def attrs_with(attrs: Any, **changes: Any) -> Any:
    """A copy of the attrs object ``attrs`` with ``changes`` to some fields."""
    return type(attrs)(**{**{k: attrs[k] for k in attrs.keys()}, **changes})


def elemwise_arbitrary_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """An elementwise op follows its (first known) input layout (TVM's
    ElemwiseArbitraryLayout)."""
    layout = next((x for x in new_in_layouts if x), "")
    return InferCorrectLayoutOutput([layout] * len(new_in_layouts), [layout])


def _rank(t: Any) -> int | None:
    return len(t.shape) if hasattr(t, "shape") else None


def binary_broadcast_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """A broadcasting op follows the layout of its full-rank input: an operand of lower rank
    (a ``[C, 1, 1]`` bias) is transformed to the matching suffix of that layout
    (``CHW16c``), an all-ones operand broadcasts as it is. Anything else (an operand with a
    broadcast channel axis the layout splits) keeps the original layouts (TVM's
    BinaryBroadcastLayout)."""
    keep = InferCorrectLayoutOutput([""] * len(new_in_layouts), [""])
    ranks = [_rank(t) for t in old_in_types]
    if None in ranks:
        return keep
    top = max(ranks)
    lead = next((i for i, x in enumerate(new_in_layouts)
                 if x and len(primal_layout(x)) == ranks[i] == top), None)
    if lead is None:
        return keep
    layout = new_in_layouts[lead]
    old = old_in_layouts[lead] or primal_layout(layout)
    wanted = []
    for i, t in enumerate(old_in_types):
        shape = [getattr(d, "value", d) for d in t.shape]
        if new_in_layouts[i] == layout:
            wanted.append(layout)
        elif all(d == 1 for d in shape):
            wanted.append("")
        else:
            sub = _suffix_layout(layout, old[top - ranks[i]:], shape)
            if sub is None:
                return keep
            wanted.append(sub)
    return InferCorrectLayoutOutput(wanted, [layout])


def _suffix_layout(layout: str, letters: str, shape: list) -> str | None:
    """``layout`` restricted to the primal ``letters`` (an operand of ``shape`` in that
    order), when that is a suffix of ``layout`` (right-aligned broadcasting still lines up)
    and every split axis divides; else None."""
    axes = parse_layout(layout, "layout")
    kept = [(a, f) for a, f in axes if a.upper() in letters]
    sub = "".join(f"{f or ''}{a}" for a, f in kept)
    if not layout.endswith(sub) or len(letters) + sum(a.islower() for a, _ in kept) != \
            len(kept):
        return None
    extent = dict(zip(letters, shape))
    for a, f in kept:
        if a.islower() and not (isinstance(extent[a.upper()], int) and
                                extent[a.upper()] % f == 0):
            return None
    return sub
