"""Layout strings (``NCHW``, ``NCHW8c``, ``OIHW4i8o``) and NumPy layout transforms.

Entry point: :func:`layout_transform`. Layout strings are parsed by the op layer's
:func:`~kiln.relay.op.layout.parse_layout`: upper-case letters are primal axes; a lower-case
letter with a factor (``8c``) is a sub-axis of its primal (``C``), so ``C = c_outer * 8 + c``.
"""

from __future__ import annotations

import numpy as np

from kiln.relay.op.layout import parse_layout
from kiln.runtime.error import TVMError

__all__ = ["layout_transform"]


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


def layout_transform(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Transform ``x`` from layout ``src`` to ``dst`` (e.g. NCHW → NCHW8c)."""
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
