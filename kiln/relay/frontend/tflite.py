"""TFLite → Relay: ``relay.frontend.from_tflite`` (TVM v0.16's entry point and conventions).

Entry points: :func:`from_tflite`, :func:`read_model`, :class:`TFLiteConverter`,
:class:`TensorInfo`, :class:`OperatorInfo`.

The flatbuffer is read once into plain Python records (:func:`read_model`), checking every
offset and length against the bytes present, so a corrupt or truncated file fails there with a
:class:`~kiln.runtime.error.TVMError` instead of deep inside a converter. The converter then walks
subgraph 0's operators in order (TFLite stores them topologically sorted); each operator's
converter lives in :mod:`.tflite_ops` and its quantized variants in the same function. As in TVM,
the layout stays NHWC, constant tensors become ``params`` (named after their tensors),
quantized tensors carry ``(scale, zero_point, axis)`` and map onto ``relay.qnn`` ops, and every
unsupported operator of the model is listed in one :class:`~kiln.runtime.error.OpNotImplemented`.

Example
-------
>>> from kiln import relay
>>> from kiln.relay.testing.tflite import TFLiteModelBuilder
>>> b = TFLiteModelBuilder()
>>> x, y = b.add_input("x", (1, 4)), b.add_tensor("y", (1, 4))
>>> b.add_operator("RELU", [x], [y]); b.add_output(y)
>>> mod, params = relay.frontend.from_tflite(b.finish())
>>> mod["main"].params[0].name_hint
'x'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.ir.module import IRModule
from kiln.relay import expr as rx
from kiln.relay.frontend import (  # noqa: F401  (each module registers its converters)
    tflite_ops,
    tflite_ops_extra,
    tflite_ops_image,
    tflite_ops_math,
    tflite_ops_rnn,
    tflite_ops_tensor,
)
from kiln.runtime.error import OpError, OpNotImplemented, TVMError

__all__ = ["from_tflite", "read_model", "TFLiteConverter", "TensorInfo", "OperatorInfo",
           "QuantParams", "TFLITE_DTYPES", "ModelInfo"]

# TensorType enum (schema.fbs) -> kiln dtype; the others (strings, complex, resources) have none
TFLITE_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool",
                 7: "int16", 9: "int8", 10: "float64", 15: "uint32", 16: "uint16"}


@dataclass(frozen=True)
class QuantParams:
    """A quantized tensor's parameters: float32 scale(s), one int zero point, the channel axis."""

    scale: np.ndarray
    zero_point: int
    axis: int

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    def scale_expr(self) -> rx.Expr:
        value = self.scale if self.per_channel else self.scale.reshape(())
        return rx.const(np.asarray(value, "float32"), "float32")

    def zero_point_expr(self) -> rx.Expr:
        return rx.const(np.int32(self.zero_point), "int32")


@dataclass
class TensorInfo:
    """One tensor of the subgraph: its shape, dtype, constant data and quantization."""

    index: int
    name: str
    shape: tuple
    dtype: str
    data: np.ndarray | None
    quant: QuantParams | None


@dataclass
class OperatorInfo:
    """One operator: its builtin name, input/output tensor indices (-1 = absent) and options."""

    index: int
    name: str
    inputs: list[int]
    outputs: list[int]
    options: Any = None


@dataclass
class ModelInfo:
    """A read model: subgraph 0's tensors, operators, inputs and outputs."""

    tensors: list[TensorInfo]
    operators: list[OperatorInfo]
    inputs: list[int]
    outputs: list[int]
    version: int = 3
    subgraphs: int = 1
    extra: dict = field(default_factory=dict)


