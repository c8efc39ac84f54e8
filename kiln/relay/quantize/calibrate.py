"""Calibration for ``relay.quantize``: the range ("scale") of each tensor to be quantized.

Entry points: :func:`collect_stats`, :func:`activation_scale`, :func:`weight_scale`,
:func:`kl_divergence_scale`.

A scale S is the largest magnitude kept; an ``nbit``-bit signed value then has the step
``S / 2**(nbit - 1)`` (TVM's ``dom_scale``). Activations get S from the qconfig's mode:
``global_scale`` (a constant), ``percentile`` (the 99.999th percentile of |x| over the
dataset) or ``kl_divergence`` (the threshold whose 255-level quantized histogram is closest,
in KL divergence, to the 8001-bin float histogram: TensorRT's method, as TVM's calibrate).
Weights get ``power2`` (the next power of two over max|w|) or ``max``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["collect_stats", "activation_scale", "weight_scale", "kl_divergence_scale"]


def collect_stats(func: Any, points: list[Any], dataset: Any) -> list[np.ndarray]:
    """The flattened values of each expression in ``points`` over every sample of ``dataset``.

    ``func`` is the float model (its params bound); a dataset is an iterable of dicts mapping
    input names to arrays, as in TVM.
    """
    import kiln
    from kiln.contrib import graph_executor
    from kiln.ir.module import IRModule
    from kiln.relay import build_module
    from kiln.relay import expr as rx

    if not points:
        return []
    if dataset is None:
        raise TVMError("relay.quantize: this calibrate_mode needs a dataset (an iterable of "
                       "{input name: array} dicts)")
    probe = IRModule.from_expr(rx.Function(func.params, rx.Tuple(list(points))))
    with kiln.transform.PassContext(opt_level=3):
        lib = build_module.build(probe, target="llvm")
    runner = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    chunks: list[list[np.ndarray]] = [[] for _ in points]
    samples = 0
    for sample in dataset:
        if not isinstance(sample, dict):
            raise TVMError(f"relay.quantize: a dataset sample must be a dict of input arrays, "
                           f"got {type(sample).__name__}")
        for name, value in sample.items():
            runner.set_input(name, value)
        runner.run()
        for i in range(len(points)):
            chunks[i].append(runner.get_output(i).numpy().reshape(-1))
        samples += 1
    if samples == 0:
        raise TVMError("relay.quantize: the calibration dataset is empty")
    return [np.concatenate(c) for c in chunks]


def weight_scale(weight: np.ndarray, mode: str) -> float:
    """S for a weight tensor: ``power2`` = 2**ceil(log2(max|w|)), ``max`` = max|w|."""
    peak = float(np.max(np.abs(weight))) if weight.size else 0.0
    if peak == 0.0:
        return 1.0
    return float(2.0 ** np.ceil(np.log2(peak))) if mode == "power2" else peak


def activation_scale(values: np.ndarray | None, cfg: Any) -> float:
    """S for an activation, by the qconfig's calibrate_mode."""
    if cfg.calibrate_mode == "global_scale":
        return float(cfg.global_scale)
    peak = float(np.max(np.abs(values))) if values is not None and values.size else 0.0
    if peak == 0.0:
        return 1.0
    if cfg.calibrate_mode == "percentile":
        return float(np.percentile(np.abs(values), 99.999)) or peak
    return kl_divergence_scale(values)


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray | None:
    """Move a little mass onto zero bins so KL(p || q) is finite (TensorRT's smoothing)."""
    zeros = p == 0
    n_zero, n_nonzero = int(zeros.sum()), int((~zeros).sum())
    if n_nonzero == 0:
        return None
    eps1 = eps * n_zero / n_nonzero
    if eps1 >= 1.0:
        return None
    out = p.astype("float64")
    out[zeros] = eps
    out[~zeros] -= eps1
    return out


def kl_divergence_scale(values: np.ndarray, num_bins: int = 8001,
                        num_quantized_bins: int = 255) -> float:
    """The clipping threshold that minimises KL(float histogram || quantized histogram)."""
    values = np.asarray(values, "float64").reshape(-1)
    peak = float(np.max(np.abs(values)))
    if peak == 0.0:
        return 1.0
    hist, edges = np.histogram(values, bins=num_bins, range=(-peak, peak))
    zero = num_bins // 2
    half_q = num_quantized_bins // 2
    best, best_threshold = np.inf, peak
    for i in range(half_q, zero + 1):
        start, stop = zero - i, zero + i + 1
        sliced = hist[start:stop].astype("float64")
        p = sliced.copy()
        p[0] += hist[:start].sum()     # outliers clip into the edge bins
        p[-1] += hist[stop:].sum()
        nonzero = sliced != 0
        # merge into num_quantized_bins groups (the last takes the remainder), then spread
        # each group's mass evenly over its non-empty bins
        merged = sliced.size // num_quantized_bins
        starts = np.arange(num_quantized_bins) * merged
        sums = np.add.reduceat(sliced, starts)
        counts = np.add.reduceat(nonzero.astype("float64"), starts)
        group = np.minimum(np.arange(sliced.size) // merged, num_quantized_bins - 1)
        per_bin = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
        q = np.where(nonzero, per_bin[group], 0.0)
        ps, qs = _smooth(p), _smooth(q)
        if ps is None or qs is None:
            continue
        ps, qs = ps / ps.sum(), qs / qs.sum()
        divergence = float(np.sum(ps * np.log(ps / qs)))
        if divergence < best:
            best, best_threshold = divergence, float(edges[stop])
    return best_threshold
