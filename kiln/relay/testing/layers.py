"""Layer helpers of TVM's ``relay.testing.layers``: each creates its named weight variables.

Weights are left unannotated (InferType derives their shapes) unless the caller passes one.
"""

from __future__ import annotations

from typing import Any

from kiln import relay

__all__ = ["batch_norm_infer", "conv2d", "conv2d_transpose", "dense_add_bias",
           "conv_kernel_layout"]


def batch_norm_infer(data: Any, gamma: Any = None, beta: Any = None, moving_mean: Any = None,
                     moving_var: Any = None, **kwargs: Any) -> Any:
    """Inference batch norm with ``<name>_gamma``/``_beta``/``_moving_mean``/``_moving_var``."""
    name = kwargs.pop("name")
    gamma = gamma if gamma is not None else relay.var(name + "_gamma")
    beta = beta if beta is not None else relay.var(name + "_beta")
    moving_mean = moving_mean if moving_mean is not None else relay.var(name + "_moving_mean")
    moving_var = moving_var if moving_var is not None else relay.var(name + "_moving_var")
    return relay.nn.batch_norm(data, gamma, beta, moving_mean, moving_var, **kwargs)[0]


def conv2d(data: Any, weight: Any = None, **kwargs: Any) -> Any:
    """``nn.conv2d`` with weight ``<name>_weight``."""
    name = kwargs.pop("name")
    weight = weight if weight is not None else relay.var(name + "_weight")
    return relay.nn.conv2d(data, weight, **kwargs)


def conv2d_transpose(data: Any, weight: Any = None, **kwargs: Any) -> Any:
    """``nn.conv2d_transpose`` with weight ``<name>_weight``."""
    name = kwargs.pop("name")
    weight = weight if weight is not None else relay.var(name + "_weight")
    return relay.nn.conv2d_transpose(data, weight, **kwargs)


def dense_add_bias(data: Any, weight: Any = None, bias: Any = None, units: int | None = None,
                   **kwargs: Any) -> Any:
    """``nn.dense`` + ``nn.bias_add`` with ``<name>_weight`` and ``<name>_bias``."""
    name = kwargs.pop("name")
    weight = weight if weight is not None else relay.var(name + "_weight")
    bias = bias if bias is not None else relay.var(name + "_bias")
    out = relay.nn.dense(data, weight, units, **kwargs)
    return relay.nn.bias_add(out, bias, axis=-1)


def conv_kernel_layout(data_layout: str, is_depthwise: bool = False) -> str:
    """The kernel layout TVM's workloads pair with ``data_layout``."""
    layouts = {("NCHW", False): "OIHW", ("NCHW", True): "OIHW", ("NHWC", False): "HWIO",
               ("NHWC", True): "HWOI", ("NCDHW", False): "OIDHW", ("NDHWC", False): "DHWIO"}
    if (data_layout, is_depthwise) not in layouts:
        raise ValueError(f"no kernel layout for data layout {data_layout!r}"
                         f"{' (depthwise)' if is_depthwise else ''}")
    return layouts[(data_layout, is_depthwise)]
