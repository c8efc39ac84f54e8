"""ONNX converters: the recurrent layers RNN, GRU and LSTM.

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

Each direction projects the inputs of all steps with one GEMM (``[T * B, I] @ W.T`` plus the
biases that add outside the recurrent product). With ONNX's default activations, float32 and
no peepholes or ``input_forget`` (an RNN: tanh, relu or sigmoid), the direction is then
one layer op (``nn.contrib_lstm_sequence`` / ``nn.contrib_gru_sequence`` /
``nn.contrib_rnn_sequence``: one kernel running every step, the product of the state with all
gates' recurrent weights and the gate arithmetic), whose sequence length may be unknown until
run time (``Any``, on the VM). Otherwise the steps are unrolled over a static length, a step
being one ``dense`` for all gates and the gate arithmetic in primitive ops. Forward, reverse
and bidirectional layers, custom activations (with their alpha/beta), ``clip``, ``layout=1``,
LSTM peepholes and ``input_forget``, and GRU's ``linear_before_reset`` follow the ONNX
operator definitions. ``sequence_lens`` is the layer ops' per-row length (any direction,
static or unknown length); on the unrolled path it masks the state updates (either
direction). Either way a row of length 0 ends with a zero state (onnxruntime's result), and a
length outside ``[0, T]`` raises a TVMError naming it (at conversion when the lengths and
``T`` are known there, else at run time; onnxruntime refuses it too).

Example
-------
>>> from kiln.relay.frontend import onnx_ops_rnn
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> sorted(n for n in CONVERTERS if n in ("GRU", "LSTM", "RNN"))
['GRU', 'LSTM', 'RNN']
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import register_function, unsupported
from kiln.relay.op.nn.rnn import (
    RNN_CELL_ACTIVATIONS,
    contrib_check_sequence_lens,
    sequence_lens_error,
)
from kiln.runtime.error import TVMError

__all__: list[str] = []


def _const(value, dtype: str):
    return relay.const(np.asarray(value, dtype=dtype), dtype)


ACTIVATIONS = {
    "relu": lambda x, a, b, dt: relay.nn.relu(x),
    "tanh": lambda x, a, b, dt: relay.tanh(x),
    "sigmoid": lambda x, a, b, dt: relay.sigmoid(x),
    "affine": lambda x, a, b, dt: relay.add(relay.multiply(_const(a, dt), x), _const(b, dt)),
    "leakyrelu": lambda x, a, b, dt: relay.nn.leaky_relu(x, a),
    "thresholdedrelu": lambda x, a, b, dt: relay.where(
        relay.greater(x, _const(a, dt)), x, relay.zeros_like(x)),
    "scaledtanh": lambda x, a, b, dt: relay.multiply(
        _const(a, dt), relay.tanh(relay.multiply(_const(b, dt), x))),
    "hardsigmoid": lambda x, a, b, dt: relay.clip(
        relay.add(relay.multiply(_const(a, dt), x), _const(b, dt)), 0.0, 1.0),
    "elu": lambda x, a, b, dt: relay.where(
        relay.less(x, _const(0, dt)),
        relay.multiply(_const(a, dt), relay.subtract(relay.exp(x), _const(1, dt))), x),
    "softsign": lambda x, a, b, dt: relay.divide(x, relay.add(_const(1, dt), relay.abs(x))),
    "softplus": lambda x, a, b, dt: relay.log(relay.add(_const(1, dt), relay.exp(x))),
}

# Default alpha/beta of the activations that take them (ONNX operator definitions).
ACTIVATION_DEFAULTS = {"leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
                       "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0),
                       "affine": (1.0, 0.0)}


class _Activation:
    """One activation of a cell: ``act(x, dtype)``; ``key`` is its lower-case ONNX name."""

    def __init__(self, key, alpha, beta):
        self.key, self.alpha, self.beta = key, alpha, beta

    def __call__(self, x, dtype):
        return ACTIVATIONS[self.key](x, self.alpha, self.beta, dtype)


def _activation_list(attrs, defaults, num_directions, op_name):
    names = list(attrs.get("activations", defaults * num_directions))
    alphas = list(attrs.get("activation_alpha", []))
    betas = list(attrs.get("activation_beta", []))
    result = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise unsupported(op_name, f"activation {name!r}")
        alpha, beta = ACTIVATION_DEFAULTS.get(key, (0.0, 0.0))
        if key in ACTIVATION_DEFAULTS:
            alpha = alphas.pop(0) if alphas else alpha
            beta = betas.pop(0) if betas and key in ("scaledtanh", "hardsigmoid",
                                                     "affine") else beta
        result.append(_Activation(key, alpha, beta))
    per_direction = len(defaults)
    return [result[i * per_direction:(i + 1) * per_direction] for i in range(num_directions)]


class _Layer:
    """The unpacked inputs of a recurrent layer, time-major, one slice per direction."""

    def __init__(self, inputs, attrs, ctx, gates, op_name, state_count):
        x = inputs[0]
        self.layout = attrs.get("layout", 0)
        if self.layout:
            x = relay.transpose(x, (1, 0, 2))
        shape = ctx.shape(x)
        # an unknown length needs the whole-sequence layer ops (see fusable)
        self.symbolic = not is_static(shape[:1])
        self.steps, self.batch = shape[0], shape[1]
        self.dtype = ctx.dtype(x)
        self.hidden = attrs.get("hidden_size") or ctx.shape(inputs[2])[-1]
        direction = attrs.get("direction", "forward")
        self.directions = {"forward": ["forward"], "reverse": ["reverse"],
                           "bidirectional": ["forward", "reverse"]}[direction]
        self.clip = attrs.get("clip")
        self.x = x
        self.input_size = shape[2]
        count = len(self.directions)

        def per_direction(index):
            value = inputs[index] if len(inputs) > index else None
            if index in _STATE_INPUTS and is_static([self.batch]):
                value = _static_fill(value, (count, self.batch, self.hidden))
            return [None] * count if value is None else _split(value, count, 0, squeeze=True)

        self.w, self.r = per_direction(1), per_direction(2)
        self.b = per_direction(3)
        self.op_name = op_name
        lens = inputs[4] if len(inputs) > 4 else None
        self.lens = None if lens is None else self.checked_lens(lens, ctx)
        # an initial state built from the input's shape has unknown dims: give it its own
        self.initial = [[v if v is None or not is_static([self.batch])
                         else relay.reshape(v, (self.batch, self.hidden))
                         for v in per_direction(5 + i)] for i in range(state_count)]
        self.gates = gates
        self.ctx = ctx

    def checked_lens(self, lens, ctx):
        """``sequence_lens`` known to lie in ``[0, T]``: lengths known at conversion with a
        static ``T`` are checked now, others by a run-time check (onnxruntime refuses a
        length outside; the masks and layer ops would clamp it)."""
        value = ctx.value(lens)
        if value is not None and not self.symbolic:
            message = sequence_lens_error(self.op_name, np.asarray(value), self.steps)
            if message is not None:
                raise TVMError(message)
            return lens
        return contrib_check_sequence_lens(relay.cast(lens, "int32"), self.x,
                                           self.op_name.lower())

    def zeros(self):
        return relay.zeros((self.batch, self.hidden), self.dtype)

    def clipped(self, x):
        return relay.clip(x, -self.clip, self.clip) if self.clip is not None else x

    def step_mask(self, t):
        """(batch, 1) bool: whether step ``t`` lies inside each sequence (None: all do)."""
        if self.lens is None:
            return None
        value = self.ctx.value(self.lens)
        if value is not None and np.all(value == self.steps):
            return None
        mask = relay.less(_const(t, "int32"), relay.cast(self.lens, "int32"))
        return relay.expand_dims(mask, 1)

    def ran_no_step(self, state):
        """``state`` after the unrolled steps, zero in each row of length 0 (onnxruntime's
        final state for such a row, as the layer ops give; the masked steps kept the initial
        state there)."""
        if self.step_mask(0) is None:
            return state
        ran = relay.expand_dims(relay.greater(relay.cast(self.lens, "int32"),
                                              _const(0, "int32")), 1)
        return relay.where(ran, state, relay.zeros_like(state))

    def step_inputs(self, projection):
        """The per-step rows ``[B, G*H]`` of a ``[T, B, G*H]`` projection (static length)."""
        if self.symbolic:
            raise unsupported(self.op_name, "a sequence length unknown at conversion time "
                              "with non-default activations, peepholes, input_forget or "
                              "sequence_lens")
        return _split(projection, self.steps, 0, squeeze=True)

    def order(self, direction):
        """The steps in ``direction``'s order. With ``sequence_lens`` a reverse row keeps
        its initial state through the masked steps past its length, so its first update
        is at its own last step, as ONNX says."""
        steps = range(self.steps)
        return list(reversed(steps)) if direction == "reverse" else list(steps)

    def projection(self, d, bias):
        """``[T, B, G*H]``: every step's input projection ``x_t @ W.T + bias`` as one GEMM."""
        flat = relay.reshape(self.x, (-1, self.input_size))
        out = relay.nn.dense(flat, self.w[d])
        if bias is not None:
            out = relay.add(out, bias)
        return relay.reshape(out, (-1, self.batch, self.gates * self.hidden))

    def fusable(self, acts, defaults, *, extra_ok=True):
        """Whether the layer ops compute this layer: ONNX's default activations, float32,
        static batch and input size (anything else composes the cell from primitive ops over
        a static length)."""
        default = all(a.key == key for direction in acts for a, key in zip(direction, defaults))
        return (extra_ok and default and self.dtype == "float32"
                and is_static([self.batch, self.input_size]))

    def fused_lens(self):
        """The layer ops' ``sequence_lens`` (None: every row runs every step)."""
        if self.lens is None:
            return None
        value = self.ctx.value(self.lens)
        if value is not None and not self.symbolic and np.all(value == self.steps):
            return None
        return relay.cast(self.lens, "int32")

    def finish(self, outputs_per_direction, finals_per_direction):
        """ONNX outputs: Y (steps, dirs, batch, H) then each final state (dirs, batch, H).

        A direction's outputs are a list of per-step ``[B, H]`` values, or one ``[T, B, H]``
        value (from a loop over an unknown length)."""
        ys = [outs if not isinstance(outs, list) else relay.stack(outs, 0)
              for outs in outputs_per_direction]
        y = _stack(ys, 1)
        finals = [_stack(list(states), 0) for states in zip(*finals_per_direction)]
        if self.layout:
            y = relay.transpose(y, (2, 0, 1, 3))
            finals = [relay.transpose(f, (1, 0, 2)) for f in finals]
        return [y, *finals]