# -- reading the flatbuffer -------------------------------------------------------------------
class _Reader:
    """Bounds-checked access to the generated ``tflite`` accessors."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def check_vector(self, table: Any, field_offset: int, elem_size: int, what: str) -> int:
        """Length of a vector field, checked to lie inside the buffer."""
        tab = table._tab
        o = tab.Offset(field_offset)
        if o == 0:
            return 0
        start = tab.Vector(o)
        n = tab.VectorLen(o)
        if start < 0 or n < 0 or start + n * elem_size > len(self.buf):
            raise TVMError(f"corrupt TFLite model: {what} has {n} elements of {elem_size} bytes "
                           f"at offset {start}, past the end of the {len(self.buf)}-byte file")
        return n

    def check_table(self, table: Any, what: str) -> Any:
        if table is None:
            return None
        pos = table._tab.Pos
        if pos < 0 or pos + 4 > len(self.buf):
            raise TVMError(f"corrupt TFLite model: {what} table at offset {pos} lies outside "
                           f"the {len(self.buf)}-byte file")
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        if vtable < 0 or vtable + 4 > len(self.buf):
            raise TVMError(f"corrupt TFLite model: {what} vtable at offset {vtable} lies outside "
                           f"the file")
        vt_len = struct.unpack_from("<H", self.buf, vtable)[0]
        if vtable + vt_len > len(self.buf):
            raise TVMError(f"corrupt TFLite model: {what} vtable of {vt_len} bytes runs past the "
                           "end of the file")
        return table


def _as_bytes(model: Any) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    tab = getattr(model, "_tab", None)
    if tab is not None:
        return bytes(tab.Bytes)
    raise TVMError(f"from_tflite expects a tflite.Model or the model's bytes, got "
                   f"{type(model).__name__}")


def read_model(model: Any) -> ModelInfo:
    """Read subgraph 0 of a TFLite model (bytes or ``tflite.Model``) into plain records.

    Raises a :class:`TVMError` naming the fault for truncated or corrupt flatbuffers.
    """
    buf = _as_bytes(model)
    if len(buf) < 8:
        raise TVMError(f"not a TFLite model: {len(buf)} bytes is too short for a flatbuffer")
    if buf[4:8] != b"TFL3":
        raise TVMError(f"not a TFLite model: file identifier {buf[4:8]!r}, expected b'TFL3'")
    try:
        import tflite
    except ImportError:
        raise TVMError("reading TFLite models needs the tflite package: "
                       "pip install kiln[tflite]") from None
    try:
        return _read(tflite, buf)
    except TVMError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError,
            AttributeError, KeyError, MemoryError, RecursionError) as exc:
        raise TVMError(f"corrupt TFLite model: {type(exc).__name__}: {exc}") from exc


def _read(tflite: Any, buf: bytes) -> ModelInfo:
    from tflite.utils import BUILTIN_OPCODE2NAME

    r = _Reader(buf)
    model = r.check_table(tflite.Model.GetRootAs(buf, 0), "Model")
    n_sub = r.check_vector(model, 8, 4, "Model.subgraphs")
    if n_sub < 1:
        raise TVMError("TFLite model has no subgraph")
    n_codes = r.check_vector(model, 6, 4, "Model.operator_codes")
    opnames = []
    for i in range(n_codes):
        code = r.check_table(model.OperatorCodes(i), f"operator code {i}")
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = BUILTIN_OPCODE2NAME.get(builtin, f"UNKNOWN_BUILTIN_{builtin}")
        if name == "CUSTOM":
            r.check_vector(code, 6, 1, "OperatorCode.custom_code")
            name = f"CUSTOM({(code.CustomCode() or b'').decode('utf-8', 'replace')})"
        opnames.append(name)
    n_buf = r.check_vector(model, 12, 4, "Model.buffers")
    graph = r.check_table(model.Subgraphs(0), "subgraph 0")
    n_tensors = r.check_vector(graph, 4, 4, "SubGraph.tensors")
    tensors = [_read_tensor(r, graph.Tensors(i), i, n_buf, model)
               for i in range(n_tensors)]
    inputs = _indices(r, graph, 6, graph.InputsAsNumpy, n_tensors, "SubGraph.inputs")
    outputs = _indices(r, graph, 8, graph.OutputsAsNumpy, n_tensors, "SubGraph.outputs")
    n_ops = r.check_vector(graph, 10, 4, "SubGraph.operators")
    operators = []
    for i in range(n_ops):
        op = r.check_table(graph.Operators(i), f"operator {i}")
        index = op.OpcodeIndex()
        if not 0 <= index < len(opnames):
            raise TVMError(f"corrupt TFLite model: operator {i} uses opcode index {index}, the "
                           f"model has {len(opnames)} operator codes")
        where = f"operator {i} ({opnames[index]})"
        ins = _indices(r, op, 6, op.InputsAsNumpy, n_tensors, f"{where} inputs", optional=True)
        outs = _indices(r, op, 8, op.OutputsAsNumpy, n_tensors, f"{where} outputs")
        operators.append(OperatorInfo(i, opnames[index], ins, outs, _options(r, op, where)))
    return ModelInfo(tensors, operators, inputs, outputs, model.Version(), n_sub)


def _indices(r: _Reader, table: Any, field_offset: int, as_numpy: Any, n_tensors: int,
             what: str, optional: bool = False) -> list[int]:
    n = r.check_vector(table, field_offset, 4, what)
    values = [int(v) for v in as_numpy()] if n else []
    low = -1 if optional else 0
    for v in values:
        if not low <= v < n_tensors:
            raise TVMError(f"corrupt TFLite model: {what} names tensor {v}, the subgraph has "
                           f"{n_tensors} tensors")
    return values


def _read_tensor(r: _Reader, tensor: Any, index: int, n_buf: int, model: Any) -> TensorInfo:
    r.check_table(tensor, f"tensor {index}")
    r.check_vector(tensor, 10, 1, f"tensor {index} name")
    name = (tensor.Name() or b"").decode("utf-8", "replace") or f"tensor_{index}"
    ndim = r.check_vector(tensor, 4, 4, f"tensor {name!r} shape")
    shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if ndim else ()
    if any(d < 0 for d in shape):
        raise TVMError(f"corrupt TFLite model: tensor {name!r} has negative dimension in shape "
                       f"{shape}")
    type_code = tensor.Type()
    dtype = TFLITE_DTYPES.get(type_code)
    if dtype is None:
        raise OpNotImplemented(f"tensor {name!r} has TFLite type {type_code}, which kiln does "
                               "not support (supported: "
                               f"{', '.join(sorted(set(TFLITE_DTYPES.values())))})")
    data = None
    b = tensor.Buffer()
    if not 0 <= b < max(n_buf, 1):
        raise TVMError(f"corrupt TFLite model: tensor {name!r} uses buffer {b}, the model has "
                       f"{n_buf} buffers")
    if n_buf:
        buffer = r.check_table(model.Buffers(b), f"buffer {b}")
        size = r.check_vector(buffer, 4, 1, f"buffer {b} data")
        if size == 0 and buffer.Offset() > 1:
            raise OpNotImplemented(f"tensor {name!r}: data stored outside the flatbuffer "
                                   "(buffer offsets, models over 2 GB) is not supported")
        if size:
            expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if size != expected:
                raise TVMError(f"corrupt TFLite model: tensor {name!r} of shape {shape} "
                               f"({dtype}) needs {expected} bytes, its buffer {b} holds {size}")
            data = np.frombuffer(buffer.DataAsNumpy().tobytes(), dtype).reshape(shape)
    return TensorInfo(index, name, shape, dtype, data, _read_quant(r, tensor, name, shape))


def _read_quant(r: _Reader, tensor: Any, name: str, shape: tuple) -> QuantParams | None:
    q = r.check_table(tensor.Quantization(), f"tensor {name!r} quantization")
    if q is None:
        return None
    n_scale = r.check_vector(q, 8, 4, f"tensor {name!r} scales")
    n_zp = r.check_vector(q, 10, 8, f"tensor {name!r} zero points")
    if n_scale == 0:
        return None
    scale = np.asarray(q.ScaleAsNumpy(), "float32")
    zps = np.asarray(q.ZeroPointAsNumpy(), "int64") if n_zp else np.zeros(1, "int64")
    if not np.all(np.isfinite(scale)) or np.any(scale < 0):
        raise TVMError(f"tensor {name!r}: quantization scales must be finite and non-negative, "
                       f"got {scale.tolist()[:8]}")
    if np.all(scale == 0) and np.all(zps == 0):
        return None   # TFLite writes scale = zero point = 0 for "not quantized"
    axis = int(q.QuantizedDimension())
    if scale.size > 1:
        if not 0 <= axis < len(shape) or shape[axis] != scale.size:
            raise TVMError(f"tensor {name!r}: {scale.size} per-channel scales do not match "
                           f"dimension {axis} of shape {shape}")
        if np.any(zps != zps[0]):
            raise OpNotImplemented(f"tensor {name!r}: per-channel zero points must all be "
                                   "equal (TFLite writes 0)")
    if np.any(scale == 0):
        raise TVMError(f"tensor {name!r}: a quantization scale is 0")
    return QuantParams(scale, int(zps[0]), axis)


def _options(r: _Reader, op: Any, where: str) -> Any:
    """The operator's builtin options table as its generated class, or None."""
    import tflite
    from tflite.BuiltinOptions import BuiltinOptions

    kind = op.BuiltinOptionsType()
    if kind == 0:
        return None
    names = {v: k for k, v in vars(BuiltinOptions).items() if not k.startswith("_")}
    name = names.get(kind)
    table = op.BuiltinOptions()
    if name is None or table is None or not hasattr(tflite, name):
        raise TVMError(f"corrupt TFLite model: {where} has unknown options type {kind}")
    options = getattr(tflite, name)()
    options.Init(table.Bytes, table.Pos)
    return r.check_table(options, f"{where} options")


