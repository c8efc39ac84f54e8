"""ONNX converters: sequences and optionals, and their values on the VM.

Entry points: the converters registered on import; :func:`relay_type` (an ONNX
``TypeProto`` as a Relay type), :func:`to_vm_value` and :func:`from_vm_value` (a model's
sequence/optional inputs and outputs as VM values and back).

A sequence is a Relay tuple whose length is known when converting, as in TVM's ONNX frontend:
positions (SequenceAt/Insert/Erase, SplitToSequence's split) must fold to constants, and a
Loop that grows a sequence is unrolled (its trip count folds, e.g. from SequenceLength). A
sequence input gets its element shapes from ``from_onnx``'s ``shape``: ``{"seq": [(2, 3),
(4, 3)]}``. An optional is the prelude's ``Option`` ADT (``Some(value)`` / ``None``), so a
Relay ``If`` can return an empty optional from one branch and a value from the other;
OptionalHasElement of an optional built in the graph folds to a constant, of an input it is
a ``match``. An optional input is given as its value's shape, or ``None`` when empty.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_sequence
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "SequenceInsert" in CONVERTERS and "OptionalHasElement" in CONVERTERS
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import relay
from kiln.ir.adt import Constructor, TypeData
from kiln.ir.type import GlobalTypeVar, TensorType, TupleType, TypeCall, TypeVar
from kiln.relay import adt
from kiln.relay import expr as rx
from kiln.relay.frontend.common import AnyDim, infer_type
from kiln.relay.frontend.onnx_ops_tensor import split_dynamic
from kiln.relay.frontend.onnx_registry import register_function, required, unsupported
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented, TVMError

__all__ = ["relay_type", "to_vm_value", "from_vm_value", "option_type"]


# ---- the Option ADT ----------------------------------------------------------------------
def option_type(mod: Any) -> tuple:
    """``(Option, Some, None)`` of ``mod``, adding the prelude's ``Option[A]`` definition
    (``Some(A) | None``) when the module has none."""
    for gtv, data in mod.type_definitions.items():
        if gtv.name_hint == "Option":
            return (gtv, *data.constructors)
    gtv = GlobalTypeVar("Option")
    a = TypeVar("A")
    some, none = Constructor("Some", [a], gtv), Constructor("None", [], gtv)
    mod[gtv] = TypeData(gtv, [a], [some, none])
    return (gtv, some, none)


def _is_option(ty: Any) -> bool:
    return isinstance(ty, TypeCall) and getattr(ty.func, "name_hint", "") == "Option"


def _ctor_call(expr: Any, name: str) -> bool:
    """Whether ``expr`` is a literal call of the Option constructor ``name``."""
    return isinstance(expr, rx.Call) and isinstance(expr.op, Constructor) and \
        expr.op.name_hint == name


# ---- ONNX types as Relay types -------------------------------------------------------------
def _tensor_type(proto: Any, spec: Any, name: str, placeholder: bool) -> TensorType:
    from kiln.relay.frontend.onnx import onnx_dtype

    tensor = proto.tensor_type
    dtype = onnx_dtype(tensor.elem_type)
    if spec is not None:
        return TensorType(tuple(int(d) for d in spec), dtype)
    if not tensor.HasField("shape"):
        if placeholder:  # an empty optional holds no tensor: any rank types it
            return TensorType((), dtype)
        raise OpNotImplemented(f"ONNX input {name!r}: a tensor of unknown rank needs its "
                               "shape in from_onnx's shape")
    return TensorType(tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                            else AnyDim() for d in tensor.shape.dim), dtype)


def relay_type(proto: Any, spec: Any, name: str, mod: Any, placeholder: bool = False) -> Any:
    """The Relay type of a value of ONNX type ``proto`` (a ``TypeProto``): tensors as
    TensorType (``spec`` a shape, else the declared one), sequences as a TupleType of one
    TensorType per element (``spec`` a list of shapes), optionals as ``Option[T]`` (``spec``
    the value's spec, or None when the optional is empty)."""
    kind = proto.WhichOneof("value")
    if kind == "tensor_type":
        return _tensor_type(proto, spec, name, placeholder)
    if kind == "sequence_type":
        if spec is None:
            if placeholder:
                return TupleType([])
            raise OpNotImplemented(
                f"ONNX sequence input {name!r} needs its element shapes: pass "
                f"shape={{{name!r}: [shape, ...]}} to from_onnx")
        if not isinstance(spec, list | tuple) or any(
                not isinstance(s, list | tuple) for s in spec):
            raise TVMError(f"the shape of sequence input {name!r} must be a list of shapes, "
                           f"got {spec!r}")
        elem = proto.sequence_type.elem_type
        return TupleType([relay_type(elem, s, name, mod) for s in spec])
    if kind == "optional_type":
        inner = relay_type(proto.optional_type.elem_type, spec, name, mod,
                           placeholder=spec is None)
        return TypeCall(option_type(mod)[0], [inner])
    raise OpNotImplemented(f"ONNX input {name!r}: {kind or 'an untyped value'} is not "
                           "supported by kiln")


def to_vm_value(mod: Any, proto: Any, value: Any) -> Any:
    """A model input of ONNX type ``proto`` (an array, a list for a sequence, None or the
    value for an optional) as the VM takes it: sequences as tuples, optionals as Option ADTs
    of ``mod`` (the converted module)."""
    from kiln.runtime.container import ADT
    from kiln.runtime.device import cpu
    from kiln.runtime.vm.values import convert_argument

    kind = proto.WhichOneof("value")
    if kind == "sequence_type":
        return [to_vm_value(mod, proto.sequence_type.elem_type, v) for v in value]
    if kind == "optional_type":
        _, some, none = option_type(mod)
        if value is None:
            return ADT(none.tag, [])
        inner = to_vm_value(mod, proto.optional_type.elem_type, value)
        return ADT(some.tag, [convert_argument(inner, cpu(0))])
    return value


def from_vm_value(mod: Any, proto: Any, value: Any) -> Any:
    """A VM result of ONNX type ``proto`` as ONNX's backend tests hold it: an array, a list of
    arrays for a sequence, None or the value for an optional."""
    kind = proto.WhichOneof("value")
    if kind == "sequence_type":
        return [from_vm_value(mod, proto.sequence_type.elem_type, v) for v in value]
    if kind == "optional_type":
        _, some, none = option_type(mod)
        if getattr(value, "tag", None) == none.tag:
            return None
        if getattr(value, "tag", None) == some.tag:
            value = value[0]
        return from_vm_value(mod, proto.optional_type.elem_type, value)
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


# ---- sequences -----------------------------------------------------------------------------
def _fields(seq: Any, ctx: Any) -> list:
    """The elements of a sequence (a Relay tuple) as expressions."""
    if seq is None:
        raise TVMError("a sequence input is missing")
    if isinstance(seq, rx.Tuple):
        return list(seq.fields)
    ty = infer_type(seq, ctx.module)
    if not isinstance(ty, TupleType):
        raise TVMError(f"expected a sequence, got a value of type {ty}")
    return [rx.TupleGetItem(seq, i) for i in range(len(ty.fields))]


def _position(ctx: Any, expr: Any, length: int, op_name: str, insert: bool = False) -> int:
    """A constant position in ``[-length, length)`` (``length`` included when inserting)."""
    value = ctx.value(expr)
    if value is None:
        raise unsupported(op_name, "a position known only at run time")
    pos = int(np.asarray(value).reshape(-1)[0])
    high = length + 1 if insert else length
    if not -length <= pos < high:
        raise OpAttributeInvalid(f"ONNX {op_name}: position {pos} is out of range for a "
                                 f"sequence of {length} tensors")
    return pos + length if pos < 0 else pos


def _sequence_construct(inputs, attrs, ctx):
    return rx.Tuple(list(inputs))


def _sequence_empty(inputs, attrs, ctx):
    return rx.Tuple([])


def _sequence_length(inputs, attrs, ctx):
    return relay.const(np.array(len(_fields(inputs[0], ctx)), "int64"))


def _sequence_at(inputs, attrs, ctx):
    fields = _fields(inputs[0], ctx)
    return fields[_position(ctx, inputs[1], len(fields), "SequenceAt")]


def _sequence_insert(inputs, attrs, ctx):
    fields = _fields(inputs[0], ctx)
    pos = len(fields)
    if len(inputs) > 2 and inputs[2] is not None:
        pos = _position(ctx, inputs[2], len(fields), "SequenceInsert", insert=True)
    if fields and ctx.dtype(inputs[1]) != ctx.dtype(fields[0]):
        raise TVMError(f"SequenceInsert: a {ctx.dtype(inputs[1])} tensor into a sequence of "
                       f"{ctx.dtype(fields[0])} tensors")
    return rx.Tuple(fields[:pos] + [inputs[1]] + fields[pos:])


def _sequence_erase(inputs, attrs, ctx):
    fields = _fields(inputs[0], ctx)
    if not fields:
        raise OpAttributeInvalid("ONNX SequenceErase: the sequence is empty")
    pos = len(fields) - 1
    if len(inputs) > 1 and inputs[1] is not None:
        pos = _position(ctx, inputs[1], len(fields), "SequenceErase")
    return rx.Tuple(fields[:pos] + fields[pos + 1:])


def _axis(axis: int, rank: int, op_name: str) -> int:
    if not -rank <= axis < rank:
        raise OpAttributeInvalid(f"ONNX {op_name}: axis {axis} is out of range for rank "
                                 f"{rank}")
    return axis + rank if axis < 0 else axis


def _split_to_sequence(inputs, attrs, ctx):
    x = inputs[0]
    shape = ctx.shape(x)
    axis = _axis(attrs.get("axis", 0), len(shape), "SplitToSequence")
    dim = shape[axis]
    if not isinstance(dim, int):
        raise unsupported("SplitToSequence", "an axis of unknown length")
    split = inputs[1] if len(inputs) > 1 else None
    if split is None:
        sizes, squeeze = [1] * dim, not attrs.get("keepdims", 1)
    else:
        value = ctx.value(split)
        if value is None:
            if ctx.rank(split) != 1:  # a run-time chunk size: the count of parts is unknown
                raise unsupported("SplitToSequence", "a scalar split known only at run time")
            return rx.Tuple(split_dynamic(x, split, axis, ctx))
        value = np.asarray(value).astype(np.int64)
        if value.ndim == 0:
            chunk = int(value)
            if chunk <= 0:
                raise OpAttributeInvalid(f"ONNX SplitToSequence: split {chunk} must be > 0")
            sizes = [min(chunk, dim - b) for b in range(0, dim, chunk)]
        else:
            sizes = [int(v) for v in value]
            if any(s < 0 for s in sizes) or sum(sizes) != dim:
                raise OpAttributeInvalid(f"ONNX SplitToSequence: split {sizes} does not "
                                         f"add up to the axis length {dim}")
        squeeze = False
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    parts = [relay.strided_slice(x, [int(b)], [int(b) + n], axes=[axis])
             for b, n in zip(starts, sizes)]
    return rx.Tuple([relay.squeeze(p, [axis]) if squeeze else p for p in parts])


def _concat_from_sequence(inputs, attrs, ctx):
    fields = _fields(inputs[0], ctx)
    if not fields:
        raise OpAttributeInvalid("ONNX ConcatFromSequence: the sequence is empty")
    axis = required(attrs, "axis", "ConcatFromSequence")
    rank = ctx.rank(fields[0])
    if attrs.get("new_axis", 0):
        return relay.stack(fields, _axis(axis, rank + 1, "ConcatFromSequence"))
    return relay.concatenate(fields, _axis(axis, rank, "ConcatFromSequence"))


def _sequence_map(inputs, attrs, ctx):
    body = required(attrs, "body", "SequenceMap")
    sequences = {i: _fields(x, ctx) for i, x in enumerate(inputs)
                 if isinstance(infer_type(x, ctx.module), TupleType)}
    lengths = {len(f) for f in sequences.values()}
    if 0 not in sequences or len(lengths) != 1:
        raise TVMError("SequenceMap: the input sequences differ in length "
                       f"({sorted(lengths)})")
    length = lengths.pop()
    outputs: list[list] = [[] for _ in body.output]
    for k in range(length):
        args = [sequences[i][k] if i in sequences else x for i, x in enumerate(inputs)]
        for bucket, value in zip(outputs, ctx.convert_subgraph(body, args)):
            bucket.append(value)
    return [rx.Tuple(bucket) for bucket in outputs]


# ---- optionals -----------------------------------------------------------------------------
def _optional(inputs, attrs, ctx):
    _, some, none = option_type(ctx.module)
    if inputs and inputs[0] is not None:
        return rx.Call(some, [inputs[0]])
    if "type" not in attrs:
        raise OpAttributeInvalid("ONNX Optional without an input needs the attribute 'type'")
    return rx.Call(none, [])


def _optional_has_element(inputs, attrs, ctx):
    x = inputs[0] if inputs else None
    if x is None or _ctor_call(x, "None"):
        return relay.const(np.array(False))
    if _ctor_call(x, "Some") or not _is_option(infer_type(x, ctx.module)):
        return relay.const(np.array(True))
    _, some, _ = option_type(ctx.module)
    pattern = adt.PatternConstructor(some, [adt.PatternWildcard()])
    return adt.Match(x, [adt.Clause(pattern, relay.const(np.array(True))),
                         adt.Clause(adt.PatternWildcard(), relay.const(np.array(False)))])


def _optional_get_element(inputs, attrs, ctx):
    x = inputs[0]
    if x is None or _ctor_call(x, "None"):
        raise TVMError("OptionalGetElement of an empty optional")
    if _ctor_call(x, "Some"):
        return x.args[0]
    if not _is_option(infer_type(x, ctx.module)):
        return x
    _, some, _ = option_type(ctx.module)
    value = relay.var("value")
    # no clause for None: the VM stops with a match error, as ONNX makes it an error
    return adt.Match(x, [adt.Clause(adt.PatternConstructor(some, [adt.PatternVar(value)]),
                                    value)], complete=False)


for _name, _fn, _since in [
        ("SequenceConstruct", _sequence_construct, 11), ("SequenceEmpty", _sequence_empty, 11),
        ("SequenceLength", _sequence_length, 11), ("SequenceAt", _sequence_at, 11),
        ("SequenceInsert", _sequence_insert, 11), ("SequenceErase", _sequence_erase, 11),
        ("SplitToSequence", _split_to_sequence, 11),
        ("ConcatFromSequence", _concat_from_sequence, 11),
        ("SequenceMap", _sequence_map, 17), ("Optional", _optional, 15),
        ("OptionalHasElement", _optional_has_element, 15),
        ("OptionalGetElement", _optional_get_element, 15)]:
    register_function(_name, _fn, since=_since)
