"""Write TFLite flatbuffers from Python: test models for ``relay.frontend.from_tflite``.

Entry points: :class:`TFLiteModelBuilder` (tensors, operators, inputs/outputs -> bytes) and
:func:`quantize_array` (float -> int8/uint8 with TFLite's round-half-away rounding).

TensorFlow's converter is heavy and slow to start, so kiln's tests write small models directly
with the ``tflite`` package's generated flatbuffer builders; LiteRT runs the same bytes as the
oracle. The builder knows nothing about operator semantics: it writes what it is given.

Example
-------
>>> import numpy as np
>>> b = TFLiteModelBuilder()
>>> x = b.add_input("x", (1, 4))
>>> y = b.add_tensor("y", (1, 4))
>>> b.add_operator("RELU", [x], [y])
>>> b.add_output(y)
>>> model_bytes = b.finish()
>>> model_bytes[4:8]
b'TFL3'
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TFLiteModelBuilder", "quantize_array", "TENSOR_TYPES"]

# TFLite TensorType enum values (schema.fbs) for the dtypes kiln reads
TENSOR_TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6,
                "int16": 7, "int8": 9, "float64": 10, "uint32": 15, "uint16": 16}


def quantize_array(x: np.ndarray, scale: float, zero_point: int, dtype: str = "int8"):
    """``x`` quantized as TFLite's reference quantizer does (round half away from zero)."""
    info = np.iinfo(dtype)
    q = np.sign(x) * np.floor(np.abs(x) / scale + 0.5) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def _tflite():
    import tflite

    return tflite


