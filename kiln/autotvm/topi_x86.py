"""kiln's x86 schedules as AutoTVM templates, and the Relay calls they tune.

Entry points: the TOPI templates ``dense_pack.x86``, ``conv2d_nchw.x86``,
``depthwise_conv2d_nchw.x86``, ``batch_matmul_pack.x86`` and ``matmul_pack.x86`` (``nn.matmul``,
kiln.jit's ``@``; registered on import), :data:`KNOBS` (template name -> ``knobs(cfg)``, the
schedule's config dict), and
:data:`RELAY_TASKS` (Relay implementation name -> ``(task_name, args)`` of its call).

Each template defines a space over the knobs of the schedule's ``DEFAULT_CONFIG``; a
fallback config (nothing tuned) maps to no knob at all, so an untuned build is exactly
today's default schedule. While tuning (``GLOBAL_SCOPE.in_tuning``), weights are
placeholders in their packed layout, as Relay folds the packing at compile time.

Relay implementations whose weight was prepacked by AlterOpLayout
(``contrib_dense_pack.x86``, ``conv2d_nchw_prepacked.x86``) map back to the workload of
the unpacked call, as TVM's NCHWc workloads do: one record tunes both.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.task.task import DEFAULT_CONFIG_INDEX, deserialize_args
from kiln.autotvm.task.topi_integration import register_topi_compute, register_topi_schedule
from kiln.runtime.error import TVMError
from kiln.topi.nn.conv import conv_output_size, get_pad_tuple
from kiln.topi.utils import divisor_at_most, get_const_tuple
from kiln.topi.x86 import batch_matmul as x86_batch_matmul
from kiln.topi.x86 import conv2d as x86_conv2d
from kiln.topi.x86 import dense as x86_dense
from kiln.topi.x86 import depthwise as x86_depthwise
from kiln.topi.x86 import matmul as x86_matmul

__all__ = ["KNOBS", "RELAY_TASKS", "knobs_of", "entity_size", "entity_val", "relay_task_specs",
           "nchwc_blocks", "nchwc_sizes"]

# vector block widths (float lanes) the schedules are written for: AVX2 vectors are 8 wide
_LANES = (4, 8, 16, 32)


def _lanes_of(n: int) -> list[int]:
    """Vector block widths for an extent ``n``: the standard widths dividing it, and the
    default schedule's own choice (the largest divisor up to 16, e.g. 10 for 1000)."""
    return sorted({d for d in _LANES if n % d == 0} | {divisor_at_most(n, 16)})


def _entity(cfg: Any, name: str) -> Any:
    try:
        return cfg[name]
    except KeyError:  # a record from a template with other knobs: keep the default
        return None


def entity_size(cfg: Any, name: str, index: int = -1) -> int | None:
    """The ``index``-th factor of split knob ``name`` of ``cfg`` (None if it has none)."""
    entity = _entity(cfg, name)
    return None if entity is None else entity.size[index]


def entity_val(cfg: Any, name: str) -> Any:
    """The value of other knob ``name`` of ``cfg`` (None if it has none)."""
    entity = _entity(cfg, name)
    return None if entity is None else entity.val


def _pair(value: Any) -> tuple[int, int]:
    values = _ints(value) if isinstance(value, list | tuple) else (int(value),)
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def knobs_of(cfg: Any, table: dict) -> dict:
    """The schedule config of ``cfg``: empty for a fallback (the default schedule)."""
    if cfg is None or cfg.is_fallback:
        return {}
    found = {key: get(cfg) for key, get in table.items()}
    return {k: v for k, v in found.items() if v is not None}


# ---- dense_pack.x86 ----------------------------------------------------------------------

def _dense_space(cfg: Any, m: int, n: int, k: int) -> None:
    lanes = _lanes_of(n)
    cfg.define_split("tile_y", m, num_outputs=2, filter=lambda e: e.size[-1] <= 8)
    cfg.define_split("tile_x", n, num_outputs=3,
                     filter=lambda e: e.size[-1] in lanes and e.size[-1] * e.size[-2] <= 64)
    cfg.define_split("tile_k", k, num_outputs=2, filter=lambda e: e.size[-1] <= 16)
    cfg.add_flop(2 * m * n * k)


_DENSE_KNOBS = {"tile_y": lambda c: entity_size(c, "tile_y"),
                "tile_x": lambda c: entity_size(c, "tile_x"),
                "blocks": lambda c: entity_size(c, "tile_x", -2),
                "tile_k": lambda c: entity_size(c, "tile_k")}