def _stack(values, axis):
    """``stack``; of one value, ``expand_dims``, which executors run as a reshape (no copy,
    no kernel)."""
    return relay.expand_dims(values[0], axis) if len(values) == 1 else relay.stack(values, axis)


# ONNX input indices of the initial states (initial_h; LSTM's initial_c)
_STATE_INPUTS = (5, 6)
# one-input ops that only move, select or repeat elements: a constant fill stays one
_MOVES_ELEMENTS = frozenset({
    "reshape", "contrib_reverse_reshape", "squeeze", "expand_dims", "strided_slice",
    "transpose", "reverse", "layout_transform", "tile", "nn.batch_flatten", "broadcast_to",
    "copy"})


def _static_fill(value, shape):
    """An initial state computed as ``dyn.full(c, <shape arithmetic on the input>)`` (how
    PyTorch exports the zero states of a model with a dynamic axis), sliced or reshaped by
    ops that only move elements, as ``full(c, shape)``: ONNX fixes the state's shape, which
    Relay cannot see through the arithmetic. The state then folds to a constant instead of
    costing several kernels per run."""
    from kiln.ir.op import Op
    from kiln.relay.expr import Call, Constant

    source = value
    while (isinstance(source, Call) and isinstance(source.op, Op) and len(source.args) == 1
           and source.op.name in _MOVES_ELEMENTS):
        source = source.args[0]
    if (isinstance(source, Call) and source.op == Op.get("dyn.full")
            and isinstance(source.args[0], Constant)):
        return relay.full(source.args[0], shape, str(source.attrs.dtype))
    return value


