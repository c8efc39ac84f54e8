"""Write a kiln layer model (``kiln.relay.testing.micro_models``) as a float32 ``.tflite``
flatbuffer, and measure TensorFlow Lite for Microcontrollers' arena for it.

Entry points: :func:`to_tflite` (bytes of the model, built with the ``tflite`` package's
flatbuffer builders), :func:`tflm_run` (outputs + arena bytes from the ``tflite-micro``
package's host interpreter). Used by ``benchmarks/micro.py`` only.
"""

from __future__ import annotations

import os
import re
import tempfile

import flatbuffers
import numpy as np
import tflite
from tflite import ActivationFunctionType, BuiltinOperator, BuiltinOptions, Padding, TensorType

from kiln.relay.testing.micro_models import LayerModel, same_padding

__all__ = ["to_tflite", "tflm_run"]


class _Writer:
    """Accumulates tensors, buffers, operator codes and operators of one subgraph."""

    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1 << 20)
        self.buffers: list[bytes] = [b""]  # buffer 0: the empty one, by convention
        self.tensors: list[tuple[str, tuple[int, ...], int, int]] = []
        self.codes: list[int] = []
        self.ops: list[tuple[int, list[int], list[int], int, int]] = []

    def tensor(self, name: str, shape, data: np.ndarray | None = None,
               ttype: int = TensorType.FLOAT32) -> int:
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data).tobytes())
            buffer = len(self.buffers) - 1
        self.tensors.append((name, tuple(int(d) for d in shape), ttype, buffer))
        return len(self.tensors) - 1

    def op(self, code: int, inputs: list[int], outputs: list[int], options_type: int,
           options: int) -> None:
        if code not in self.codes:
            self.codes.append(code)
        self.ops.append((self.codes.index(code), inputs, outputs, options_type, options))

    def _ints(self, start, values: list[int]) -> int:
        start(self.b, len(values))
        for v in reversed(values):
            self.b.PrependInt32(v)
        return self.b.EndVector()

    def _table_vector(self, start, offsets: list[int]) -> int:
        start(self.b, len(offsets))
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def finish(self, inputs: list[int], outputs: list[int]) -> bytes:
        b = self.b
        buffers = []
        for data in self.buffers:
            vec = None
            if data:
                # 16-byte aligned so TFLM reads the float weights in place
                b.StartVector(1, len(data), 16)
                b.head -= len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                vec = b.EndVector(len(data))
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))
        tensors = []
        for name, shape, ttype, buffer in self.tensors:
            name_off = b.CreateString(name)
            shape_off = self._ints(tflite.TensorStartShapeVector, list(shape))
            tflite.TensorStart(b)
            tflite.TensorAddShape(b, shape_off)
            tflite.TensorAddType(b, ttype)
            tflite.TensorAddBuffer(b, buffer)
            tflite.TensorAddName(b, name_off)
            tensors.append(tflite.TensorEnd(b))
        ops = []
        for code_index, ins, outs, options_type, options in self.ops:
            ins_off = self._ints(tflite.OperatorStartInputsVector, ins)
            outs_off = self._ints(tflite.OperatorStartOutputsVector, outs)
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, code_index)
            tflite.OperatorAddInputs(b, ins_off)
            tflite.OperatorAddOutputs(b, outs_off)
            tflite.OperatorAddBuiltinOptionsType(b, options_type)
            tflite.OperatorAddBuiltinOptions(b, options)
            ops.append(tflite.OperatorEnd(b))
        codes = []
        for code in self.codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, 1)
            codes.append(tflite.OperatorCodeEnd(b))
        tensors_vec = self._table_vector(tflite.SubGraphStartTensorsVector, tensors)
        ops_vec = self._table_vector(tflite.SubGraphStartOperatorsVector, ops)
        in_vec = self._ints(tflite.SubGraphStartInputsVector, inputs)
        out_vec = self._ints(tflite.SubGraphStartOutputsVector, outputs)
        name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensors_vec)
        tflite.SubGraphAddInputs(b, in_vec)
        tflite.SubGraphAddOutputs(b, out_vec)
        tflite.SubGraphAddOperators(b, ops_vec)
        tflite.SubGraphAddName(b, name)
        subgraph = tflite.SubGraphEnd(b)
        subgraphs_vec = self._table_vector(tflite.ModelStartSubgraphsVector, [subgraph])
        codes_vec = self._table_vector(tflite.ModelStartOperatorCodesVector, codes)
        buffers_vec = self._table_vector(tflite.ModelStartBuffersVector, buffers)
        description = b.CreateString("kiln benchmarks/micro_tflite.py")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_vec)
        tflite.ModelAddSubgraphs(b, subgraphs_vec)
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, buffers_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def _padding(layer, in_hw, kernel_hw) -> int:
    if layer.padding == (0, 0, 0, 0):
        return Padding.VALID
    if layer.padding == same_padding(in_hw, kernel_hw, layer.strides):
        return Padding.SAME
    raise ValueError(f"padding {layer.padding} is neither SAME nor VALID for TFLite")