@register_topi_compute("dense_pack.x86")
def dense_pack(cfg, data, weight, bias=None, out_dtype=None):
    """``data @ weight.T (+ bias)`` through a packed weight, tile sizes from ``cfg``."""
    m, k = get_const_tuple(data.shape)
    n = get_const_tuple(weight.shape)[0]
    _dense_space(cfg, m, n, k)
    knobs = knobs_of(cfg, _DENSE_KNOBS)
    if GLOBAL_SCOPE.in_tuning:
        lanes = knobs.get("tile_x", x86_dense.pack_lanes(n, x86_dense.DEFAULT_CONFIG["tile_x"]))
        packed = te.placeholder((n // lanes, k, lanes), weight.dtype, name="weight_packed")
        return x86_dense.dense_packed_weight(data, packed, bias, out_dtype, knobs)
    return x86_dense.dense_pack(data, weight, bias, out_dtype, knobs)


@register_topi_schedule("dense_pack.x86")
def schedule_dense_pack(cfg, outs):
    """:func:`kiln.topi.x86.dense.schedule_dense_pack` with ``cfg``'s tiles."""
    return x86_dense.schedule_dense_pack(outs, knobs_of(cfg, _DENSE_KNOBS))


# ---- conv2d_nchw.x86 (computed in NCHW[x]c) -----------------------------------------------

def _conv_geometry(data, kernel, strides, padding, dilation) -> tuple[int, int, int, int]:
    """``(out_height, out_width, kernel_height, kernel_width)``."""
    _, _, h, w = get_const_tuple(data.shape)
    kh, kw = get_const_tuple(kernel.shape)[2:]
    sh, sw = _pair(strides)
    dh, dw = _pair(dilation)
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    return (conv_output_size(h, kh, sh, dh, pt, pb), conv_output_size(w, kw, sw, dw, pl, pr),
            kh, kw)


_CONV_KNOBS = {"ic_bn": lambda c: entity_size(c, "tile_ic"),
               "oc_bn": lambda c: entity_size(c, "tile_oc"),
               "tile_ow": lambda c: entity_size(c, "tile_ow"),
               "unroll_kw": lambda c: entity_val(c, "unroll_kw")}


@register_topi_compute("conv2d_nchw.x86")
def conv2d_nchw(cfg, data, kernel, strides, padding, dilation, out_dtype=None):
    """NCHW conv2d computed channel-blocked; block sizes and unrolling from ``cfg``."""
    n, c = get_const_tuple(data.shape)[:2]
    o = get_const_tuple(kernel.shape)[0]
    oh, ow, kh, kw = _conv_geometry(data, kernel, strides, padding, dilation)
    lanes = _lanes_of(o)
    # register budget of a block (see topi.x86.conv2d): 16 columns of one zmm on AVX-512
    widest = max(12 if kw == 1 else 8, x86_conv2d.max_tile_width(1, kw))
    # TVM's order of knobs; an input channel block of 1 is the untuned schedule's loop order
    cfg.define_split("tile_ic", c, num_outputs=2)
    cfg.define_split("tile_oc", o, num_outputs=2, filter=lambda e: e.size[-1] in lanes)
    cfg.define_split("tile_ow", ow, num_outputs=2, policy="verbose",
                     filter=lambda e: e.size[-1] <= widest)
    cfg.define_knob("unroll_kw", [True, False])
    cfg.add_flop(2 * n * o * oh * ow * c * kh * kw)
    knobs = knobs_of(cfg, _CONV_KNOBS)
    if GLOBAL_SCOPE.in_tuning:
        bn, _ = x86_conv2d.block_shape(o, ow, {**x86_conv2d.DEFAULT_CONFIG, **knobs}, kw)
        packed = te.placeholder((o // bn, c, kh, kw, bn), kernel.dtype, name="kernel_packed")
        return x86_conv2d.conv2d_nchw_packed(data, packed, strides, padding, dilation,
                                             out_dtype, knobs)
    return x86_conv2d.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, knobs)


@register_topi_schedule("conv2d_nchw.x86")
def schedule_conv2d_nchw(cfg, outs):
    """:func:`kiln.topi.x86.conv2d.schedule_conv2d_nchw` with ``cfg``'s knobs."""
    return x86_conv2d.schedule_conv2d_nchw(outs, knobs_of(cfg, _CONV_KNOBS))


# ---- conv2d_NCHWc.x86 (TVM's x86 conv task: blocked activations between convs) -----------

def nchwc_sizes(data_shape: tuple, kernel_shape: tuple) -> tuple[int, ...]:
    """``(n, c, h, w, o, kh, kw)`` of a conv whose data is NCHW or ``NCHW{ic}c`` and kernel
    OIHW, ``OIHW{oc}o`` or ``OIHW{ic}i{oc}o``."""
    n, c, h, w = data_shape[:4]
    c *= data_shape[4] if len(data_shape) == 5 else 1
    o = kernel_shape[0] * (kernel_shape[-1] if len(kernel_shape) > 4 else 1)
    return n, c, h, w, o, kernel_shape[2], kernel_shape[3]


def _nchwc_geometry(h, w, kh, kw, strides, padding, dilation) -> tuple[int, int]:
    """``(out_height, out_width)``."""
    sh, sw = _pair(strides)
    dh, dw = _pair(dilation)
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    return (conv_output_size(h, kh, sh, dh, pt, pb), conv_output_size(w, kw, sw, dw, pl, pr))


def nchwc_blocks(c: int, o: int, knobs: dict) -> tuple[int, int]:
    """``(ic_bn, oc_bn)``: a config's activation blocks, or the untuned layouts'."""
    return (knobs.get("ic_bn") or x86_conv2d.channel_block(c),
            knobs.get("oc_bn") or x86_conv2d.channel_block(o))


# TVM's unroll_kw orders the blocked kernel's reduction (blocked_unroll_kw); an NCHW conv run
# with an NCHWc record (its weight not constant, so not blocked) reads it as its own unroll_kw
_NCHWC_KNOBS = {"ic_bn": lambda c: entity_size(c, "tile_ic"),
                "oc_bn": lambda c: entity_size(c, "tile_oc"),
                "tile_ow": lambda c: entity_size(c, "tile_ow"),
                "unroll_kw": lambda c: entity_val(c, "unroll_kw"),
                "blocked_unroll_kw": lambda c: entity_val(c, "unroll_kw"),
                "tile_oh": lambda c: entity_val(c, "tile_oh")}


def _nchwc_space(cfg: Any, c: int, o: int, oh: int, ow: int, kh: int, kw: int) -> None:
    """TVM's knobs (tile_ic, tile_oc, tile_ow, and unroll_kw or, for 1x1, tile_oh), blocks
    limited to the vector widths kiln's kernels are written for, register blocks to what fits
    the registers, and tile_oh to 2 where it divides the output height."""
    widest = max(12 if kw == 1 else 8, x86_conv2d.max_tile_width(1, kw))
    ic_lanes, oc_lanes = _lanes_of(c), _lanes_of(o)
    cfg.define_split("tile_ic", c, num_outputs=2, filter=lambda e: e.size[-1] in ic_lanes)
    cfg.define_split("tile_oc", o, num_outputs=2, filter=lambda e: e.size[-1] in oc_lanes)
    cfg.define_split("tile_ow", ow, num_outputs=2, policy="verbose",
                     filter=lambda e: e.size[-1] <= widest)
    if kh > 1 or kw > 1:
        cfg.define_knob("unroll_kw", [False, True])
    else:
        cfg.define_knob("tile_oh", [1, 2] if oh > 1 and oh % 2 == 0 else [1])


@register_topi_compute("conv2d_NCHWc.x86")
def conv2d_NCHWc(cfg, data, kernel, strides, padding, dilation, layout,  # noqa: N802
                 out_layout, out_dtype=None):
    """TVM's ``conv2d_NCHWc.x86``: ``NCHW{ic}c`` data × ``OIHW{ic}i{oc}o`` kernel →
    ``NCHW{oc}c``, blocks from ``cfg``'s tile_ic / tile_oc. A workload in NCHW terms (as
    task extraction gives: NCHW data, OIHW kernel) is computed on data and kernel packed to
    the config's blocks (while tuning, placeholders already in them, as Relay feeds the
    blocked activations and folds the kernel's packing)."""
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(kernel.shape)
    n, c, h, w, o, kh, kw = nchwc_sizes(dshape, kshape)
    oh, ow = _nchwc_geometry(h, w, kh, kw, strides, padding, dilation)
    _nchwc_space(cfg, c, o, oh, ow, kh, kw)
    cfg.add_flop(2 * n * o * oh * ow * c * kh * kw)
    knobs = knobs_of(cfg, _NCHWC_KNOBS)
    if len(dshape) == 4 and len(kshape) == 4:
        ic_bn, oc_bn = nchwc_blocks(c, o, knobs)
        if c % ic_bn or o % oc_bn:
            raise TVMError(f"conv2d_NCHWc.x86: blocks {ic_bn}/{oc_bn} do not divide the "
                           f"{c} input / {o} output channels")
        layout, out_layout = f"NCHW{ic_bn}c", f"NCHW{oc_bn}c"
        blocked = (n, c // ic_bn, h, w, ic_bn)
        packed = (o // oc_bn, c // ic_bn, kh, kw, ic_bn, oc_bn)
        if GLOBAL_SCOPE.in_tuning:
            data = te.placeholder(blocked, data.dtype, name="data")
            kernel = te.placeholder(packed, kernel.dtype, name="kernel")
        else:
            data, kernel = _pack_nchwc(data, kernel, ic_bn, oc_bn)
    return x86_conv2d.conv2d_NCHWc(data, kernel, strides, padding, dilation, layout,
                                   out_layout, out_dtype, knobs)


def _pack_nchwc(data: Any, kernel: Any, ic_bn: int, oc_bn: int) -> tuple[Any, Any]:
    """NCHW data and OIHW kernel in ``NCHW{ic_bn}c`` / ``OIHW{ic_bn}i{oc_bn}o`` (TVM's
    ``_pack_data``), as injective stages the schedule inlines."""
    n, c, h, w = get_const_tuple(data.shape)
    o, _, kh, kw = get_const_tuple(kernel.shape)
    data_vec = te.compute((n, c // ic_bn, h, w, ic_bn),
                          lambda b, cc, y, x, ci: data[b, cc * ic_bn + ci, y, x],
                          name="data_vec", tag="injective")
    kernel_vec = te.compute((o // oc_bn, c // ic_bn, kh, kw, ic_bn, oc_bn),
                            lambda oo, cc, y, x, ci, oi: kernel[oo * oc_bn + oi,
                                                                cc * ic_bn + ci, y, x],
                            name="kernel_vec", tag="injective")
    return data_vec, kernel_vec


@register_topi_schedule("conv2d_NCHWc.x86")
def schedule_conv2d_NCHWc(cfg, outs):  # noqa: N802
    """:func:`kiln.topi.x86.conv2d.schedule_conv2d_nchw` with ``cfg``'s knobs."""
    return x86_conv2d.schedule_conv2d_nchw(outs, knobs_of(cfg, _NCHWC_KNOBS))


# ---- depthwise_conv2d_nchw.x86 ------------------------------------------------------------

_DEPTHWISE_KNOBS = {"c_bn": lambda c: entity_size(c, "tile_c"),
                    "tile_ow": lambda c: entity_size(c, "tile_ow")}


@register_topi_compute("depthwise_conv2d_nchw.x86")
def depthwise_conv2d_nchw(cfg, data, kernel, strides, padding, dilation, out_dtype=None):
    """Depthwise NCHW conv2d vectorized over channel blocks of ``cfg``'s width."""
    n = get_const_tuple(data.shape)[0]
    o = get_const_tuple(kernel.shape)[0]
    oh, ow, kh, kw = _conv_geometry(data, kernel, strides, padding, dilation)
    lanes = _lanes_of(o)
    cfg.define_split("tile_c", o, num_outputs=2, filter=lambda e: e.size[-1] in lanes)
    cfg.define_split("tile_ow", ow, num_outputs=2, policy="verbose",
                     filter=lambda e: e.size[-1] <= 8)
    cfg.add_flop(2 * n * o * oh * ow * kh * kw)
    return x86_depthwise.depthwise_conv2d_nchw(data, kernel, strides, padding, dilation,
                                               out_dtype, knobs_of(cfg, _DEPTHWISE_KNOBS))


@register_topi_schedule("depthwise_conv2d_nchw.x86")
def schedule_depthwise_conv2d_nchw(cfg, outs):
    """:func:`kiln.topi.x86.depthwise.schedule_depthwise_conv2d_nchw` with ``cfg``'s knobs."""
    return x86_depthwise.schedule_depthwise_conv2d_nchw(outs, knobs_of(cfg, _DEPTHWISE_KNOBS))


# ---- depthwise_conv2d_NCHWc.x86 ------------------------------------------------------------

# kiln's blocked depthwise kernel reads and writes one block size: tile_oc is both (TVM
# splits tile_ic and tile_oc apart and its fallback sets them equal)
_DEPTHWISE_NCHWC_KNOBS = {"c_bn": lambda c: entity_size(c, "tile_oc"),
                          "tile_ow": lambda c: entity_size(c, "tile_ow")}


def _depthwise_nchwc_sizes(dshape: tuple, kshape: tuple) -> tuple[int, ...]:
    """``(n, c, h, w, kh, kw)`` of a depthwise conv: data NCHW or ``NCHW{c}c``, kernel
    ``[C, 1, KH, KW]`` or ``OIHW1i{c}o``."""
    n, c, h, w = dshape[:4]
    c *= dshape[4] if len(dshape) == 5 else 1
    return n, c, h, w, kshape[2], kshape[3]


@register_topi_compute("depthwise_conv2d_NCHWc.x86")
def depthwise_conv2d_NCHWc(cfg, data, kernel, strides, padding, dilation,  # noqa: N802
                           layout, out_layout, out_dtype=None):
    """TVM's ``depthwise_conv2d_NCHWc.x86`` (channel multiplier 1): ``NCHW{c}c`` data ×
    ``OIHW1i{c}o`` kernel → ``NCHW{c}c``, the block from ``cfg``'s tile_oc; an NCHW-terms
    workload is computed on data and kernel packed to it (placeholders while tuning)."""
    dshape, kshape = get_const_tuple(data.shape), get_const_tuple(kernel.shape)
    n, c, h, w, kh, kw = _depthwise_nchwc_sizes(dshape, kshape)
    oh, ow = _nchwc_geometry(h, w, kh, kw, strides, padding, dilation)
    lanes = _lanes_of(c)
    cfg.define_split("tile_oc", c, num_outputs=2, filter=lambda e: e.size[-1] in lanes)
    cfg.define_split("tile_ow", ow, num_outputs=2, policy="verbose",
                     filter=lambda e: e.size[-1] <= 16)
    cfg.add_flop(2 * n * c * oh * ow * kh * kw)
    knobs = knobs_of(cfg, _DEPTHWISE_NCHWC_KNOBS)
    if len(dshape) == 4 and len(kshape) == 4:
        bn = knobs.get("c_bn") or x86_conv2d.channel_block(c)
        layout = out_layout = f"NCHW{bn}c"
        shapes = ((n, c // bn, h, w, bn), (c // bn, 1, kh, kw, 1, bn))
        if GLOBAL_SCOPE.in_tuning:
            data = te.placeholder(shapes[0], data.dtype, name="data")
            kernel = te.placeholder(shapes[1], kernel.dtype, name="kernel")
        else:
            source_data, source_kernel = data, kernel
            data = te.compute(shapes[0], lambda b, cc, y, x, ci: source_data[
                b, cc * bn + ci, y, x], name="data_vec", tag="injective")
            kernel = te.compute(shapes[1], lambda cc, i, y, x, j, ci: source_kernel[
                cc * bn + ci, 0, y, x], name="kernel_vec", tag="injective")
    return x86_depthwise.depthwise_conv2d_NCHWc(data, kernel, strides, padding, dilation,
                                                layout, out_layout, out_dtype, knobs)


@register_topi_schedule("depthwise_conv2d_NCHWc.x86")
def schedule_depthwise_conv2d_NCHWc(cfg, outs):  # noqa: N802
    """:func:`kiln.topi.x86.depthwise.schedule_depthwise_conv2d_nchw` with ``cfg``'s knobs."""
    return x86_depthwise.schedule_depthwise_conv2d_nchw(
        outs, knobs_of(cfg, _DEPTHWISE_NCHWC_KNOBS))


# ---- batch_matmul_pack.x86 ----------------------------------------------------------------

_BATCH_MATMUL_KNOBS = {"tile_y": lambda c: entity_size(c, "tile_y"),
                       "tile_x": lambda c: entity_size(c, "tile_x"),
                       "tile_k": lambda c: entity_size(c, "tile_k")}


@register_topi_compute("batch_matmul_pack.x86")
def batch_matmul_pack(cfg, x, y, out_dtype=None, transpose_b=True):
    """Batched ``x @ op(y)`` through a packed ``y``, tile sizes from ``cfg``."""
    b, m, k = get_const_tuple(x.shape)
    n = get_const_tuple(y.shape)[1 if transpose_b else 2]
    lanes = _lanes_of(n)
    cfg.define_split("tile_y", m, num_outputs=2, filter=lambda e: e.size[-1] <= 8)
    cfg.define_split("tile_x", n, num_outputs=2, filter=lambda e: e.size[-1] in lanes)
    cfg.define_split("tile_k", k, num_outputs=2, filter=lambda e: e.size[-1] <= 16)
    cfg.add_flop(2 * max(b, get_const_tuple(y.shape)[0]) * m * n * k)
    return x86_batch_matmul.batch_matmul_pack(x, y, out_dtype, transpose_b,
                                              knobs_of(cfg, _BATCH_MATMUL_KNOBS))


@register_topi_schedule("batch_matmul_pack.x86")
def schedule_batch_matmul_pack(cfg, outs):
    """:func:`kiln.topi.x86.batch_matmul.schedule_batch_matmul_pack` with ``cfg``'s tiles."""
    return x86_batch_matmul.schedule_batch_matmul_pack(outs, knobs_of(cfg, _BATCH_MATMUL_KNOBS))


# ---- matmul_pack.x86 (nn.matmul, e.g. kiln.jit's ``a @ b``) --------------------------------

def _matmul_sizes(a_shape: tuple, b_shape: tuple, transpose_a: bool,
                  transpose_b: bool) -> tuple[int, int, int]:
    """``(m, n, k)`` of ``op(a) @ op(b)``."""
    m, k = a_shape[::-1] if transpose_a else a_shape
    n = b_shape[0] if transpose_b else b_shape[1]
    return m, n, k


@register_topi_compute("matmul_pack.x86")
def matmul_pack(cfg, a, b, out_dtype=None, transpose_a=False, transpose_b=False):
    """``op(a) @ op(b)`` through dense_pack.x86's micro-kernel, tile sizes from ``cfg``."""
    m, n, k = _matmul_sizes(get_const_tuple(a.shape), get_const_tuple(b.shape), transpose_a,
                            transpose_b)
    _dense_space(cfg, m, n, k)
    return x86_matmul.matmul_pack(a, b, None, out_dtype, transpose_a, transpose_b,
                                  knobs_of(cfg, _DENSE_KNOBS))


@register_topi_schedule("matmul_pack.x86")
def schedule_matmul_pack(cfg, outs):
    """:func:`kiln.topi.x86.matmul.schedule_matmul_pack` with ``cfg``'s tiles."""
    return x86_matmul.schedule_matmul_pack(outs, knobs_of(cfg, _DENSE_KNOBS))


# template name -> the schedule config of a tuned ConfigEntity
KNOBS = {"dense_pack.x86": lambda cfg: knobs_of(cfg, _DENSE_KNOBS),
         "matmul_pack.x86": lambda cfg: knobs_of(cfg, _DENSE_KNOBS),
         "conv2d_nchw.x86": lambda cfg: knobs_of(cfg, _CONV_KNOBS),
         "conv2d_NCHWc.x86": lambda cfg: knobs_of(cfg, _NCHWC_KNOBS),
         "depthwise_conv2d_nchw.x86": lambda cfg: knobs_of(cfg, _DEPTHWISE_KNOBS),
         "depthwise_conv2d_NCHWc.x86": lambda cfg: knobs_of(cfg, _DEPTHWISE_NCHWC_KNOBS),
         "batch_matmul_pack.x86": lambda cfg: knobs_of(cfg, _BATCH_MATMUL_KNOBS)}


# ---- the config of the untuned schedule ---------------------------------------------------

def _default_knobs(task: Any) -> dict | None:
    """The knob values kiln's default schedule picks for ``task``'s workload (None: the
    default is no config of the space)."""
    args = deserialize_args(task.args)
    if task.name in ("dense_pack.x86", "batch_matmul_pack.x86", "matmul_pack.x86"):
        x, y = (get_const_tuple(t.shape) for t in args[:2])
        if task.name == "matmul_pack.x86":
            m, n, k = _matmul_sizes(x, y, args[3], args[4])
        else:
            transpose_b = task.name == "dense_pack.x86" or args[3]
            m, k = x[-2], x[-1]
            n = y[-2] if transpose_b else y[-1]
        cfg = x86_dense.DEFAULT_CONFIG
        # the untuned kernels' block: dense packs a power of two where one divides
        lanes = (x86_dense.pack_lanes(n, cfg["tile_x"]) if task.name == "dense_pack.x86"
                 else divisor_at_most(n, cfg["tile_x"]))
        ty, blocks = x86_dense.register_block(m, n // lanes, lanes, cfg)
        knobs = {"tile_y": ty, "tile_x": lanes, "tile_k": divisor_at_most(k, cfg["tile_k"])}
        if task.name != "batch_matmul_pack.x86":
            knobs["blocks"] = blocks
        return knobs
    data, kernel, strides, padding, dilation = args[:5]
    if task.name == "conv2d_NCHWc.x86":
        return _nchwc_default_knobs(data, kernel, strides, padding, dilation)
    if task.name == "depthwise_conv2d_NCHWc.x86":
        _, c, h, w, kh, kw = _depthwise_nchwc_sizes(get_const_tuple(data.shape),
                                                    get_const_tuple(kernel.shape))
        _, ow = _nchwc_geometry(h, w, kh, kw, strides, padding, dilation)
        return {"c_bn": x86_conv2d.channel_block(c),
                "tile_ow": x86_depthwise.tile_width(ow, x86_depthwise.DEFAULT_CONFIG)}
    _, ow, _, kw = _conv_geometry(data, kernel, strides, padding, dilation)
    o = get_const_tuple(kernel.shape)[0]
    if task.name == "conv2d_nchw.x86":
        bn, tile = x86_conv2d.block_shape(o, ow, x86_conv2d.DEFAULT_CONFIG, kw)
        return {"ic_bn": 1, "oc_bn": bn, "tile_ow": tile,
                "unroll_kw": x86_conv2d.DEFAULT_CONFIG["unroll_kw"]}
    cfg = x86_depthwise.DEFAULT_CONFIG
    if cfg["planes"] and _pair(strides)[1] == 1:
        return None  # untuned, plane by plane: a scheme outside the channel-blocked space
    return {"c_bn": divisor_at_most(o, cfg["c_bn"]),
            "tile_ow": x86_depthwise.tile_width(ow, cfg)}


def _nchwc_default_knobs(data, kernel, strides, padding, dilation) -> dict:
    """What the untuned blocked conv runs: kiln's activation blocks and register block."""
    _, c, h, w, o, kh, kw = nchwc_sizes(get_const_tuple(data.shape),
                                        get_const_tuple(kernel.shape))
    _, ow = _nchwc_geometry(h, w, kh, kw, strides, padding, dilation)
    ic_bn, oc_bn = nchwc_blocks(c, o, {})
    knobs = {"ic_bn": ic_bn, "oc_bn": oc_bn,
             "tile_ow": x86_conv2d.tile_width(oc_bn, ow, x86_conv2d.DEFAULT_CONFIG, kw)}
    if kh > 1 or kw > 1:
        knobs["unroll_kw"] = knobs["blocked_unroll_kw"] = \
            x86_conv2d.DEFAULT_CONFIG["blocked_unroll_kw"]
    else:
        knobs["tile_oh"] = x86_conv2d.DEFAULT_CONFIG["tile_oh"]
    return knobs


def _default_index(task: Any) -> int | None:
    want = _default_knobs(task)
    if want is None:
        return None
    space = task.config_space
    for index in range(space.range_length):
        if KNOBS[task.name](space.get(index)) == want:
            return index
    return None  # the default lies outside the space (e.g. a tile the filter excludes)


DEFAULT_CONFIG_INDEX.update({name: _default_index for name in KNOBS})


# ---- Relay calls -> workloads -------------------------------------------------------------

def _static_shape(t: Any) -> tuple[int, ...] | None:
    dims = [getattr(d, "value", d) for d in t.shape]
    return tuple(dims) if all(isinstance(d, int) for d in dims) else None


def _tensor(shape: tuple, dtype: Any) -> tuple:
    return ("TENSOR", tuple(shape), str(dtype))


def _ints(values: Any) -> tuple:
    return tuple(int(getattr(v, "value", v)) for v in values)


def _dense_task(attrs, inputs, out_type, packed=False):
    data, weight = (_static_shape(t) for t in inputs[:2])
    if data is None or weight is None or len(data) != 2:
        return None
    if packed:  # [N / n, K, n] -> [N, K]
        weight = (weight[0] * weight[2], weight[1])
    return "dense_pack.x86", (_tensor(data, inputs[0].dtype), _tensor(weight, inputs[1].dtype),
                              None, str(out_type.dtype))


def _conv_task(name, packed=False):
    def task(attrs, inputs, out_type):
        data, kernel = (_static_shape(t) for t in inputs[:2])
        if data is None or kernel is None:
            return None
        if packed:  # [O / bn, C, KH, KW, bn] -> [O, C, KH, KW]
            kernel = (kernel[0] * kernel[4], *kernel[1:4])
        return name, (_tensor(data, inputs[0].dtype), _tensor(kernel, inputs[1].dtype),
                      _ints(attrs.strides), _ints(attrs.padding), _ints(attrs.dilation),
                      str(out_type.dtype))
    return task


def _nchwc_task(attrs, inputs, out_type):
    """The NCHW-terms ``conv2d_NCHWc.x86`` workload of a float32 conv (groups 1), whatever
    layouts its data and kernel are in now: one record tunes the NCHW call and the blocked
    one AlterOpLayout makes of it."""
    data, kernel = (_static_shape(t) for t in inputs[:2])
    if data is None or kernel is None or attrs.groups != 1 or \
            str(out_type.dtype) != "float32" or str(inputs[0].dtype) != "float32":
        return None
    n, c, h, w, o, kh, kw = nchwc_sizes(data, kernel)
    return "conv2d_NCHWc.x86", (_tensor((n, c, h, w), inputs[0].dtype),
                                _tensor((o, c, kh, kw), inputs[1].dtype), _ints(attrs.strides),
                                _ints(attrs.padding), _ints(attrs.dilation), "NCHW", "NCHW",
                                str(out_type.dtype))


def _nchw_conv_tasks(attrs, inputs, out_type):
    """An NCHW conv: the ``conv2d_NCHWc.x86`` task where AlterOpLayout blocks it (as TVM's
    x86 strategy names NCHW convs), and the older ``conv2d_nchw.x86`` workload, whose
    records (logs from before the NCHWc template) still apply to convs that stay NCHW."""
    legacy = _conv_task("conv2d_nchw.x86")(attrs, inputs, out_type)
    nchwc = _nchwc_task(attrs, inputs, out_type)
    if nchwc is None or nchwc[1][1][1][0] < x86_conv2d.MIN_BLOCKED_CHANNELS:
        return legacy
    return [nchwc] if legacy is None else [nchwc, legacy]


def _depthwise_nchwc_task(attrs, inputs, out_type):
    """The NCHW-terms ``depthwise_conv2d_NCHWc.x86`` workload of a float32 depthwise conv
    (multiplier 1), whatever layouts its data and kernel are in now."""
    data, kernel = (_static_shape(t) for t in inputs[:2])
    if data is None or kernel is None or str(out_type.dtype) != "float32" or \
            str(inputs[0].dtype) != "float32":
        return None
    n, c, h, w, kh, kw = _depthwise_nchwc_sizes(data, kernel)
    if attrs.groups != c or kernel[0] * (kernel[-1] if len(kernel) == 6 else 1) != c:
        return None
    return "depthwise_conv2d_NCHWc.x86", (
        _tensor((n, c, h, w), inputs[0].dtype), _tensor((c, 1, kh, kw), inputs[1].dtype),
        _ints(attrs.strides), _ints(attrs.padding), _ints(attrs.dilation), "NCHW", "NCHW",
        str(out_type.dtype))


def _nchw_depthwise_tasks(attrs, inputs, out_type):
    """An NCHW depthwise conv: the NCHWc task where AlterOpLayout blocks it, and the older
    ``depthwise_conv2d_nchw.x86`` workload (its records still apply to NCHW-only convs)."""
    legacy = _conv_task("depthwise_conv2d_nchw.x86")(attrs, inputs, out_type)
    nchwc = _depthwise_nchwc_task(attrs, inputs, out_type)
    if nchwc is None or nchwc[1][1][1][0] < x86_conv2d.MIN_BLOCKED_CHANNELS:
        return legacy
    return [nchwc] if legacy is None else [nchwc, legacy]


def relay_task_specs(impl_name: str, attrs: Any, inputs: list, out_type: Any) -> list:
    """The ``(task_name, args)`` workloads a Relay call's implementation may be tuned as,
    the one task extraction gives first (the others are only looked up)."""
    make = RELAY_TASKS.get(impl_name)
    found = None if make is None else make(attrs, inputs, out_type)
    if found is None:
        return []
    return found if isinstance(found, list) else [found]


def _matmul_task(attrs, inputs, out_type):
    a, b = (_static_shape(t) for t in inputs[:2])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    return "matmul_pack.x86", (_tensor(a, inputs[0].dtype), _tensor(b, inputs[1].dtype),
                               str(out_type.dtype), bool(attrs.transpose_a),
                               bool(attrs.transpose_b))


def _batch_matmul_task(attrs, inputs, out_type):
    x, y = (_static_shape(t) for t in inputs[:2])
    if x is None or y is None:
        return None
    return "batch_matmul_pack.x86", (_tensor(x, inputs[0].dtype), _tensor(y, inputs[1].dtype),
                                     str(out_type.dtype), bool(attrs.transpose_b))


# Relay implementation name -> (attrs, inputs, out_type) -> (task_name, serialized args), a
# list of them (the first is extracted, all are looked up), or None
RELAY_TASKS = {
    "dense_pack.x86": _dense_task,
    "contrib_dense_pack.x86": lambda a, i, t: _dense_task(a, i, t, packed=True),
    "conv2d_nchw.x86": _nchw_conv_tasks,
    "conv2d_NCHWc.x86": _nchwc_task,
    "conv2d_nchw_prepacked.x86": _conv_task("conv2d_nchw.x86", packed=True),
    "depthwise_conv2d_nchw.x86": _nchw_depthwise_tasks,
    "depthwise_conv2d_NCHWc.x86": _depthwise_nchwc_task,
    "batch_matmul_pack.x86": _batch_matmul_task,
    "matmul_pack.x86": _matmul_task,
}