def _split(x, parts, axis, squeeze=False):
    if parts == 1:
        pieces = [x]
    else:
        tuple_value = relay.split(x, parts, axis)
        pieces = [tuple_value[i] for i in range(parts)]
    return [relay.squeeze(p, [axis]) for p in pieces] if squeeze else pieces


def _bias_pairs(bias, hidden_count):
    """(input bias chunks, recurrent bias chunks) from ONNX's concatenated [Wb, Rb]."""
    if bias is None:
        return None, None
    wb, rb = _split(bias, 2, 0)
    return _split(wb, hidden_count, 0), _split(rb, hidden_count, 0)


def _masked(mask, new, old):
    return new if mask is None else relay.where(mask, new, old)


def _lanes(hidden):
    """Lanes of the packed recurrent weight: two AVX2 vectors, or the largest divisor."""
    return next(n for n in (16, 8, 4, 2, 1) if hidden % n == 0)


def _state_row(state, index):
    """``state[index]`` of a stacked ``[2, B, H]`` state."""
    return relay.squeeze(relay.strided_slice(state, [index], [index + 1], axes=[0]), [0])


def _recurrent(h, r, gates, rbias=None):
    """``h @ R.T (+ rbias)`` split per gate (one product for all gates)."""
    out = relay.nn.dense(h, r)
    if rbias is not None:
        out = relay.add(out, rbias)
    return _split(out, gates, 1) if gates > 1 else [out]


