"""ONNX converters: Attention (opset 23+), scaled dot-product attention with masks and caches,
and RotaryEmbedding (opset 23+).

Entry points: the ``Attention`` and ``RotaryEmbedding`` converters registered in
:data:`~.onnx_registry.CONVERTERS`.

Follows the ONNX operator definition: 3-D inputs are split into ``q_num_heads`` /
``kv_num_heads`` heads, past key/value caches are concatenated on the sequence axis, boolean
or additive masks and ``is_causal`` become an additive bias, grouped-query heads are repeated,
the scale is applied as ``sqrt(scale)`` to both Q and K, ``softcap`` squashes the scores, and
rows whose bias masks every key produce zeros. Outputs: Y, present_key, present_value and the
``qk_matmul_output_mode`` intermediate.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_attention
>>> from kiln.relay.frontend.onnx_registry import get_converter
>>> get_converter("Attention", 22) is None and get_converter("Attention", 23) is not None
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.onnx_ops_math import matmul
from kiln.relay.frontend.onnx_registry import register_function

__all__: list[str] = []


def _const(value, dtype: str):
    return relay.const(np.asarray(value, dtype=dtype), dtype)


def _split_heads(x, heads, ctx):
    batch, seq, hidden = ctx.shape(x)
    return relay.transpose(relay.reshape(x, [batch, seq, heads, hidden // heads]), (0, 2, 1, 3))


def _additive(mask, dtype):
    """A boolean keep-mask as an additive bias (0 kept, -inf masked); float masks pass."""
    return relay.where(mask, _const(0, dtype), _const(-np.inf, dtype))


def _safe_softmax(x, dtype):
    """Softmax over the last axis whose fully masked (-inf) rows give zeros, not NaN."""
    peak = relay.max(x, [-1], True)
    peak = relay.where(relay.isinf(peak), relay.zeros_like(peak), peak)
    exps = relay.exp(relay.subtract(x, peak))
    total = relay.sum(exps, [-1], True)
    total = relay.where(relay.equal(total, _const(0, dtype)), relay.ones_like(total), total)
    return relay.divide(exps, total)


def _attention_bias(mask, is_causal, nonpad, past_len, q_len, kv_len, batch, dtype, ctx):
    """The additive (.., q_len, kv_len) bias from the mask, causality and padding, or None."""
    bias = None
    if mask is not None:
        width = kv_len - ctx.shape(mask)[-1]
        is_bool = ctx.dtype(mask) == "bool"
        if width > 0:
            pads = [(0, 0)] * (ctx.rank(mask) - 1) + [(0, width)]
            fill = relay.const(np.array(False)) if is_bool else _const(-np.inf, dtype)
            mask = relay.nn.pad(mask, pads, fill)
        bias = _additive(mask, dtype) if is_bool else mask
    rows = np.arange(q_len).reshape(q_len, 1)
    cols = np.arange(kv_len).reshape(1, kv_len)
    if is_causal:
        if nonpad is not None and past_len == 0:
            offset = relay.reshape(relay.subtract(relay.cast(nonpad, "int64"),
                                                  _const(q_len, "int64")), [-1, 1, 1, 1])
            allowed = relay.less_equal(_const(cols - rows, "int64"), offset)
            causal = _additive(allowed, dtype)
        else:
            causal = _const(np.where(cols <= rows + past_len, 0, -np.inf), dtype)
        bias = causal if bias is None else relay.add(bias, causal)
    if nonpad is not None:
        keep = relay.less(_const(cols.reshape(-1), "int64"),
                          relay.reshape(relay.cast(nonpad, "int64"), [-1, 1]))
        padding = _additive(relay.reshape(keep, [batch, 1, 1, kv_len]), dtype)
        bias = padding if bias is None else relay.add(bias, padding)
    return bias


def _window_bias(left, right, nonpad, past_len, q_len, kv_len, dtype):
    """Sliding window: query at absolute position p = offset + i sees keys j with
    p - left <= j <= p + right (-1: unbounded on that side)."""
    diff = np.arange(q_len).reshape(q_len, 1) - np.arange(kv_len).reshape(1, kv_len)
    if nonpad is not None and past_len == 0:
        offset = relay.reshape(relay.subtract(relay.cast(nonpad, "int64"),
                                              _const(q_len, "int64")), [-1, 1, 1, 1])
        diff = relay.add(_const(diff, "int64"), offset)
    else:
        diff = _const(diff + past_len, "int64")
    allowed = None
    if left >= 0:
        allowed = relay.less_equal(diff, _const(left, "int64"))
    if right >= 0:
        upper = relay.less_equal(relay.negative(diff), _const(right, "int64"))
        allowed = upper if allowed is None else relay.logical_and(allowed, upper)
    return _additive(allowed, dtype)


def _attention(inputs, attrs, ctx):
    from kiln.relay.frontend.onnx import onnx_dtype

    def optional(i):
        return inputs[i] if len(inputs) > i and inputs[i] is not None else None

    q, k, v = inputs[:3]
    mask, past_key, past_value, nonpad = optional(3), optional(4), optional(5), optional(6)
    dtype = ctx.dtype(q)
    rank3 = ctx.rank(q) == 3
    if rank3:
        q = _split_heads(q, attrs["q_num_heads"], ctx)
        k = _split_heads(k, attrs["kv_num_heads"], ctx)
        v = _split_heads(v, attrs["kv_num_heads"], ctx)
    batch, q_heads, q_len, head_size = ctx.shape(q)
    scale = attrs.get("scale")
    root_scale = _const(np.sqrt(1 / np.sqrt(head_size) if scale is None else scale), dtype)
    past_len = 0
    if past_key is not None:
        past_len = ctx.shape(past_key)[2]
        k = relay.concatenate([past_key, k], 2)
        v = relay.concatenate([past_value, v], 2)
    present_key, present_value = k, v
    kv_heads, kv_len = ctx.shape(k)[1], ctx.shape(k)[2]
    bias = _attention_bias(mask, attrs.get("is_causal", 0), nonpad, past_len, q_len, kv_len,
                           batch, dtype, ctx)
    left, right = attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    if left >= 0 or right >= 0:
        window = _window_bias(left, right, nonpad, past_len, q_len, kv_len, dtype)
        bias = window if bias is None else relay.add(bias, window)
    if q_heads != kv_heads:
        k = relay.repeat(k, q_heads // kv_heads, 1)
        v = relay.repeat(v, q_heads // kv_heads, 1)
    scores = matmul(relay.multiply(q, root_scale),
                    relay.multiply(relay.transpose(k, (0, 1, 3, 2)), root_scale), ctx)
    softcap = attrs.get("softcap", 0.0)
    if softcap and softcap > 0:
        cap = _const(softcap, dtype)
        scores = relay.multiply(relay.tanh(relay.divide(scores, cap)), cap)
    with_bias = scores if bias is None else relay.add(scores, bias)
    precision = attrs.get("softmax_precision")
    logits = relay.cast(with_bias, onnx_dtype(precision)) if precision else with_bias
    probs = _safe_softmax(logits, ctx.dtype(logits))
    if bias is not None:
        masked_rows = relay.isinf(relay.max(bias, [-1], True))
        probs = relay.where(masked_rows, relay.zeros_like(probs), probs)
    probs = relay.cast(probs, dtype) if precision else probs
    mode = attrs.get("qk_matmul_output_mode", 0)
    qk_output = {0: scores, 1: scores, 2: with_bias, 3: probs}[mode]
    out = matmul(probs, v, ctx)
    if rank3:
        out = relay.reshape(relay.transpose(out, (0, 2, 1, 3)), [batch, q_len, -1])
    return [out, present_key, present_value, qk_output]


register_function("Attention", _attention, since=23)


def _rotary_embedding(inputs, attrs, ctx):
    """RotaryEmbedding: rotate (first half, second half) or interleaved pairs of the first
    ``rotary_embedding_dim`` features of each head by the cached cos/sin of its position."""
    x, cos, sin = inputs[:3]
    positions = inputs[3] if len(inputs) > 3 else None
    rank = ctx.rank(x)
    in_shape = ctx.shape(x)
    if rank == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
        x = relay.transpose(x, (0, 2, 1, 3))
    else:
        batch, seq, hidden = in_shape
        heads = attrs["num_heads"]
        x = relay.reshape(x, [batch, seq, heads, hidden // heads])
    batch, seq, heads, head = ctx.shape(x)
    dim = attrs.get("rotary_embedding_dim", 0) or head
    if positions is not None:
        cos = relay.take(cos, positions, axis=0)
        sin = relay.take(sin, positions, axis=0)
    cos, sin = relay.expand_dims(cos, 2), relay.expand_dims(sin, 2)
    rotate = relay.strided_slice(x, [0, 0, 0, 0], [batch, seq, heads, dim])
    if attrs.get("interleaved", 0):
        x1 = relay.strided_slice(rotate, [0, 0, 0, 0], [batch, seq, heads, dim], [1, 1, 1, 2])
        x2 = relay.strided_slice(rotate, [0, 0, 0, 1], [batch, seq, heads, dim], [1, 1, 1, 2])
    else:
        x1 = relay.strided_slice(rotate, [0, 0, 0, 0], [batch, seq, heads, dim // 2])
        x2 = relay.strided_slice(rotate, [0, 0, 0, dim // 2], [batch, seq, heads, dim])
    real = relay.subtract(relay.multiply(cos, x1), relay.multiply(sin, x2))
    imag = relay.add(relay.multiply(sin, x1), relay.multiply(cos, x2))
    if attrs.get("interleaved", 0):
        rotated = relay.reshape(relay.stack([real, imag], -1), [batch, seq, heads, dim])
    else:
        rotated = relay.concatenate([real, imag], -1)
    if dim < head:
        rest = relay.strided_slice(x, [0, 0, 0, dim], [batch, seq, heads, head])
        rotated = relay.concatenate([rotated, rest], -1)
    if rank == 4:
        return relay.transpose(rotated, (0, 2, 1, 3))
    return relay.reshape(rotated, list(in_shape))


register_function("RotaryEmbedding", _rotary_embedding, since=23)