def _conv_out(n: int, k: int, s: int, pad: int) -> int:
    return -(-n // s) if pad == Padding.SAME else (n - k) // s + 1


def to_tflite(model: LayerModel) -> bytes:
    """The model as a float32 TFLite flatbuffer (NHWC, OHWI / 1HWO kernels)."""
    w = _Writer()
    b = w.b
    shape = tuple(model.input_shape)
    current = w.tensor("input", shape)
    first = current
    relu = ActivationFunctionType.RELU
    for i, layer in enumerate(model.layers):
        act = relu if layer.relu else ActivationFunctionType.NONE
        if layer.kind in ("conv2d", "depthwise_conv2d"):
            kh, kw = layer.weight.shape[:2]
            pad = _padding(layer, shape[1:3], (kh, kw))
            depthwise = layer.kind == "depthwise_conv2d"
            channels = layer.weight.shape[2] if depthwise else layer.weight.shape[3]
            if depthwise:  # HWOI (O = channels, I = 1) -> 1 x H x W x channels
                kernel = layer.weight.transpose(3, 0, 1, 2)
                tflite.DepthwiseConv2DOptionsStart(b)
                tflite.DepthwiseConv2DOptionsAddPadding(b, pad)
                tflite.DepthwiseConv2DOptionsAddStrideW(b, layer.strides[1])
                tflite.DepthwiseConv2DOptionsAddStrideH(b, layer.strides[0])
                tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, 1)
                tflite.DepthwiseConv2DOptionsAddFusedActivationFunction(b, act)
                options = tflite.DepthwiseConv2DOptionsEnd(b)
                code, otype = BuiltinOperator.DEPTHWISE_CONV_2D, \
                    BuiltinOptions.DepthwiseConv2DOptions
            else:  # HWIO -> OHWI
                kernel = layer.weight.transpose(3, 0, 1, 2)
                tflite.Conv2DOptionsStart(b)
                tflite.Conv2DOptionsAddPadding(b, pad)
                tflite.Conv2DOptionsAddStrideW(b, layer.strides[1])
                tflite.Conv2DOptionsAddStrideH(b, layer.strides[0])
                tflite.Conv2DOptionsAddFusedActivationFunction(b, act)
                options = tflite.Conv2DOptionsEnd(b)
                code, otype = BuiltinOperator.CONV_2D, BuiltinOptions.Conv2DOptions
            wt = w.tensor(f"l{i}_weight", kernel.shape, kernel)
            bt = w.tensor(f"l{i}_bias", layer.bias.shape, layer.bias)
            shape = (1, _conv_out(shape[1], kh, layer.strides[0], pad),
                     _conv_out(shape[2], kw, layer.strides[1], pad), channels)
            out = w.tensor(f"l{i}_out", shape)
            w.op(code, [current, wt, bt], [out], otype, options)
        elif layer.kind in ("max_pool2d", "avg_pool2d"):
            tflite.Pool2DOptionsStart(b)
            tflite.Pool2DOptionsAddPadding(b, Padding.VALID)
            tflite.Pool2DOptionsAddStrideW(b, layer.strides[1])
            tflite.Pool2DOptionsAddStrideH(b, layer.strides[0])
            tflite.Pool2DOptionsAddFilterWidth(b, layer.pool[1])
            tflite.Pool2DOptionsAddFilterHeight(b, layer.pool[0])
            tflite.Pool2DOptionsAddFusedActivationFunction(b, act)
            options = tflite.Pool2DOptionsEnd(b)
            shape = (1, (shape[1] - layer.pool[0]) // layer.strides[0] + 1,
                     (shape[2] - layer.pool[1]) // layer.strides[1] + 1, shape[3])
            out = w.tensor(f"l{i}_out", shape)
            code = BuiltinOperator.MAX_POOL_2D if layer.kind == "max_pool2d" \
                else BuiltinOperator.AVERAGE_POOL_2D
            w.op(code, [current], [out], BuiltinOptions.Pool2DOptions, options)
        elif layer.kind == "flatten":
            shape = (1, int(np.prod(shape[1:])))
            new_shape = w._ints(tflite.ReshapeOptionsStartNewShapeVector, list(shape))
            tflite.ReshapeOptionsStart(b)
            tflite.ReshapeOptionsAddNewShape(b, new_shape)
            options = tflite.ReshapeOptionsEnd(b)
            st = w.tensor(f"l{i}_shape", (2,), np.array(shape, "int32"), TensorType.INT32)
            out = w.tensor(f"l{i}_out", shape)
            w.op(BuiltinOperator.RESHAPE, [current, st], [out], BuiltinOptions.ReshapeOptions,
                 options)
        elif layer.kind == "dense":
            tflite.FullyConnectedOptionsStart(b)
            tflite.FullyConnectedOptionsAddFusedActivationFunction(b, act)
            options = tflite.FullyConnectedOptionsEnd(b)
            wt = w.tensor(f"l{i}_weight", layer.weight.shape, layer.weight)
            bt = w.tensor(f"l{i}_bias", layer.bias.shape, layer.bias)
            shape = (shape[0], layer.weight.shape[0])
            out = w.tensor(f"l{i}_out", shape)
            w.op(BuiltinOperator.FULLY_CONNECTED, [current, wt, bt], [out],
                 BuiltinOptions.FullyConnectedOptions, options)
        elif layer.kind == "softmax":
            tflite.SoftmaxOptionsStart(b)
            tflite.SoftmaxOptionsAddBeta(b, 1.0)
            options = tflite.SoftmaxOptionsEnd(b)
            out = w.tensor(f"l{i}_out", shape)
            w.op(BuiltinOperator.SOFTMAX, [current], [out], BuiltinOptions.SoftmaxOptions,
                 options)
        else:
            raise ValueError(f"no TFLite writer for layer kind {layer.kind!r}")
        current = out
    return w.finish([first], [current])


def _capture_fd2(fn):
    """Run ``fn`` with the process's stderr (fd 2, where TFLM's C++ prints) captured."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


def tflm_run(model_bytes: bytes, x: np.ndarray) -> tuple[np.ndarray, int, str]:
    """Run the model once in TFLM's host interpreter: (output, arena bytes used, report).

    The arena size is what TFLM's recording allocator reports as used (head + tail); the
    report is ``print_allocations``' text.
    """
    from tflite_micro.python.tflite_micro import runtime

    interpreter = runtime.Interpreter.from_bytes(model_bytes, arena_size=8 * 1024 * 1024)
    interpreter.set_input(x, 0)
    interpreter.invoke()
    out = interpreter.get_output(0).copy()
    _, report = _capture_fd2(interpreter.print_allocations)
    match = re.search(r"Arena allocation total (\d+) bytes", report)
    if match is None:
        raise RuntimeError(f"no arena total in TFLM's report:\n{report}")
    return out, int(match.group(1)), report