class TFLiteModelBuilder:
    """Collects tensors and operators of one subgraph and writes a TFLite model."""

    def __init__(self) -> None:
        self.tensors: list[dict] = []
        self.buffers: list[bytes] = [b""]   # buffer 0 is the empty buffer by convention
        self.operators: list[dict] = []
        self.opcodes: list[tuple[int, str]] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def add_tensor(self, name: str, shape, dtype: str = "float32", data: Any = None,
                   scale: Any = None, zero_point: Any = None, quantized_dimension: int = 0,
                   raw_type: int | None = None, is_variable: bool = False) -> int:
        """Add a tensor (with constant ``data`` when given; ``is_variable`` for state that an
        operator keeps between invocations, such as an LSTM's); returns its index."""
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(np.asarray(data, dtype)).tobytes())
            buffer = len(self.buffers) - 1
        self.tensors.append({"name": name, "shape": [int(d) for d in shape],
                             "type": TENSOR_TYPES[dtype] if raw_type is None else raw_type,
                             "buffer": buffer, "scale": scale, "zero_point": zero_point,
                             "qdim": quantized_dimension, "variable": is_variable})
        return len(self.tensors) - 1

    def add_const(self, name: str, data: Any, dtype: str | None = None, **quant) -> int:
        """Add a constant tensor holding ``data``; returns its index."""
        data = np.asarray(data) if dtype is None else np.asarray(data, dtype)
        return self.add_tensor(name, data.shape, data.dtype.name, data, **quant)

    def add_input(self, name: str, shape, dtype: str = "float32", **quant) -> int:
        """Add a graph input tensor; returns its index."""
        index = self.add_tensor(name, shape, dtype, **quant)
        self.inputs.append(index)
        return index

    def add_output(self, index: int) -> None:
        """Mark tensor ``index`` as a graph output."""
        self.outputs.append(index)

    def add_operator(self, op: str | int, inputs, outputs, options: str | None = None,
                     custom_code: str | None = None, **fields) -> None:
        """Add an operator: ``op`` is a BuiltinOperator name (or code), ``options`` the name of
        its options table (``"Conv2DOptions"``) and ``fields`` that table's fields, spelled as
        in the generated builders (``Padding=1, StrideW=2``; lists become int32 vectors)."""
        tfl = _tflite()
        code = getattr(tfl.BuiltinOperator, op) if isinstance(op, str) else int(op)
        key = (code, custom_code or "")
        if key not in self.opcodes:
            self.opcodes.append(key)
        self.operators.append({"opcode": self.opcodes.index(key), "inputs": list(inputs),
                               "outputs": list(outputs), "options": options,
                               "fields": fields})

    # -- writing ---------------------------------------------------------------------------
    def finish(self) -> bytes:
        """The model as TFLite flatbuffer bytes (file identifier ``TFL3``, schema version 3)."""
        import flatbuffers

        tfl = _tflite()
        b = flatbuffers.Builder(1024)
        buffers = [self._buffer(b, data) for data in self.buffers]
        tensors = [self._tensor(b, t) for t in self.tensors]
        operators = [self._operator(b, op) for op in self.operators]
        opcodes = []
        for code, custom in self.opcodes:
            custom_off = b.CreateString(custom) if custom else None
            tfl.OperatorCodeStart(b)
            tfl.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tfl.OperatorCodeAddBuiltinCode(b, code)
            tfl.OperatorCodeAddVersion(b, 1)
            if custom_off is not None:
                tfl.OperatorCodeAddCustomCode(b, custom_off)
            opcodes.append(tfl.OperatorCodeEnd(b))
        subgraph_vectors = [self._offsets(b, tensors), self._ints(b, self.inputs),
                            self._ints(b, self.outputs), self._offsets(b, operators)]
        name = b.CreateString("main")
        tfl.SubGraphStart(b)
        tfl.SubGraphAddTensors(b, subgraph_vectors[0])
        tfl.SubGraphAddInputs(b, subgraph_vectors[1])
        tfl.SubGraphAddOutputs(b, subgraph_vectors[2])
        tfl.SubGraphAddOperators(b, subgraph_vectors[3])
        tfl.SubGraphAddName(b, name)
        subgraph = tfl.SubGraphEnd(b)
        model_vectors = [self._offsets(b, opcodes), self._offsets(b, [subgraph]),
                         self._offsets(b, buffers)]
        description = b.CreateString("kiln test model")
        tfl.ModelStart(b)
        tfl.ModelAddVersion(b, 3)
        tfl.ModelAddOperatorCodes(b, model_vectors[0])
        tfl.ModelAddSubgraphs(b, model_vectors[1])
        tfl.ModelAddDescription(b, description)
        tfl.ModelAddBuffers(b, model_vectors[2])
        b.Finish(tfl.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _offsets(b, offsets):
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    @staticmethod
    def _ints(b, values, width: int = 4):
        b.StartVector(width, len(values), width)
        for v in reversed(list(values)):
            (b.PrependInt32 if width == 4 else b.PrependInt64)(int(v))
        return b.EndVector()

    @staticmethod
    def _floats(b, values):
        b.StartVector(4, len(values), 4)
        for v in reversed(list(values)):
            b.PrependFloat32(float(v))
        return b.EndVector()

    def _buffer(self, b, data: bytes):
        tfl = _tflite()
        vec = None
        if data:
            # 16-byte aligned so LiteRT can use the weights in place
            b.StartVector(1, len(data), 16)
            b.head = b.head - len(data)
            b.Bytes[b.head:b.head + len(data)] = data
            vec = b.EndVector()
        tfl.BufferStart(b)
        if vec is not None:
            tfl.BufferAddData(b, vec)
        return tfl.BufferEnd(b)

    def _tensor(self, b, t: dict):
        tfl = _tflite()
        quant = None
        if t["scale"] is not None:
            scales = np.atleast_1d(np.asarray(t["scale"], "float32"))
            zps = np.atleast_1d(np.asarray(0 if t["zero_point"] is None else t["zero_point"]))
            scale_vec, zp_vec = self._floats(b, scales), self._ints(b, zps, width=8)
            tfl.QuantizationParametersStart(b)
            tfl.QuantizationParametersAddScale(b, scale_vec)
            tfl.QuantizationParametersAddZeroPoint(b, zp_vec)
            tfl.QuantizationParametersAddQuantizedDimension(b, t["qdim"])
            quant = tfl.QuantizationParametersEnd(b)
        shape = self._ints(b, t["shape"])
        name = b.CreateString(t["name"])
        tfl.TensorStart(b)
        tfl.TensorAddShape(b, shape)
        tfl.TensorAddType(b, t["type"])
        tfl.TensorAddBuffer(b, t["buffer"])
        tfl.TensorAddName(b, name)
        if t["variable"]:
            tfl.TensorAddIsVariable(b, True)
        if quant is not None:
            tfl.TensorAddQuantization(b, quant)
        return tfl.TensorEnd(b)

    def _operator(self, b, op: dict):
        tfl = _tflite()
        options = None
        if op["options"] is not None:
            name = op["options"]
            vectors = {k: self._ints(b, v) for k, v in op["fields"].items()
                       if isinstance(v, (list, tuple))}
            getattr(tfl, f"{name}Start")(b)
            for field, value in op["fields"].items():
                getattr(tfl, f"{name}Add{field}")(b, vectors.get(field, value))
            options = getattr(tfl, f"{name}End")(b)
        inputs, outputs = self._ints(b, op["inputs"]), self._ints(b, op["outputs"])
        tfl.OperatorStart(b)
        tfl.OperatorAddOpcodeIndex(b, op["opcode"])
        tfl.OperatorAddInputs(b, inputs)
        tfl.OperatorAddOutputs(b, outputs)
        if options is not None:
            tfl.OperatorAddBuiltinOptionsType(b, getattr(tfl.BuiltinOptions, op["options"]))
            tfl.OperatorAddBuiltinOptions(b, options)
        return tfl.OperatorEnd(b)