def _static_state(layer, state):
    """``state`` with static ``[.., B, H]`` dims: an initial state built by shape arithmetic
    on an input of unknown length has unknown dims to Relay (the layer ops need them)."""
    shape = layer.ctx.shape(state)
    if is_static(shape):
        return state
    return relay.reshape(state, (*shape[:-2], layer.batch, layer.hidden))


def _rnn(inputs, attrs, ctx):
    layer = _Layer(inputs, attrs, ctx, 1, "RNN", 1)
    acts = _activation_list(attrs, ["Tanh"], len(layer.directions), "RNN")
    fused = layer.fusable([], []) and all(a[0].key in RNN_CELL_ACTIVATIONS for a in acts)
    ys, finals = [], []
    for d, direction in enumerate(layer.directions):
        f = acts[d][0]
        wb, rb = _bias_pairs(layer.b[d], 1)
        bias = relay.add(wb[0], rb[0]) if wb is not None else None
        projection = layer.projection(d, bias)
        h = layer.initial[0][d] if layer.initial[0][d] is not None else layer.zeros()
        if fused:
            weight = relay.nn.pack_recurrent_weight(layer.r[d], 1, layer.hidden,
                                                    _lanes(layer.hidden))
            y, h = relay.nn.contrib_rnn_sequence(projection, _static_state(layer, h), weight,
                                                 f.key, layer.clip, direction == "reverse",
                                                 layer.fused_lens())
            ys.append(y)
            finals.append([h])
            continue
        xs = layer.step_inputs(projection)
        outs = [None] * layer.steps
        for t in layer.order(direction):
            new = f(layer.clipped(relay.add(relay.nn.dense(h, layer.r[d]), xs[t])),
                    layer.dtype)
            mask = layer.step_mask(t)
            outs[t] = _masked(mask, new, relay.zeros_like(new))
            h = _masked(mask, new, h)
        ys.append(outs)
        finals.append([layer.ran_no_step(h)])
    return layer.finish(ys, finals)


def _gru_biases(layer, d, linear_before_reset):
    """(projection bias [3H] or None, recurrent h-gate bias [H] or None): every bias that
    adds outside a gate's recurrent product goes into the projection."""
    wb, rb = _bias_pairs(layer.b[d], 3)
    if wb is None:
        return None, None
    zero = relay.zeros_like(rb[2])
    outside = relay.concatenate([relay.add(wb[0], rb[0]), relay.add(wb[1], rb[1]),
                                 wb[2] if linear_before_reset else relay.add(wb[2], rb[2])], 0)
    return outside, (rb[2] if linear_before_reset else zero)


def _gru(inputs, attrs, ctx):
    layer = _Layer(inputs, attrs, ctx, 3, "GRU", 1)
    acts = _activation_list(attrs, ["Sigmoid", "Tanh"], len(layer.directions), "GRU")
    linear_before_reset = attrs.get("linear_before_reset", 0)
    fused = layer.fusable(acts, ["sigmoid", "tanh"])
    lanes = _lanes(layer.hidden)
    ys, finals = [], []
    for d, direction in enumerate(layer.directions):
        f, g = acts[d]
        bias, hbias = _gru_biases(layer, d, linear_before_reset)
        projection = layer.projection(d, bias)
        h = layer.initial[0][d] if layer.initial[0][d] is not None else layer.zeros()
        if fused:
            weight = relay.nn.pack_recurrent_weight(layer.r[d], 3, layer.hidden, lanes)
            if hbias is None:
                hbias = relay.zeros((layer.hidden,), layer.dtype)
            y, h = relay.nn.contrib_gru_sequence(
                projection, _static_state(layer, h), weight, hbias, bool(linear_before_reset),
                layer.clip, direction == "reverse", layer.fused_lens())
            ys.append(y)
            finals.append([h])
            continue
        xs = layer.step_inputs(projection)
        outs = [None] * layer.steps
        rz, rr, rh = _split(layer.r[d], 3, 0)
        r_zr = relay.concatenate([rz, rr], 0)
        for t in layer.order(direction):
            xz, xr, xh = _split(xs[t], 3, 1)
            if linear_before_reset:
                pz, pr, ph = _recurrent(h, layer.r[d], 3)
                ph = relay.add(ph, hbias) if hbias is not None else ph
            else:
                pz, pr = _recurrent(h, r_zr, 2)
            z = f(layer.clipped(relay.add(xz, pz)), layer.dtype)
            r = f(layer.clipped(relay.add(xr, pr)), layer.dtype)
            if linear_before_reset:
                recurrent = relay.multiply(r, ph)
            else:
                recurrent = relay.nn.dense(relay.multiply(r, h), rh)
            candidate = g(layer.clipped(relay.add(xh, recurrent)), layer.dtype)
            one = _const(1, layer.dtype)
            new = relay.add(relay.multiply(relay.subtract(one, z), candidate),
                            relay.multiply(z, h))
            mask = layer.step_mask(t)
            outs[t] = _masked(mask, new, relay.zeros_like(new))
            h = _masked(mask, new, h)
        ys.append(outs)
        finals.append([layer.ran_no_step(h)])
    return layer.finish(ys, finals)