# -- converting ---------------------------------------------------------------------------------
class TFLiteConverter:
    """Converts one read model's subgraph to Relay, operator by operator."""

    def __init__(self, model: ModelInfo, shape_dict: dict | None = None,
                 dtype_dict: dict | None = None) -> None:
        self.model = model
        self.tensors = model.tensors
        self.shape_dict = dict(shape_dict or {})
        self.dtype_dict = dict(dtype_dict or {})
        self.exprs: dict[int, rx.Expr] = {}
        self.params: dict[str, Any] = {}
        self.param_vars: list[rx.Var] = []
        self._names: set[str] = set()

    # -- values ---------------------------------------------------------------------------
    def unique_name(self, name: str) -> str:
        """``name`` as the model spells it (TVM keeps TFLite's tensor names), made unique."""
        out, i = name, 1
        while out in self._names:
            out, i = f"{name}_{i}", i + 1
        self._names.add(out)
        return out

    def new_param(self, name: str, value: np.ndarray) -> rx.Var:
        """A Relay variable bound to ``value`` in the returned params."""
        from kiln.runtime import ndarray

        value = np.ascontiguousarray(value)
        var = rx.var(self.unique_name(name), shape=value.shape, dtype=value.dtype.name)
        self.params[var.name_hint] = ndarray.array(value)
        self.param_vars.append(var)
        return var

    def get_expr(self, index: int) -> rx.Expr:
        """The Relay value of tensor ``index`` (constants become params on first use)."""
        if index < 0:
            raise TVMError("an optional input is absent")
        if index not in self.exprs:
            t = self.tensors[index]
            if t.data is None:
                raise TVMError(f"tensor {t.name!r} is used before any operator produces it")
            self.exprs[index] = self.new_param(t.name, t.data)
        return self.exprs[index]

    def tensor(self, index: int) -> TensorInfo:
        return self.tensors[index]

    def const_value(self, index: int, what: str) -> np.ndarray:
        """The data of constant tensor ``index``; refuses run-time values."""
        t = self.tensors[index]
        if t.data is None:
            raise OpNotImplemented(f"{what} must be a constant tensor ({t.name!r} is computed "
                                   "at run time)")
        return t.data

    # -- whole graph ------------------------------------------------------------------------
    def convert(self) -> tuple[IRModule, dict]:
        converters = tflite_ops.CONVERTERS
        missing = sorted({op.name for op in self.model.operators if op.name not in converters})
        if missing:
            raise OpNotImplemented("the following operators are not supported by kiln's TFLite "
                                   f"frontend: {', '.join(missing)}")
        input_vars = []
        for index in self.model.inputs:
            t = self.tensors[index]
            if index in self.exprs:
                continue
            shape = tuple(self.shape_dict.get(t.name, t.shape))
            dtype = self.dtype_dict.get(t.name, t.dtype)
            var = rx.var(self.unique_name(t.name), shape=shape, dtype=dtype)
            self.exprs[index] = var
            input_vars.append(var)
        for op in self.model.operators:
            self.convert_operator(op, converters[op.name])
        outputs = [self.get_expr(i) for i in self.model.outputs]
        if not outputs:
            raise TVMError("TFLite subgraph 0 has no outputs")
        body = outputs[0] if len(outputs) == 1 else rx.Tuple(outputs)
        func = rx.Function(input_vars + self.param_vars, body)
        return IRModule.from_expr(func), self.params

    def convert_operator(self, op: OperatorInfo, impl: Any) -> None:
        where = f"TFLite operator {op.index} ({op.name})"
        try:
            result = impl(self, op)
            outs = list(result) if isinstance(result, (list, tuple)) else [result]
            if len(outs) != len(op.outputs):
                raise TVMError(f"the converter produced {len(outs)} outputs, the operator "
                               f"names {len(op.outputs)}")
            self._check_outputs(op, outs)
        except OpError as exc:
            raise type(exc)(f"{where}: {exc}") from exc
        except TVMError as exc:
            raise TVMError(f"{where}: {exc}") from exc
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, struct.error,
                OverflowError, ZeroDivisionError) as exc:
            raise TVMError(f"{where}: {type(exc).__name__}: {exc}") from exc
        for index, out in zip(op.outputs, outs):
            self.exprs[index] = out

    def _check_outputs(self, op: OperatorInfo, outs: list) -> None:
        """The converted value must have the shape and dtype the model declares."""
        from kiln.relay.frontend.common import infer_type

        for index, out in zip(op.outputs, outs):
            t = self.tensors[index]
            ty = infer_type(out)
            shape = tuple(int(d) for d in ty.shape)
            if t.shape and shape != t.shape and not self.shape_dict:
                raise TVMError(f"output {t.name!r} has shape {shape} but the model declares "
                               f"{t.shape}")
            if str(ty.dtype) != t.dtype:
                raise TVMError(f"output {t.name!r} has dtype {ty.dtype} but the model declares "
                               f"{t.dtype}")


