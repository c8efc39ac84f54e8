"""Relay ``reshape``'s special ``newshape`` values, resolved once for ints and TIR expressions.

Entry point: :func:`infer_newshape`. Every consumer calls this one function, so none can
disagree on what ``0``, ``-1``, ``-2``, ``-3`` and ``-4`` mean: the type relation of
``reshape``/``contrib_reverse_reshape`` resolves against type dims (``int``, ``relay.Any()``,
symbolic vars), the reference interpreter against concrete ``int`` shapes, and the VM's shape
functions against int64 ``PrimExpr`` dimensions read from shape tensors at run time:

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

from kiln.ir.type import Any as AnyDim
from kiln.runtime.error import TVMError

__all__ = ["infer_newshape", "element_count"]


def _is_int(d: Any) -> bool:
    return isinstance(d, int)


def _mul(a: Any, b: Any) -> Any:
    """``a * b`` over dims: ints fold, ``Any`` (unknown until run time) absorbs."""
    if isinstance(a, AnyDim) or isinstance(b, AnyDim):
        return AnyDim()
    if _is_int(a) and _is_int(b):
        return a * b
    if _is_int(a):  # keep the expression on the left: PrimExpr * int
        a, b = b, a
    return a if _is_int(b) and b == 1 else a * b


def element_count(dims: Sequence[Any]) -> Any:
    """The product of ``dims`` (ints, expressions or ``Any``); 1 for a scalar."""
    total: Any = 1
    for d in dims:
        total = _mul(total, d)
    return total


def _exact_quotient(total: Any, known: Any) -> Any:
    """``total // known``, and 0 when ``known`` is 0 (a zero-size tensor)."""
    if isinstance(total, AnyDim) or isinstance(known, AnyDim):
        return AnyDim()
    if _is_int(total) and _is_int(known):
        return total // known if known else 0
    constant = known if _is_int(known) else getattr(known, "value", None)
    if isinstance(constant, int) and constant != 0:
        return total // constant
    from kiln.tir import op as _op

    return _op.if_then_else(known == 0, total * 0, total // _op.max(known, 1))


def infer_newshape(shape: Sequence[Any], newshape: Sequence[int], allowzero: bool = False,
                   op_name: str = "reshape", error: type = TVMError) -> list[Any]:
    """The output shape of ``reshape(x, newshape)`` for ``x`` of ``shape``.

    ``shape`` holds ints, integer ``PrimExpr``\\ s or ``relay.Any()``; the codes in
    ``newshape`` are ints. ``-1`` is the product of the input dims that no ``0``/``-2``/
    ``-3``/``-4`` copied, divided by the output dims that were not copied (TVM's rule), so
    ``(?, 3, 4)`` with ``(0, -1)`` gives ``(?, 12)`` and ``(0, 3, 4)`` gives ``(0, 12)``.
    When every dim is an int the element count is checked; bad codes raise ``error``
    (the type relation passes ``TypeInferenceError``) naming ``op_name``.

    Example
    -------
    >>> infer_newshape((4, 6), (-1, 3))
    [8, 3]
    """
    spec = [int(v) for v in newshape]
    shown = list(spec)
    out: list[Any] = []
    copied_in: set[int] = set()
    copied_out: set[int] = set()
    infer_at = None
    src = i = 0

    def need(count: int) -> None:
        if len(shape) < count:
            raise error(f"{op_name}: newshape {shown} reads past the {len(shape)} input "
                        f"dimensions {_shape_str(shape)}")

    def copy(dims: range, value: Any) -> None:
        copied_in.update(dims)
        copied_out.add(len(out))
        out.append(value)

    while i < len(spec):
        code = spec[i]
        if code > 0 or (code == 0 and allowzero):
            out.append(code)
            src += 1
        elif code == 0:
            need(src + 1)
            copy(range(src, src + 1), shape[src])
            src += 1
        elif code == -1:
            if infer_at is not None:
                raise error(f"{op_name}: newshape {shown} has more than one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif code == -2:
            while src < len(shape):
                copy(range(src, src + 1), shape[src])
                src += 1
        elif code == -3:
            need(src + 2)
            copy(range(src, src + 2), _mul(shape[src], shape[src + 1]))
            src += 2
        elif code == -4:
            if i + 2 >= len(spec):
                raise error(f"{op_name}: -4 in newshape {shown} needs two values after it")
            need(src + 1)
            out.extend(_split(shape[src], spec[i + 1], spec[i + 2], shown, op_name, error))
            copied_in.add(src)
            copied_out.update((len(out) - 2, len(out) - 1))
            src += 1
            i += 2
        else:
            raise error(f"{op_name}: invalid value {code} in newshape {shown}")
        i += 1
    if infer_at is not None:
        total = element_count([d for k, d in enumerate(shape) if k not in copied_in])
        known = element_count([d for k, d in enumerate(out)
                               if k not in copied_out and k != infer_at])
        if _is_int(total) and _is_int(known) and (known == 0 or total % known):
            raise error(f"{op_name}: cannot reshape {_shape_str(shape)} into {shown}")
        out[infer_at] = _exact_quotient(total, known)
    old, new = element_count(shape), element_count(out)
    if _is_int(old) and _is_int(new) and old != new:
        raise error(f"{op_name}: cannot reshape {_shape_str(shape)} ({old} elements) into "
                    f"{_shape_str(out)} ({new} elements)")
    return out


def _split(whole: Any, first: int, second: int, shown: list, op_name: str,
           error: type) -> list[Any]:
    """The two extents ``-4`` splits ``whole`` into; one of them may be -1."""
    if first == -1 and second == -1:
        raise error(f"{op_name}: -4 split of newshape {shown} has two -1")
    if first == -1:
        return [_exact_quotient(whole, second), second]
    if second == -1:
        return [first, _exact_quotient(whole, first)]
    if _is_int(whole) and first * second != whole:
        raise error(f"{op_name}: -4 split {first} x {second} does not cover dimension {whole}")
    return [first, second]


def _shape_str(dims: Sequence[Any]) -> str:
    return "(" + ", ".join("?" if isinstance(d, AnyDim) else str(d) for d in dims) + ")"