def _lstm(inputs, attrs, ctx):
    layer = _Layer(inputs, attrs, ctx, 4, "LSTM", 2)
    acts = _activation_list(attrs, ["Sigmoid", "Tanh", "Tanh"], len(layer.directions), "LSTM")
    peepholes = inputs[7] if len(inputs) > 7 else None
    peep = [None] * len(layer.directions) if peepholes is None else \
        _split(peepholes, len(layer.directions), 0, squeeze=True)
    input_forget = attrs.get("input_forget", 0)
    fused = layer.fusable(acts, ["sigmoid", "tanh", "tanh"],
                          extra_ok=peepholes is None and not input_forget)
    lanes = _lanes(layer.hidden)
    ys, finals = [], []
    for d, direction in enumerate(layer.directions):
        f, g, hact = acts[d]
        bias = None
        if layer.b[d] is not None:
            wb, rb = _split(layer.b[d], 2, 0)
            bias = relay.add(wb, rb)
        projection = layer.projection(d, bias)
        h = layer.initial[0][d] if layer.initial[0][d] is not None else layer.zeros()
        c = layer.initial[1][d] if layer.initial[1][d] is not None else layer.zeros()
        if fused:
            weight = relay.nn.pack_recurrent_weight(layer.r[d], 4, layer.hidden, lanes)
            state = _static_state(layer, relay.stack([h, c], 0))
            y, state = relay.nn.contrib_lstm_sequence(projection, state, weight, layer.clip,
                                                      direction == "reverse", layer.fused_lens())
            ys.append(y)
            finals.append([_state_row(state, 0), _state_row(state, 1)])
            continue
        xs = layer.step_inputs(projection)
        outs = [None] * layer.steps
        p_i, p_o, p_f = _split(peep[d], 3, 0) if peep[d] is not None else (None,) * 3
        for t in layer.order(direction):
            pre = [relay.add(x, p) for x, p in zip(_split(xs[t], 4, 1),
                                                   _recurrent(h, layer.r[d], 4))]
            if p_i is not None:
                pre[0] = relay.add(pre[0], relay.multiply(p_i, c))
                pre[2] = relay.add(pre[2], relay.multiply(p_f, c))
            i = f(layer.clipped(pre[0]), layer.dtype)
            forget = f(layer.clipped(pre[2]), layer.dtype)
            if input_forget:
                forget = relay.subtract(_const(1, layer.dtype), i)
            candidate = g(layer.clipped(pre[3]), layer.dtype)
            new_c = relay.add(relay.multiply(forget, c), relay.multiply(i, candidate))
            o_pre = pre[1] if p_o is None else relay.add(pre[1], relay.multiply(p_o, new_c))
            o = f(layer.clipped(o_pre), layer.dtype)
            new_h = relay.multiply(o, hact(new_c, layer.dtype))
            mask = layer.step_mask(t)
            outs[t] = _masked(mask, new_h, relay.zeros_like(new_h))
            h, c = _masked(mask, new_h, h), _masked(mask, new_c, c)
        ys.append(outs)
        finals.append([layer.ran_no_step(h), layer.ran_no_step(c)])
    return layer.finish(ys, finals)


register_function("RNN", _rnn)
register_function("GRU", _gru)
register_function("LSTM", _lstm)
