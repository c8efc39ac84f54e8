"""Relay ``reshape``'s special ``newshape`` values, resolved once for ints and TIR expressions.

Entry point: :func:`infer_newshape`. The interpreter resolves against concrete ``int``
shapes; the VM's shape functions resolve against int64 ``PrimExpr`` dimensions (read from
shape tensors at run time). Both call this one function, so the two executors cannot disagree
on what ``0``, ``-1``, ``-2``, ``-3`` and ``-4`` mean:

=====  ===================================================================================
code   meaning
=====  ===================================================================================
> 0    that extent
0      copy the input dimension at this position (a literal 0 when ``allowzero``)
-1     infer from the element count (at most once)
-2     copy all remaining input dimensions
-3     merge the next two input dimensions into one
-4     split the next input dimension into the two values that follow (one may be -1)
=====  ===================================================================================

Example
-------
>>> infer_newshape((2, 3, 4), (-4, 1, 2, -3))
[1, 2, 12]
>>> infer_newshape((6, 5), (0, -1))
[6, 5]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["infer_newshape", "element_count"]


def element_count(dims: Sequence[Any]) -> Any:
    """The product of ``dims`` (ints or expressions); 1 for a scalar."""
    total: Any = 1
    for d in dims:
        total = total * d
    return total


def _exact_quotient(total: Any, known: Any) -> Any:
    """``total // known``, and 0 when ``known`` is 0 (a zero-size tensor)."""
    if isinstance(total, int) and isinstance(known, int):
        return total // known if known else 0
    from kiln.tir import op as _op

    return _op.if_then_else(known == 0, total * 0, total // _op.max(known, 1))


def infer_newshape(shape: Sequence[Any], newshape: Sequence[int],
                   allowzero: bool = False) -> list[Any]:
    """The output shape of ``reshape(x, newshape)`` for ``x`` of ``shape``.

    ``shape`` holds ints or integer ``PrimExpr``\\ s; the codes in ``newshape`` are ints.
    The element count is not checked here (callers check it where they can).

    Example
    -------
    >>> infer_newshape((4, 6), (-1, 3))
    [8, 3]
    """
    spec = [int(v) for v in newshape]
    out: list[Any] = []
    infer_at = None
    src = i = 0
    while i < len(spec):
        code = spec[i]
        if code > 0 or (code == 0 and allowzero):
            out.append(code)
            src += 1
        elif code == 0:
            _need(shape, src + 1, newshape)
            out.append(shape[src])
            src += 1
        elif code == -1:
            if infer_at is not None:
                raise TVMError(f"reshape: newshape {list(newshape)} has more than one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif code == -2:
            out.extend(shape[src:])
            src = len(shape)
        elif code == -3:
            _need(shape, src + 2, newshape)
            out.append(shape[src] * shape[src + 1])
            src += 2
        elif code == -4:
            if i + 2 >= len(spec):
                raise TVMError(f"reshape: -4 in newshape {list(newshape)} needs two values "
                               "after it")
            _need(shape, src + 1, newshape)
            first, second = spec[i + 1], spec[i + 2]
            whole = shape[src]
            first = _exact_quotient(whole, second) if first == -1 else first
            second = _exact_quotient(whole, first) if second == -1 else second
            out.extend([first, second])
            src += 1
            i += 2
        else:
            raise TVMError(f"reshape: invalid value {code} in newshape {list(newshape)}")
        i += 1
    if infer_at is not None:
        known = element_count(d for k, d in enumerate(out) if k != infer_at)
        out[infer_at] = _exact_quotient(element_count(shape), known)
    return out


def _need(shape: Sequence[Any], count: int, newshape: Sequence[int]) -> None:
    if len(shape) < count:
        raise TVMError(f"reshape: newshape {list(newshape)} reads past the {len(shape)} "
                       "input dimensions")