def from_tflite(model: Any, shape_dict: dict | None = None,
                dtype_dict: dict | None = None) -> tuple[IRModule, dict]:
    """Convert a TFLite model to a Relay module and its params (TVM's ``from_tflite``).

    Parameters
    ----------
    model : tflite.Model or bytes
        The model (``tflite.Model.GetRootAsModel(buf, 0)``) or its flatbuffer bytes.
    shape_dict : dict of str to tuple, optional
        Input shapes by input tensor name (default: the shapes stored in the model).
    dtype_dict : dict of str to str, optional
        Input dtypes by input tensor name (default: the stored types).

    Returns
    -------
    mod : IRModule
        ``main`` takes the model inputs then the params, NHWC layout.
    params : dict of str to NDArray
        The model's constant tensors.

    Example
    -------
    >>> from kiln import relay
    >>> from kiln.relay.testing.tflite import TFLiteModelBuilder
    >>> b = TFLiteModelBuilder()
    >>> x, y = b.add_input("x", (2, 3)), b.add_tensor("y", (2, 3))
    >>> b.add_operator("TANH", [x], [y]); b.add_output(y)
    >>> mod, _ = relay.frontend.from_tflite(b.finish(), shape_dict={"x": (2, 3)})
    >>> str(mod["main"].body.op.name)
    'tanh'
    """
    info = read_model(model)
    return TFLiteConverter(info, shape_dict, dtype_dict).convert()
